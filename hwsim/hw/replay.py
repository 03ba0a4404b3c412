"""Reuse of identical work: a kernel simulated once per shape, then replayed.

Within a step, every layer issues the same kernels on the same shapes. At `kernel` fidelity
with one stream, every server is idle when a kernel starts (a kernel ends only after its
bytes have landed), so a kernel's timing depends on its shape and on where its addresses
start in the channel interleave, not on what ran before. We record the first simulation of
each such kernel (its duration, attribution and what it did to each server) and replay it:
the same server accounting is applied, so utilisation, channel bytes and results stay
identical to simulating it again. Whenever a server is still busy at the kernel's start
(an expert prefetch in flight), the kernel is simulated, not replayed.

A replay only counts itself; `flush` adds the counted replays' server accounting in one go
(before anyone reads busy time or bytes). Servers' free times need no update: a replayed
kernel runs alone, so every server it used is free again before the next kernel starts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hwsim.metrics import Component
from hwsim.model.kernel import Kernel


class _Key:
    """A replay key with its hash computed once: the same Kernel object comes back every step
    (the schedule memoises them), and the lookup then matches it by identity."""

    __slots__ = ("hash", "parts")

    def __init__(self, parts: tuple):
        self.parts = parts
        self.hash = hash(parts)

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other) -> bool:
        return self.parts == other.parts


def _shape(k: Kernel) -> tuple:
    """Everything that decides a kernel's timing except its name, layer and address."""
    return (k.tiles, k.hbm_read, k.l2_read, k.hbm_write, k.l2_write, k.tensor_flops, k.vector_flops,
            k.int_ops, k.decoder_elements, k.smem_bytes, k.dtype, k.data, k.compute, k.balanced,
            k.round_trips, k.start_trips, k.miss_trips, k.inflight_bytes, k.channel_group, k.mma_sync)


@dataclass
class _Effect:
    duration: float
    attribution: dict[Component, float]
    waves: int
    data: Component                  # the kernel's data component and HBM bytes, for the totals
    hbm_bytes: float
    scalar: list[tuple[object, float, float, float | None]]   # (server, busy, units, free_at offset)
    hbm_channels: np.ndarray | None  # channels the kernel touched (None: no HBM traffic)
    hbm_busy: np.ndarray | None
    hbm_units: np.ndarray | None
    hbm_free: np.ndarray | None      # their free_at, as offsets from the kernel's start
    hbm_read: float
    hbm_write: float
    pending: int = 0                 # replays whose accounting is not yet added


class KernelReplay:
    def __init__(self, system):
        self.system = system
        self.effects: dict[_Key, _Effect] = {}
        self.interned: dict[_Key, _Key] = {}
        self.hits = 0
        self.misses = 0

    def key(self, k: Kernel) -> _Key:
        """The kernel's shape and its start's place in the channel interleave; computed once per
        Kernel object (the schedule hands out the same objects step after step)."""
        if k.replay_key is None:
            hbm = self.system.hbm
            phase = (int(k.address) // hbm.interleave) % hbm.channels if (k.hbm_read or k.hbm_write) else 0
            key = _Key((phase, _shape(k)))
            k.replay_key = self.interned.setdefault(key, key)   # one object per distinct key
        return k.replay_key

    def time(self, k: Kernel, start: float) -> tuple[_Effect, bool] | None:
        """Time kernel `k` from `start`: (its effect, True) when replayed, (its new effect,
        False) when simulated for the first time, None when a server is still busy at
        `start` (the caller simulates it then). A replay's totals and server accounting are
        added at the next flush."""
        s = self.system
        if s.bus.free_at > start or s.l2.free_at > start or s.hbm.bank.last_free > start:
            return None
        effect = self.effects.get(k.replay_key or self.key(k))
        if effect is not None:
            self.hits += 1
            effect.pending += 1
            return effect, True
        self.misses += 1
        before = self._snapshot()
        end, parts, waves = s._kernel_at_once(k, start)
        effect = self.effects[k.replay_key] = self._diff(before, k, start, end, parts, waves)
        return effect, False

    def _snapshot(self):
        s = self.system
        bank = s.hbm.bank
        return ([(srv, srv.busy_s, srv.units, srv.free_at) for srv in (s.bus, s.l2)],
                bank.busy_s.copy(), bank.units.copy(), bank.free_at.copy(),
                s.hbm.read_bytes, s.hbm.write_bytes)

    def _diff(self, before, k: Kernel, start: float, end: float, parts, waves: int) -> _Effect:
        scalars, busy, units, free, rb, wb = before
        bank = self.system.hbm.bank
        scalar = [(srv, srv.busy_s - b, srv.units - u, (srv.free_at - start) if srv.free_at != f else None)
                  for srv, b, u, f in scalars]
        ch = np.flatnonzero(bank.free_at != free)
        if len(ch):
            hbm = (ch, (bank.busy_s - busy)[ch], (bank.units - units)[ch], bank.free_at[ch] - start)
        else:
            hbm = (None, None, None, None)
        return _Effect(end - start, parts, waves, k.data, k.hbm_bytes, scalar, *hbm,
                       self.system.hbm.read_bytes - rb, self.system.hbm.write_bytes - wb)

    def flush(self) -> None:
        """Add the totals and server accounting of every replay counted since the last flush."""
        hbm = self.system.hbm
        totals = self.system.totals
        for e in self.effects.values():
            n = e.pending
            if not n:
                continue
            totals.add(e.attribution, e.data, e.hbm_bytes, n)
            for srv, busy, units, _ in e.scalar:
                srv.busy_s += n * busy
                srv.units += n * units
            if e.hbm_channels is not None:
                hbm.bank.busy_s[e.hbm_channels] += n * e.hbm_busy
                hbm.bank.units[e.hbm_channels] += n * e.hbm_units
            hbm.read_bytes += n * e.hbm_read
            hbm.write_bytes += n * e.hbm_write
            e.pending = 0
