"""A device built from a chip profile: its named units, and the accounting of the work items
that ran on it.

Units (hwsim/hw/units.py), each with its own trace lane; a unit the chip lacks does not exist:
- SM groups of SM_GROUP SMs (lanes), filled in order by a work item's resident thread blocks,
  and the SM pool they make up (what concurrent items share: a fraction of all block slots);
- the L2, the HBM stacks, the on-chip bus;
- copy engines (expert prefetch into on-chip SRAM);
- a native sub-byte decoder, on what-if chips that have one;
- scale-up ports (NVLink: one each way) and a scale-out NIC, on profiles that give them.

`account` adds a work item's Effect to the units' totals (n runs at once: a stream adds its
replayed kernels in bulk at the end of a step, which keeps a 1,000-kernel step cheap);
`record` adds, while the device records, the busy intervals the item put on each lane.
"""

from __future__ import annotations

import math

import numpy as np

from hwsim.engine.effect import Effect
from hwsim.hw.chip import ChipSpec
from hwsim.hw.units import Unit

SM_GROUP = 16        # SMs per lane, about one GPC


class Device:
    def __init__(self, chip: ChipSpec, index: int = 0, copy_engines: int = 1):
        self.chip = chip
        self.index = index
        self.name = chip.name if index == 0 else f"{chip.name}#{index}"
        slots_per_sm = chip.cta_slots_per_sm
        self.slots = chip.sms * slots_per_sm
        groups = math.ceil(chip.sms / SM_GROUP)
        self.sm_groups = [Unit(f"SMs {g * SM_GROUP}-{min((g + 1) * SM_GROUP, chip.sms) - 1}", "sm",
                               (min((g + 1) * SM_GROUP, chip.sms) - g * SM_GROUP) * slots_per_sm, "slots")
                          for g in range(groups)]
        self.sm = Unit("SMs", "sm", self.slots, "slots")
        self.l2 = Unit("L2", "l2", chip.l2_bytes_s, "bytes")
        self.hbm_stacks = [Unit(f"HBM stack {s}", "hbm", chip.hbm_read_bytes_s / chip.hbm_stacks, "bytes")
                           for s in range(chip.hbm_stacks)]
        # every stack asked alike, as one unit of the arbiter (a collective's bytes spread over
        # them all: hwsim/parallel/flows.py); no lane of its own (not in `units`)
        self.hbm_all = Unit("HBM stacks", "hbm", chip.hbm_read_bytes_s, "bytes", members=tuple(self.hbm_stacks))
        for stack in self.hbm_stacks:
            stack.group = self.hbm_all
        self.bus = Unit("bus", "bus", chip.bus_bytes_s, "bytes")
        self.copy_engines = [Unit(f"copy engine {i}", "copy", chip.hbm_read_bytes_s, "bytes")
                             for i in range(copy_engines)]
        self.decoder = (Unit("decoder", "decoder", chip.decoder_elements_per_clk * chip.clock_hz * chip.sms,
                             "elements") if chip.decoder_elements_per_clk else None)
        self.scaleup_tx = self.scaleup_rx = self.nic = self.nic_rx = None
        if chip.scaleup_bytes_s:
            self.scaleup_tx = Unit("NVLink out", "scaleup", chip.scaleup_bytes_s, "bytes")
            self.scaleup_rx = Unit("NVLink in", "scaleup", chip.scaleup_bytes_s, "bytes")
        if chip.scaleout_bytes_s:
            # full duplex: one unit each way (what the device sends, what it receives)
            self.nic = Unit("NIC out", "scaleout", chip.scaleout_bytes_s, "bytes")
            self.nic_rx = Unit("NIC in", "scaleout", chip.scaleout_bytes_s, "bytes")
        channels = chip.hbm_stacks * chip.hbm_channels_per_stack
        self.channel_bytes = np.zeros(channels)        # bytes served per HBM pseudo-channel
        self._channel_busy = np.zeros(channels)
        self._stack_of = np.arange(channels) // chip.hbm_channels_per_stack
        self._pending: dict[Effect, int] = {}      # account_all's runs, added at the next sync
        # what this device derives from an effect, once: effects are shared by the devices of
        # a cluster (hwsim/engine/replay.py), these are this device's units
        self._shares: dict[Effect, dict[Unit, float]] = {}
        self._lanes_of: dict[Effect, list[tuple[list, float, float]]] = {}
        self.hbm_read_bytes = 0.0
        self.hbm_write_bytes = 0.0
        self.recording = False
        self._recorded: set = set()          # items recorded once (first_runs_only)
        self.recorded_once: set | None = None   # that set while only first runs are kept, else None

    # -- units -----------------------------------------------------------------------------
    @property
    def units(self) -> list[Unit]:
        """Every unit this device has, in lane order (the SM pool is drawn as its groups)."""
        out = [*self.sm_groups, self.l2, *self.hbm_stacks, self.bus, *self.copy_engines]
        out += [u for u in (self.decoder, self.scaleup_tx, self.scaleup_rx, self.nic, self.nic_rx) if u is not None]
        return out

    def record_intervals(self, on: bool, first_runs_only: bool = False) -> None:
        """Start (or stop) keeping busy intervals on every lane. A unit's interval list, once
        made, is kept (the lanes this device derived from an effect hold on to it: `record`).
        `first_runs_only`: only the first run of each item is kept, which still marks every
        lane the item ever uses as busy (the Gantt chart's rows), for the steps it does not draw."""
        self.recording = on
        self.recorded_once = self._recorded if first_runs_only else None
        if on:
            for u in self.units:
                if u.intervals is None:
                    u.intervals = []

    def stack_bytes(self) -> np.ndarray:
        return np.bincount(self._stack_of, weights=self.channel_bytes, minlength=self.chip.hbm_stacks)

    def imbalance(self) -> float:
        """max / mean bytes served per channel so far (1.0 = perfectly even)."""
        mean = self.channel_bytes.mean()
        return float(self.channel_bytes.max() / mean) if mean > 0 else 1.0

    # -- what an item asks of the units ------------------------------------------------------
    def shares(self, e: Effect, copy_engine: int | None = None) -> dict[Unit, float]:
        """The fraction of each unit the item uses while it runs alone: what it asks when it
        shares the device with items of other streams (hwsim/engine/sharing.py)."""
        if copy_engine is None and (known := self._shares.get(e)) is not None:
            return known
        t = e.duration
        out: dict[Unit, float] = {}
        if e.slots:
            out[self.sm] = e.slots / self.slots
        if e.channels is not None:
            per_stack = np.bincount(self._stack_of[e.channels], weights=e.channel_busy,
                                    minlength=self.chip.hbm_stacks)
            for s in np.flatnonzero(per_stack):     # Python floats: they become event times
                out[self.hbm_stacks[s]] = min(1.0, float(per_stack[s]) / (self.chip.hbm_channels_per_stack * t))
        for unit, (busy, served, _) in ((self.bus, e.bus), (self.l2, e.l2)):
            if served:
                out[unit] = min(1.0, busy / t)
        if e.decoder_s and self.decoder is not None:
            out[self.decoder] = min(1.0, e.decoder_s / (self.chip.sms * t))
        if copy_engine is not None:
            out[self.copy_engines[copy_engine]] = 1.0
            return out
        self._shares[e] = out
        return out

    # -- accounting ---------------------------------------------------------------------------
    def account(self, e: Effect, n: int = 1, copy_engine: int | None = None) -> None:
        """Add n runs of the item to the units' totals (the HBM stacks' at the next sync)."""
        if e.channels is not None:
            self.channel_bytes[e.channels] += n * e.channel_bytes
            self._channel_busy[e.channels] += n * e.channel_busy
        self._account_units(e, n, copy_engine)

    def account_all(self, counts: dict[Effect, int]) -> None:
        """account(e, n) for every (e, n) of `counts` (a stream's kernels that ran alone), left
        pending until the next sync(), which adds them all to the HBM channels in one bincount
        each: a many-GPU pass runs thousands of short segments (issue 33), and two indexed numpy
        adds per effect and segment were a sixth of a 64-GPU run."""
        pending = self._pending
        for e, n in counts.items():
            pending[e] = pending.get(e, 0) + n

    def _flush(self) -> None:
        pending, self._pending = self._pending, {}
        channels, nbytes, busy, runs = [], [], [], []
        for e, n in pending.items():
            if e.channels is not None:
                channels.append(e.channels)
                nbytes.append(e.channel_bytes)
                busy.append(e.channel_busy)
                runs.append(n)
            self._account_units(e, n, None)
        if channels:
            at = np.concatenate(channels)
            # each effect's per-channel figures times its runs, in one multiply: a pass leaves a
            # few hundred effects, and a small array product each cost more than the bincounts
            n = np.repeat(np.array(runs, dtype=float), [len(c) for c in channels])
            size = len(self.channel_bytes)
            self.channel_bytes += np.bincount(at, weights=np.concatenate(nbytes) * n, minlength=size)
            self._channel_busy += np.bincount(at, weights=np.concatenate(busy) * n, minlength=size)

    def _account_units(self, e: Effect, n: int, copy_engine: int | None) -> None:
        self.hbm_read_bytes += n * e.hbm_read
        self.hbm_write_bytes += n * e.hbm_write
        for unit, (busy, served, _) in ((self.bus, e.bus), (self.l2, e.l2)):
            unit.busy_s += n * busy
            unit.served += n * served
        if e.slots:
            self.sm.busy_s += n * e.duration * e.slots / self.slots
            self.sm.served += n * e.duration * e.slots
        if e.decoder_s and self.decoder is not None:
            self.decoder.busy_s += n * e.decoder_s / self.chip.sms
            self.decoder.served += n * e.decoder_s * self.decoder.rate / self.chip.sms
        if copy_engine is not None:
            unit = self.copy_engines[copy_engine]
            unit.busy_s += n * e.duration
            unit.served += n * e.hbm_read

    def sync(self) -> None:
        """Bring the HBM stacks' totals up to date from their channels' (and every unit's with
        what account_all left pending)."""
        if self._pending:
            self._flush()
        per_channel = self.chip.hbm_channels_per_stack
        busy = np.bincount(self._stack_of, weights=self._channel_busy, minlength=self.chip.hbm_stacks)
        for unit, b, served in zip(self.hbm_stacks, busy, self.stack_bytes()):
            unit.busy_s, unit.served = float(b) / per_channel, float(served)

    def record(self, e: Effect, start: float, end: float, label: str, copy_engine: int | None = None) -> None:
        """Busy intervals of one run: a unit is busy from the item's start until its last
        request there is served; an item stretched by sharing (end - start > duration alone)
        stretches its intervals in proportion."""
        once = self.recorded_once
        if once is not None:
            if e in once:
                return
            once.add(e)
        lanes = self._lanes_of.get(e)
        if lanes is None:
            lanes = self._lanes_of[e] = self._lanes(e)
        stretch = (end - start) / e.duration if e.duration > 0 else 1.0
        if stretch == 1.0:    # alone: the common case, once per kernel of every recorded step
            for intervals, until, share in lanes:
                intervals.append((start, start + until, label, share))
        else:
            for intervals, until, share in lanes:
                intervals.append((start, start + until * stretch, label, share / stretch))
        if copy_engine is not None:
            self.copy_engines[copy_engine].record(start, end, label, 1.0 / stretch)

    def _lanes(self, e: Effect) -> list[tuple[list, float, float]]:
        """(the unit's interval list, busy until after the start, share used) per lane the item uses."""
        out = []
        t = e.duration
        if e.slots:
            left = e.slots
            for g in self.sm_groups:       # thread blocks fill the SM groups in order
                if left <= 0:
                    break
                used = min(left, g.rate)
                out.append((g.intervals, t, used / g.rate))
                left -= used
        if e.channels is not None:
            stacks = self._stack_of[e.channels]
            for s in np.unique(stacks):
                mask = stacks == s
                until = float(e.channel_until[mask].max())
                busy = float(e.channel_busy[mask].sum()) / self.chip.hbm_channels_per_stack
                out.append((self.hbm_stacks[s].intervals, until, busy / until if until > 0 else 1.0))
        for unit, (busy, served, until) in ((self.l2, e.l2), (self.bus, e.bus)):
            if served and until > 0:
                out.append((unit.intervals, until, busy / until))
        if e.decoder_s and self.decoder is not None:
            out.append((self.decoder.intervals, t, e.decoder_s / (self.chip.sms * t)))
        return out
