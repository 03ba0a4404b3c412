"""A device's named hardware units: each owns its accounting and its trace lane.

A unit is what concurrent work items share (hwsim/engine/sharing.py divides its capacity
among them) and what the Gantt chart and the Perfetto trace draw: every interval on a lane
is one the unit recorded itself while a work item used it, with the share it used.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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
