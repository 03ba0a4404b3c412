"""A device's named hardware units: each owns its accounting, its demand and its trace lane.

A unit is what concurrent work items share (hwsim/engine/sharing.py divides its capacity
among them) and what the Gantt chart and the Perfetto trace draw: every interval on a lane
is one the unit recorded itself while a work item used it, with the share it used.

Each kind of unit is one class, and reads its own part of a work item's Effect (what the item
asked of that kind of unit alone: `Effect.demand[kind]`, hwsim/hw/effect.py, filled by the
timer from the memory path's level of that kind) in three methods, which the Device
(hwsim/hw/device.py) calls on every unit that takes demands, in order, without knowing the kinds:
- `share(e, out)`: the fraction of the unit the item uses while it runs alone, put in `out`
  (what the item asks of the sharing arbiter);
- `charge(e, n)`: n runs of the item added to the unit's totals (busy seconds, served, and
  the work power reads: the SM pool's tensor flops, the L2's hits, the HBM's bytes);
- `lanes(e, out)`: the unit's busy intervals of one run, as (interval list, busy until after
  the start, share used), appended to `out` (the device keeps them per effect and replays them).
A unit that takes no demand from kernels (a port, a copy engine, the plain `Unit` of tests and
host links) keeps the defaults, which do nothing. A collective's flow (hwsim/parallel/flows.py)
asks the units it crosses through their own methods too: a port's `share_bytes` and `carry`,
the HBM stacks' `share_bytes` (as one group), the SM pool's `share_sms` and `fill`.
A unit a tile's bytes cross (the bus, the L2, the expert SRAM, the HBM stacks: the device's
`memory`, in order) gives its level of the memory path (`level(chip)`: a private copy of its
servers that a kernel is timed on, hwsim/hw/levels.py), whose demand the timer puts in
`Effect.demand` under the unit's kind. A new unit is a class here (and its level's class
there, if bytes cross it), its profile block (hwsim/config/profile.py, hw/chip.py) and one
line in `Device.__init__`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from hwsim.hw.levels import BusLevel, HbmLevel, L2Level, SramLevel

if TYPE_CHECKING:
    from hwsim.hw.effect import Effect
    from hwsim.hw.chip import ChipSpec

Lane = tuple[list, float, float]      # (interval list, busy until after the start, share used)


@dataclass(eq=False)          # identity semantics: units are dict keys in the sharing arbiter
class Unit:
    name: str                 # lane name, e.g. "HBM stack 2", "bus", "copy engine 0"
    kind: str                 # sm | l2 | sram | hbm | bus | copy | decoder | scaleup | scaleout
    rate: float               # full-rate service, in `measure` per second
    measure: str              # "bytes", "slots", "elements"
    busy_s: float = 0.0       # seconds of full-rate service given
    served: float = 0.0       # bytes (or slots x seconds, elements) served
    intervals: list[tuple[float, float, str, float]] | None = field(default=None, repr=False)
    # a group of units asked alike (hwsim/engine/sharing.py): the group's `members`; a member's `group`
    members: tuple["Unit", ...] = field(default=(), repr=False)
    group: "Unit | None" = field(default=None, repr=False)

    def record(self, start: float, end: float, label: str, share: float) -> None:
        """A busy interval (only while the device records: the first steps of a run)."""
        if self.intervals is not None and end > start:
            self.intervals.append((start, end, label, share))

    # -- what a work item asks of the unit (none, unless the kind says) ----------------------
    def share(self, e: Effect, out: dict) -> None:
        """Put the fraction of the unit the item uses alone in `out` (nothing: not asked)."""

    def charge(self, e: Effect, n: int) -> None:
        """Add n runs of the item to the unit's totals."""

    def charge_all(self, counts: dict[Effect, int]) -> None:
        """charge(e, n) for every (e, n) of `counts`, in order (a unit charged on every step
        says it again as one loop: a step's replayed kernels are charged this way)."""
        charge = self.charge
        for e, n in counts.items():
            charge(e, n)

    def settle(self) -> None:
        """Bring the totals up to date (a unit that charges lazily: the HBM stacks)."""

    def take_totals(self, other: "Unit") -> None:
        """Take `other`'s totals as its own (the same unit of another device that ran the same
        work: a power governor's probe keeps what no SM clock changes, Device.keep_memory_totals_of)."""
        self.busy_s, self.served = other.busy_s, other.served

    def lanes(self, e: Effect, out: list[Lane]) -> None:
        """Append the unit's lanes busy during one run of the item."""


@dataclass(eq=False)
class SmPool(Unit):
    """The SMs' resident thread-block slots, shared as a fraction of all slots, and drawn on
    the lanes of its SM groups (`groups`), which a work item's blocks fill in order."""
    groups: list[Unit] = field(default_factory=list, repr=False)
    sms: int = 1
    tensor_flops: float = 0.0     # tensor-core flops done (Effect.tensor_flops): what power reads

    def share_sms(self, sms: int, out: dict) -> None:
        """Add to `out` the share of a communication kernel that holds `sms` whole SMs."""
        out[self] = out.get(self, 0.0) + min(1.0, sms / self.sms)

    def share(self, e: Effect, out: dict) -> None:
        slots = e.demand.get("sm")
        if slots:
            out[self] = slots / self.rate

    def charge(self, e: Effect, n: int) -> None:
        slots = e.demand.get("sm")
        if slots:
            self.busy_s += n * e.duration * slots / self.rate
            self.served += n * e.duration * slots
        self.tensor_flops += n * e.tensor_flops

    def charge_all(self, counts: dict[Effect, int]) -> None:
        busy, served, flops, rate = self.busy_s, self.served, self.tensor_flops, self.rate
        for e, n in counts.items():
            slots = e.demand.get("sm")
            if slots:
                busy += n * e.duration * slots / rate
                served += n * e.duration * slots
            flops += n * e.tensor_flops
        self.busy_s, self.served, self.tensor_flops = busy, served, flops

    def lanes(self, e: Effect, out: list[Lane]) -> None:
        left = e.demand.get("sm")
        if not left:
            return
        t = e.duration
        for g in self.groups:       # thread blocks fill the SM groups in order
            if left <= 0:
                break
            used = min(left, g.rate)
            out.append((g.intervals, t, used / g.rate))
            left -= used

    def fill(self, sms: int, start: float, end: float, label: str) -> None:
        """Record `sms` whole SMs held from start to end on the groups' lanes, filled in order
        (a communication kernel's SMs: what compute lost)."""
        left = sms * (self.rate // self.sms)
        for g in self.groups:
            if left <= 0:
                break
            used = min(left, g.rate)
            g.record(start, end, label, used / g.rate)
            left -= used


@dataclass(eq=False)
class HbmStacks(Unit):
    """The HBM stacks (its `members`, each a lane) and their pseudo-channels: an item's demand
    is per channel (busy seconds, bytes, when done), charged per channel and summed per stack
    when the totals are read (`settle`). Asked as one unit (a group of the arbiter) by a flow
    whose bytes spread over every stack alike (hwsim/parallel/flows.py)."""
    channels_per_stack: int = 1
    peak: float = 0.0         # bytes per second at full efficiency, every stack together

    def share_bytes(self, nbytes: float, efficiency: float, duration: float, out: dict) -> None:
        """Add to `out` the share of bytes spread over every stack alike, moved at `efficiency`
        of the peak in `duration` (a collective's flow: the stacks asked as one group)."""
        seconds = nbytes / (self.peak * efficiency)
        out[self] = out.get(self, 0.0) + min(1.0, seconds / duration)

    def __post_init__(self) -> None:
        channels = len(self.members) * self.channels_per_stack
        self.channel_bytes = np.zeros(channels)        # bytes served per pseudo-channel
        self.channel_busy = np.zeros(channels)
        self.stack_of = np.arange(channels) // self.channels_per_stack
        for stack in self.members:
            stack.group = self

    def share(self, e: Effect, out: dict) -> None:
        d = e.demand.get("hbm")
        if d is None:
            return
        stacks, t = self.members, e.duration
        per_stack = np.bincount(self.stack_of[d[0]], weights=d[1], minlength=len(stacks))
        for s in np.flatnonzero(per_stack):     # Python floats: they become event times
            out[stacks[s]] = min(1.0, float(per_stack[s]) / (self.channels_per_stack * t))

    def charge(self, e: Effect, n: int) -> None:
        d = e.demand.get("hbm")
        if d is not None:
            channels, busy, nbytes, _ = d
            self.channel_bytes[channels] += n * nbytes
            self.channel_busy[channels] += n * busy

    def charge_all(self, counts: dict[Effect, int]) -> None:
        """All runs in one bincount per figure: a many-GPU pass runs thousands of short
        segments (issue 33), and two indexed numpy adds per effect and segment were a sixth of
        a 64-GPU run."""
        channels, nbytes, busy, runs = [], [], [], []
        for e, n in counts.items():
            d = e.demand.get("hbm")
            if d is not None:
                channels.append(d[0])
                busy.append(d[1])
                nbytes.append(d[2])
                runs.append(n)
        if channels:
            at = np.concatenate(channels)
            # each effect's per-channel figures times its runs, in one multiply: a pass leaves a
            # few hundred effects, and a small array product each cost more than the bincounts
            n = np.repeat(np.array(runs, dtype=float), [len(c) for c in channels])
            size = len(self.channel_bytes)
            self.channel_bytes += np.bincount(at, weights=np.concatenate(nbytes) * n, minlength=size)
            self.channel_busy += np.bincount(at, weights=np.concatenate(busy) * n, minlength=size)

    def level(self, chip: ChipSpec) -> HbmLevel:
        """Its level of the memory path: the channels, as the chip's HBM numbers say."""
        return HbmLevel(self.kind, chip)

    def stack_bytes(self) -> np.ndarray:
        return np.bincount(self.stack_of, weights=self.channel_bytes, minlength=len(self.members))

    def take_totals(self, other: "HbmStacks") -> None:
        self.channel_bytes[:] = other.channel_bytes
        self.channel_busy[:] = other.channel_busy
        self.settle()

    def settle(self) -> None:
        busy = np.bincount(self.stack_of, weights=self.channel_busy, minlength=len(self.members))
        for unit, b, served in zip(self.members, busy, self.stack_bytes()):
            unit.busy_s, unit.served = float(b) / self.channels_per_stack, float(served)

    def lanes(self, e: Effect, out: list[Lane]) -> None:
        d = e.demand.get("hbm")
        if d is None:
            return
        channels, channel_busy, _, channel_until = d
        stacks = self.stack_of[channels]
        for s in np.unique(stacks):
            mask = stacks == s
            until = float(channel_until[mask].max())
            busy = float(channel_busy[mask].sum()) / self.channels_per_stack
            out.append((self.members[s].intervals, until, busy / until if until > 0 else 1.0))


@dataclass(eq=False)
class Bus(Unit):
    """The on-chip network: every byte to or from HBM or L2 crosses it; shared as its busy
    seconds over the item's duration. Its demand: (busy seconds, bytes, done at offset)."""

    LEVEL = BusLevel         # the class of its level of the memory path (not a field)

    def level(self, chip: ChipSpec) -> BusLevel:
        """Its level of the memory path (hwsim/hw/levels.py): a private server at its rate."""
        return self.LEVEL(self.kind, self.rate)

    def share(self, e: Effect, out: dict) -> None:
        d = e.demand.get(self.kind)
        if d is not None and d[1]:
            out[self] = min(1.0, d[0] / e.duration)

    def charge(self, e: Effect, n: int) -> None:
        d = e.demand.get(self.kind)
        if d is not None:
            self.busy_s += n * d[0]
            self.served += n * d[1]

    def charge_all(self, counts: dict[Effect, int]) -> None:
        kind, busy, served = self.kind, self.busy_s, self.served
        for e, n in counts.items():
            d = e.demand.get(kind)
            if d is not None:
                busy += n * d[0]
                served += n * d[1]
        self.busy_s, self.served = busy, served

    def lanes(self, e: Effect, out: list[Lane]) -> None:
        d = e.demand.get(self.kind)
        if d is None:
            return
        busy, served, until = d
        if served and until > 0:
            out.append((self.intervals, until, busy / until))


@dataclass(eq=False)
class L2(Bus):
    """The L2's hits, shared and charged as the bus is (its own demand, under "l2"). Of the
    bytes it serves (`served`), it counts its hits apart (`hit_bytes`, what power reads: a
    copy's lines landing in it are HBM energy, hwsim/hw/power.py)."""
    hit_bytes: float = 0.0
    LEVEL = L2Level

    def charge(self, e: Effect, n: int) -> None:
        super().charge(e, n)
        if not e.copy and (d := e.demand.get(self.kind)) is not None:
            self.hit_bytes += n * d[1]

    def take_totals(self, other: "L2") -> None:
        super().take_totals(other)
        self.hit_bytes = other.hit_bytes

    def charge_all(self, counts: dict[Effect, int]) -> None:
        super().charge_all(counts)
        kind, hits = self.kind, self.hit_bytes
        for e, n in counts.items():
            d = e.demand.get(kind)
            if d is not None and not e.copy:
                hits += n * d[1]
        self.hit_bytes = hits


@dataclass(eq=False)
class Sram(Bus):
    """The on-chip SRAM that holds experts' weights (and a pinned router's): the L2's lines set
    aside for them (on the profiled GPUs, persisting L2; `capacity` bytes: hwsim/build.py), so
    its rate is the L2's bandwidth, the profile's only figure for it. It serves the weight
    bytes a kernel reads from it (`Kernel.sram_read`) and the expert copies landing in it;
    charged and drawn as the bus is (its own demand, under "sram"). It asks the arbiter no
    share of its own: its bytes are L2 hits, and the L2's share already holds them (the
    profiles give the SRAM no bandwidth beside the L2's)."""
    capacity: float = 0.0      # bytes set aside for experts and the router
    LEVEL = SramLevel

    def share(self, e: Effect, out: dict) -> None:
        """Nothing: shared as part of the L2 (see the class)."""


@dataclass(eq=False)
class Decoder(Unit):
    """A native sub-byte decoder (what-if chips): an item's demand is decoder SM-seconds, shared
    as a fraction of all SMs' decoders."""
    sms: int = 1

    def share(self, e: Effect, out: dict) -> None:
        s = e.demand.get("decoder")
        if s:
            out[self] = min(1.0, s / (self.sms * e.duration))

    def charge(self, e: Effect, n: int) -> None:
        s = e.demand.get("decoder")
        if s:
            self.busy_s += n * s / self.sms
            self.served += n * s * self.rate / self.sms

    def lanes(self, e: Effect, out: list[Lane]) -> None:
        s = e.demand.get("decoder")
        if s:
            t = e.duration
            out.append((self.intervals, t, s / (self.sms * t)))


@dataclass(eq=False)
class CopyEngine(Unit):
    """A copy engine (expert prefetch into on-chip SRAM): one copy at a time at full rate, so a
    copy asks the whole of it. Not asked by kernels: the copy that runs on it names it."""

    def share(self, e: Effect, out: dict) -> None:
        out[self] = 1.0

    def charge(self, e: Effect, n: int) -> None:
        self.busy_s += n * e.duration
        self.served += n * e.hbm_read


@dataclass(eq=False)
class Port(Unit):
    """A scale-up port or NIC, one way: bytes on the wire at line rate (a flow's, through the
    arbiter: hwsim/parallel/flows.py)."""

    def share_bytes(self, wire: float, duration: float, out: dict) -> None:
        """Put in `out` the share of `wire` bytes sent at line rate over `duration`."""
        out[self] = min(1.0, wire / self.rate / duration)

    def carry(self, wire: float, payload: float) -> None:
        """Count `wire` bytes sent at line rate, `payload` of them the data's."""
        self.busy_s += wire / self.rate
        self.served += payload
