"""HBM as stacks x pseudo-channels with address interleaving.

Consecutive `interleave_bytes` granules of the physical address space go to consecutive
channels, so a long contiguous read spreads evenly over every channel while a short one
lands on a few: uneven channel load, and the queueing it causes, come out of the addresses.
Reads and writes share a channel; writes run at `write_efficiency` of the read rate
(read/write turnaround on the bus), both calibrated.
"""

from __future__ import annotations

import numpy as np

from hwsim.hw.server import ServerBank

LOADS_LIMIT = 10_000      # distinct ranges' channel loads kept (Hbm._channels_of)


class Hbm:
    def __init__(self, *, stacks: int, channels_per_stack: int, peak_bytes_s: float,
                 read_efficiency: float, write_efficiency: float, interleave_bytes: int):
        self.stacks = stacks
        self.channels = stacks * channels_per_stack
        self.channels_per_stack = channels_per_stack
        self.interleave = interleave_bytes
        self.write_scale = write_efficiency / read_efficiency
        self._loads: dict = {}
        per_channel = peak_bytes_s * read_efficiency / self.channels
        self.bank = ServerBank("hbm", self.channels, per_channel)
        self.read_bytes = 0.0
        self.write_bytes = 0.0

    @classmethod
    def of_chip(cls, chip) -> "Hbm":
        """The chip's HBM channels (hwsim.hw.chip.ChipSpec). Not the only reader of its HBM
        fields: the device's per-stack units (hw/device.py), flows (parallel/flows.py)
        and the address map (model/schedule.py) read them too."""
        return cls(stacks=chip.hbm_stacks, channels_per_stack=chip.hbm_channels_per_stack,
                   peak_bytes_s=chip.hbm_peak_bytes_s, read_efficiency=chip.hbm_read_efficiency,
                   write_efficiency=chip.hbm_write_efficiency, interleave_bytes=chip.hbm_interleave_bytes)

    def layout(self, nbytes: float, stack: int = -1) -> tuple[int, int, int]:
        """(first channel, channel count, granules) of a range of `nbytes`: on one stack's
        channels (stack >= 0) or interleaved over all; each channel of the range takes
        granules // count granules, and `granules % count` consecutive ones take one more,
        starting at the channel of the range's first address."""
        lo, n = (stack * self.channels_per_stack, self.channels_per_stack) if stack >= 0 else (0, self.channels)
        return lo, n, max(1, int(np.ceil(nbytes / self.interleave)))

    def spread(self, address: int, nbytes: float, stack: int = -1) -> np.ndarray:
        """Bytes each channel serves for a contiguous range [address, address+nbytes).

        With `stack` >= 0 the range is placed on that stack's channels only (per-expert
        placement); otherwise it interleaves over every channel of the chip.
        """
        per = np.zeros(self.channels)
        if nbytes <= 0:
            return per
        lo, n, granules = self.layout(nbytes, stack)
        full_rounds, rest = divmod(granules, n)
        per[lo:lo + n] += full_rounds
        first = (int(address) // self.interleave) % n
        if rest:
            idx = lo + (first + np.arange(rest)) % n
            per[idx] += 1
        return per * (nbytes / granules)

    def read(self, now: float, address: int, nbytes: float, stack: int = -1) -> float:
        self.read_bytes += nbytes
        return self.bank.serve_on(now, *self._channels_of(address, nbytes, stack))

    def write(self, now: float, address: int, nbytes: float, stack: int = -1) -> float:
        self.write_bytes += nbytes
        return self.bank.serve_on(now, *self._channels_of(address, nbytes, stack), rate_scale=self.write_scale)

    def _channels_of(self, address: int, nbytes: float, stack: int) -> tuple[np.ndarray, np.ndarray]:
        """(the channels a range touches, in order; the bytes each serves): spread() without
        its zeros, kept per (first channel, size, stack), the only things it depends on (a
        kernel's waves read equal ranges, and numpy's per-call cost is most of a read)."""
        n = self.channels_per_stack if stack >= 0 else self.channels
        key = ((int(address) // self.interleave) % n, nbytes, stack)
        hit = self._loads.get(key)
        if hit is None:
            if len(self._loads) >= LOADS_LIMIT:
                self._loads.clear()
            per = self.spread(address, nbytes, stack)
            touched = np.flatnonzero(per > 0)
            if len(touched) and touched[-1] - touched[0] == len(touched) - 1:   # a run: a slice
                touched = slice(int(touched[0]), int(touched[-1]) + 1)          # indexes faster
            hit = self._loads[key] = (touched, per[touched])
        return hit

    def imbalance(self) -> float:
        """max / mean bytes served per channel so far (1.0 = perfectly even)."""
        units = self.bank.units
        return float(units.max() / units.mean()) if units.mean() > 0 else 1.0

    def bytes_per_channel(self) -> np.ndarray:
        return self.bank.units.copy()
