"""A device built from a chip profile: its named units, and the accounting of the work items
that ran on it.

Units (hwsim/hw/units.py), each with its own trace lane; a unit the chip lacks does not exist:
- SM groups of SM_GROUP SMs (lanes), filled in order by a work item's resident thread blocks,
  and the SM pool they make up (what concurrent items share: a fraction of all block slots);
- the L2, the HBM stacks, the on-chip bus;
- the on-chip SRAM that holds experts' weights, where the scenario sets L2 aside for them
  (`sram_bytes`: hwsim/build.py);
- copy engines (expert prefetch into on-chip SRAM);
- a native sub-byte decoder, on what-if chips that have one;
- scale-up ports (NVLink: one each way) and a scale-out NIC, on profiles that give them.

Each unit's class (hwsim/hw/units.py) says how a work item's Effect shares, charges and draws
it; the device only walks its units that take demands (`demanding`, in order):
`shares` asks each what the item uses alone, `account` adds the item to the units' totals (n
runs at once: a stream adds its replayed kernels in bulk at the end of a step, which keeps a
1,000-kernel step cheap), `record` adds, while the device records, the busy intervals the
item put on each lane; `work` reads what the units did that power is made of (a pass's work:
the difference of two readings). The units a tile's bytes cross (`memory`, in order) give the
levels of the memory path its kernels are timed on (`memory_levels`:
hwsim/engine/memory_path.py).
"""

from __future__ import annotations

import math

import numpy as np

from hwsim.hw.effect import Effect
from hwsim.hw.chip import ChipSpec
from hwsim.hw.power import Activity
from hwsim.hw.units import L2, Bus, CopyEngine, Decoder, HbmStacks, Lane, Port, SmPool, Sram, Unit

SM_GROUP = 16        # SMs per lane, about one GPC
DERIVED_LIMIT = 100_000     # effects whose shares (and lanes) a device keeps, as a ReplayCache its effects


class Device:
    def __init__(self, chip: ChipSpec, index: int = 0, copy_engines: int = 1, sram_bytes: float = 0.0):
        """`sram_bytes`: the on-chip SRAM set aside for experts' weights (0: none, no unit)."""
        self.chip = chip
        self.index = index
        self.name = chip.name if index == 0 else f"{chip.name}#{index}"
        slots_per_sm = chip.cta_slots_per_sm
        self.slots = chip.sms * slots_per_sm
        groups = math.ceil(chip.sms / SM_GROUP)
        self.sm_groups = [Unit(f"SMs {g * SM_GROUP}-{min((g + 1) * SM_GROUP, chip.sms) - 1}", "sm",
                               (min((g + 1) * SM_GROUP, chip.sms) - g * SM_GROUP) * slots_per_sm, "slots")
                          for g in range(groups)]
        self.sm = SmPool("SMs", "sm", self.slots, "slots", groups=self.sm_groups, sms=chip.sms)
        self.l2 = L2("L2", "l2", chip.l2_bytes_s, "bytes")
        self.hbm_stacks = [Unit(f"HBM stack {s}", "hbm", chip.hbm_read_bytes_s / chip.hbm_stacks, "bytes")
                           for s in range(chip.hbm_stacks)]
        # the stacks and their channels; also every stack asked alike, as one unit of the
        # arbiter (a collective's bytes spread over them all: hwsim/parallel/flows.py); no lane
        # of its own (not in `units`)
        self.hbm_all = HbmStacks("HBM stacks", "hbm", chip.hbm_read_bytes_s, "bytes", members=tuple(self.hbm_stacks),
                                 channels_per_stack=chip.hbm_channels_per_stack, peak=chip.hbm_peak_bytes_s)
        self.bus = Bus("bus", "bus", chip.bus_bytes_s, "bytes")
        # the L2's lines set aside as SRAM: the L2's bandwidth (units.Sram)
        self.sram = Sram("expert SRAM", "sram", chip.l2_bytes_s, "bytes", capacity=sram_bytes) if sram_bytes else None
        self.copy_engines = [CopyEngine(f"copy engine {i}", "copy", chip.hbm_read_bytes_s, "bytes")
                             for i in range(copy_engines)]
        self.decoder = (Decoder("decoder", "decoder", chip.decoder_elements_per_clk * chip.clock_hz * chip.sms,
                                "elements", sms=chip.sms) if chip.decoder_elements_per_clk else None)
        self.scaleup_tx = self.scaleup_rx = self.nic = self.nic_rx = None
        if chip.scaleup_bytes_s:
            self.scaleup_tx = Port("NVLink out", "scaleup", chip.scaleup_bytes_s, "bytes")
            self.scaleup_rx = Port("NVLink in", "scaleup", chip.scaleup_bytes_s, "bytes")
        if chip.scaleout_bytes_s:
            # full duplex: one unit each way (what the device sends, what it receives)
            self.nic = Port("NIC out", "scaleout", chip.scaleout_bytes_s, "bytes")
            self.nic_rx = Port("NIC in", "scaleout", chip.scaleout_bytes_s, "bytes")
        # every unit, in lane order (the SM pool is drawn as its groups; the stacks' group has
        # no lane of its own); a unit the chip lacks (None) does not exist
        self.units: list[Unit] = [*self.sm_groups, self.l2, self.sram, *self.hbm_stacks, self.bus, *self.copy_engines,
                                  self.decoder, self.scaleup_tx, self.scaleup_rx, self.nic, self.nic_rx]
        # the units a work item's Effect asks, in the order its shares are asked of the arbiter
        self.demanding: list[Unit] = [self.sm, self.hbm_all, self.bus, self.l2, self.sram, self.decoder]
        # the units a tile's bytes cross, in order: each gives its level of the memory path
        self.memory: list[Unit] = [self.bus, self.l2, self.sram, self.hbm_all]
        for group in (self.units, self.demanding, self.memory):
            group[:] = [u for u in group if u is not None]
        self._pending: dict[Effect, int] = {}      # account_all's runs, added at the next sync
        self._charged: list[Unit] = self.demanding   # the units sync charges them to
        # what this device derives from an effect, once: effects are shared by the devices of
        # a cluster (hwsim/engine/replay.py), these are this device's units
        self._shares: dict[Effect, dict[Unit, float]] = {}
        self._lanes_of: dict[Effect, list[Lane]] = {}
        self.hbm_read_bytes = 0.0
        self.hbm_write_bytes = 0.0
        self.recording = False
        self._recorded: set = set()          # items recorded once (first_runs_only)
        self.recorded_once: set | None = None   # that set while only first runs are kept, else None

    # -- units -----------------------------------------------------------------------------
    def memory_levels(self) -> tuple:
        """The memory path's levels, one per unit a tile's bytes cross, in order: private
        servers holding nothing of this device (a kernel timed on them is timed for every
        identical device: hwsim/engine/replay.py)."""
        return tuple(unit.level(self.chip) for unit in self.memory)

    @property
    def channel_bytes(self) -> np.ndarray:
        """Bytes served per HBM pseudo-channel so far."""
        return self.hbm_all.channel_bytes

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
        return self.hbm_all.stack_bytes()

    def work(self) -> Activity:
        """What the units have done so far that power is made of (hwsim/hw/power.py): the SM
        pool's tensor flops, the L2's hits, the HBM channels' bytes. A pass's work is the
        difference of the readings before and after it."""
        if self._pending:
            self._flush()
        return Activity(self.sm.tensor_flops, self.l2.hit_bytes, float(self.hbm_all.channel_bytes.sum()))

    def imbalance(self) -> float:
        """max / mean bytes served per channel so far (1.0 = perfectly even)."""
        channel_bytes = self.hbm_all.channel_bytes
        mean = channel_bytes.mean()
        return float(channel_bytes.max() / mean) if mean > 0 else 1.0

    # -- what an item asks of the units ------------------------------------------------------
    def shares(self, e: Effect, copy_engine: int | None = None) -> dict[Unit, float]:
        """The fraction of each unit the item uses while it runs alone: what it asks when it
        shares the device with items of other streams (hwsim/engine/sharing.py)."""
        if copy_engine is None and (known := self._shares.get(e)) is not None:
            return known
        out: dict[Unit, float] = {}
        for unit in self.demanding:
            unit.share(e, out)
        if copy_engine is not None:
            self.copy_engines[copy_engine].share(e, out)
            return out
        if len(self._shares) >= DERIVED_LIMIT:      # a fresh effect past it: derived again
            self._shares.clear()
        self._shares[e] = out
        return out

    # -- accounting ---------------------------------------------------------------------------
    def account(self, e: Effect, n: int = 1, copy_engine: int | None = None) -> None:
        """Add n runs of the item to the units' totals (the HBM stacks' at the next sync)."""
        if self._charged is self.demanding:         # else the memory units' totals are kept
            self.hbm_read_bytes += n * e.hbm_read
            self.hbm_write_bytes += n * e.hbm_write
        for unit in self._charged:
            unit.charge(e, n)
        if copy_engine is not None:
            self.copy_engines[copy_engine].charge(e, n)

    def account_all(self, counts: dict[Effect, int]) -> None:
        """account(e, n) for every (e, n) of `counts` (a stream's kernels that ran alone), left
        pending until the next sync(), which charges each unit with them all at once (the HBM
        stacks in one bincount per figure: HbmStacks.charge_all)."""
        pending = self._pending
        for e, n in counts.items():
            pending[e] = pending.get(e, 0) + n

    def _flush(self) -> None:
        pending, self._pending = self._pending, {}
        if self._charged is self.demanding:
            read, write = self.hbm_read_bytes, self.hbm_write_bytes
            for e, n in pending.items():
                read += n * e.hbm_read
                write += n * e.hbm_write
            self.hbm_read_bytes, self.hbm_write_bytes = read, write
        for unit in self._charged:
            unit.charge_all(pending)

    def keep_memory_totals_of(self, other: "Device") -> None:
        """Take the totals of the units a tile's bytes cross (`memory`: the bus, the L2, the
        expert SRAM, the HBM stacks) from `other` and charge them no more: a power governor's
        probe (hwsim/run.py) runs the passes `other` ran, every kernel alone, at a lower SM
        clock, and what those units served, and for how long, does not depend on the SM clock
        (the same sums, to the bit; issue 33). The other units (the SM pool, the decoder),
        whose demand does, are charged as before."""
        self.hbm_read_bytes, self.hbm_write_bytes = other.hbm_read_bytes, other.hbm_write_bytes
        for mine, theirs in zip(self.memory, other.memory):
            mine.take_totals(theirs)
        self._charged = [u for u in self.demanding if u not in self.memory]

    def sync(self) -> None:
        """Bring the units' totals up to date (the HBM stacks' from their channels', and every
        unit's with what account_all left pending)."""
        if self._pending:
            self._flush()
        for unit in self.demanding:
            unit.settle()

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
            if len(self._lanes_of) >= DERIVED_LIMIT:
                self._lanes_of.clear()
            lanes = self._lanes_of[e] = []
            for unit in self.demanding:
                unit.lanes(e, lanes)
        stretch = (end - start) / e.duration if e.duration > 0 else 1.0
        if stretch == 1.0:    # alone: the common case, once per kernel of every recorded step
            for intervals, until, share in lanes:
                intervals.append((start, start + until, label, share))
        else:
            for intervals, until, share in lanes:
                intervals.append((start, start + until * stretch, label, share / stretch))
        if copy_engine is not None:
            self.copy_engines[copy_engine].record(start, end, label, 1.0 / stretch)
