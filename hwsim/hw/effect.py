"""What one work item does when it runs alone: how long it takes, where its time goes, and
what it asks of each unit of the device. The timer computes it, the replay cache keeps it,
the device charges it to its units, and the sharing arbiter reads its demands."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hwsim.metrics import Component


@dataclass(slots=True, eq=False)
class Effect:
    duration: float                      # seconds alone, from dispatch to the last store drained
    parts: dict[Component, float]        # where that time went (critical path); read-only
    waves: int
    data: Component                      # the item's data component, for the step's byte totals
    hbm_bytes: float
    # what it asks of each kind of unit alone, by the unit's kind (hwsim/hw/units.py: each unit
    # class reads its own): "sm" thread-block slots held; "hbm" per HBM channel touched (the
    # channels, and per channel busy seconds, bytes served, done at offset from the start);
    # "bus", "l2", "sram" (busy seconds, units served, done at offset: each memory level's,
    # hwsim/hw/levels.py); "decoder" SM-seconds of native decoder work. A kind the item
    # does not ask is absent.
    demand: dict[str, Any]
    hbm_read: float
    hbm_write: float
    # a kernel timed wave by wave: each wave's (start, tiles on the busiest SM, whether it fills
    # the pipeline, latency, body, the component charged), what KernelTimer.retimed needs to
    # time it at a lower SM clock; None where it was not timed so (tile fidelity, a copy)
    walk: tuple | None = None
    # the work it does that power counts (hwsim/hw/power.py), charged with it to the units:
    # tensor-core flops (tiles x tensor flops a tile, to the SM pool); `copy`: a copy engine's
    # copy, whose L2 bytes are lines it fills, not hits (the L2 counts them apart)
    tensor_flops: float = 0.0
    copy: bool = False
    # nothing of a device: the devices of a cluster share effects (hwsim/engine/replay.py), and
    # each keeps what it derives from one (its shares, its lanes: hwsim/hw/device.py)
