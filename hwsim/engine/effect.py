"""What one work item does when it runs alone: how long it takes, where its time goes, and
what it asks of each unit of the device. The timer computes it, the replay cache keeps it,
the device charges it to its units, and the sharing arbiter reads its demands."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hwsim.metrics import Component


@dataclass(slots=True, eq=False)
class Effect:
    duration: float                      # seconds alone, from dispatch to the last store drained
    parts: dict[Component, float]        # where that time went (critical path); read-only
    waves: int
    data: Component                      # the item's data component, for the step's byte totals
    hbm_bytes: float
    slots: int                           # thread-block slots it holds (0: none, a copy)
    decoder_s: float                     # SM-seconds of native decoder work
    channels: np.ndarray | None          # HBM channels it touched, and per channel: busy seconds,
    channel_busy: np.ndarray | None      # bytes served, and when each was done (offset from start)
    channel_bytes: np.ndarray | None
    channel_until: np.ndarray | None
    bus: tuple[float, float, float]      # (busy seconds, bytes, done at offset)
    l2: tuple[float, float, float]
    hbm_read: float
    hbm_write: float
    # nothing of a device: the devices of a cluster share effects (hwsim/engine/replay.py), and
    # each keeps what it derives from one (its shares, its lanes: hwsim/hw/device.py)
