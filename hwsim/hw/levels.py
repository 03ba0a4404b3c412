"""The levels of the memory path a tile's bytes cross: each the private, idle-at-start copy of
one unit of the device (hwsim/hw/units.py), which builds it (`Unit.level`): the device lists
its units on that path in order (`Device.memory`), and the memory path walks their levels
(hwsim/engine/memory_path.py) without knowing their kinds.

A level holds servers and numbers, nothing of a device: a kernel timed on one device's levels is
timed for every identical device of a cluster (hwsim/engine/replay.py's shared book).

Each level says, in one method each, what crosses it:
- `serve(now, read, read_at, write, write_at, l2, sram, group)`: one request of a tile: HBM
  reads of `read` bytes at `read_at` over the channels of `group` (-1: all), writes at
  `write_at`, L2 hits of `l2` bytes, of which `sram` are read from the on-chip SRAM; returns
  when its part is done (None: nothing of it here);
- `serve_round(...)`: the same for a round of equal requests arriving at sorted times
  (hwsim/engine/tile_rounds.py), one departure each;
- `fill(now, address, chunks, stack)`: a batch of a copy's chunks, (offset, bytes) from
  `address`, issued together at `now` from HBM into the on-chip SRAM; returns when the last is
  done there;
- `demand(start)`: what the item timed from `start` asked of it, which the timer puts in
  `Effect.demand` under the level's kind (the kind of the unit that reads it);
- `reset()`: idle, nothing served.
"""

from __future__ import annotations

from bisect import bisect_left

import numpy as np

from hwsim.hw.queues import hbm_serve, serve_single
from hwsim.hw.chip import ChipSpec
from hwsim.hw.hbm import Hbm
from hwsim.hw.server import Server


class BusLevel:
    """The on-chip network: every byte a tile moves to or from HBM or the L2 crosses it, and
    every byte a copy moves from HBM into the SRAM."""

    def __init__(self, kind: str, rate: float):
        self.kind = kind          # the kind of unit whose demand it times
        self.server = Server(kind, rate)

    def reset(self) -> None:
        srv = self.server
        srv.free_at = srv.busy_s = srv.units = 0.0

    def demand(self, start: float) -> tuple[float, float, float] | None:
        """(busy seconds, units served, done at offset from `start`)."""
        srv = self.server
        return srv.busy_s, srv.units, srv.free_at - start if srv.units else 0.0

    def serve(self, now: float, read: float, read_at: float, write: float, write_at: float, l2: float,
              sram: float, group: int) -> float | None:
        return self.server.serve(now, read + write + l2)

    @staticmethod
    def shifted(d: tuple, starts: list[float], shifts: list[float]) -> tuple:
        """demand() of an item whose waves moved (wave i started at starts[i], now shifts[i]
        later: a power governor's probe re-timing it, hwsim/engine/timer.py): it is done within
        the wave of its last request, after the wave's start, so it moves with that wave."""
        busy, served, until = d
        if not served:
            return busy, served, 0.0
        return busy, served, until + shifts[max(bisect_left(starts, until) - 1, 0)]

    def serve_round(self, a: np.ndarray, read: float, read_at: np.ndarray | None, write: float,
                    write_at: np.ndarray | None, l2: float, sram: float, group: int) -> np.ndarray | None:
        return serve_single(self.server, a, read + write + l2)

    def fill(self, now: float, address: float, chunks: list[tuple[float, float]], stack: int) -> float:
        """The chunks, each served in turn from `now` (Server.serve's recursion, inline: a
        prefetching run times thousands of copies, a batch of eight chunks each)."""
        srv = self.server
        rate, busy, units = srv.rate, srv.busy_s, srv.units
        t = now if now > srv.free_at else srv.free_at
        for _, nbytes in chunks:
            service = nbytes / rate
            t += service
            busy += service
            units += nbytes
        srv.free_at, srv.busy_s, srv.units = t, busy, units
        return t


class L2Level(BusLevel):
    """The L2, for hits (an HBM byte's pass through it is the bus's and HBM's time), and the
    copies landing in its lines set aside as SRAM."""

    def serve(self, now, read, read_at, write, write_at, l2, sram, group):
        return self.server.serve(now, l2) if l2 else None

    def serve_round(self, a, read, read_at, write, write_at, l2, sram, group):
        return serve_single(self.server, a, l2) if l2 else None


class SramLevel(BusLevel):
    """The on-chip SRAM that holds experts' weights: the reads of a kernel whose weights are
    resident there (`sram`, of the L2 hits), and the copies landing in it."""

    def serve(self, now, read, read_at, write, write_at, l2, sram, group):
        return self.server.serve(now, sram) if sram else None

    def serve_round(self, a, read, read_at, write, write_at, l2, sram, group):
        return serve_single(self.server, a, sram) if sram else None


class HbmLevel:
    """The HBM channels: reads of `read` bytes at `read_at` over the channels of `group` (-1:
    all), writes at `write_at` at write efficiency (the HBM's byte counters charged)."""

    def __init__(self, kind: str, chip: ChipSpec):
        self.kind = kind
        self.hbm = Hbm.of_chip(chip)

    def demand(self, start: float) -> tuple | None:
        """Per channel the item touched (None: none): the channels, busy seconds, bytes served,
        done at offset from `start`."""
        bank = self.hbm.bank
        ch = np.flatnonzero(bank.units)
        return (ch, bank.busy_s[ch], bank.units[ch], bank.free_at[ch] - start) if len(ch) else None

    @staticmethod
    def shifted(d: tuple, starts: list[float], shifts: list[float]) -> tuple:
        """demand() of an item whose waves moved, as BusLevel.shifted, channel by channel."""
        channels, busy, served, until = d
        if len(starts) == 1:
            until = until + shifts[0]
        else:
            until = until + np.asarray(shifts)[np.maximum(np.searchsorted(starts, until) - 1, 0)]
        return channels, busy, served, until

    def reset(self) -> None:
        hbm = self.hbm
        bank = hbm.bank
        bank.free_at[:] = 0.0
        bank.busy_s[:] = 0.0
        bank.units[:] = 0.0
        bank.last_free = 0.0
        hbm.read_bytes = hbm.write_bytes = 0.0

    def serve(self, now, read, read_at, write, write_at, l2, sram, group):
        done = None
        if read:
            done = self.hbm.read(now, read_at, read, group)
        if write:
            w = self.hbm.write(now, write_at, write)
            done = w if done is None or w > done else done
        return done

    def serve_round(self, a, read, read_at, write, write_at, l2, sram, group):
        hbm, n, done = self.hbm, len(a), None
        if read:
            hbm.read_bytes += read * n
            done = hbm_serve(hbm, a, read_at, read, group, 1.0)
        if write:
            hbm.write_bytes += write * n
            w = hbm_serve(hbm, a, write_at, write, -1, hbm.write_scale)
            done = w if done is None else np.maximum(done, w)
        return done

    def fill(self, now, address, chunks, stack):
        read, done = self.hbm.read, now
        for offset, nbytes in chunks:
            d = read(now, address + offset, nbytes, stack)
            if d > done:
                done = d
        return done
