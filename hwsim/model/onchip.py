"""What a step finds on chip and leaves there for the next one: the activations still in L2
and the experts in SRAM (resident, or on their way by a prefetch).

The Schedule holds no state across steps: `Schedule.step` reads and updates this object,
which the built simulation owns (hwsim/build.py) and hands to every pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from hwsim.model.l2_residency import L2Residency
from hwsim.model.moe_dispatch import ExpertDispatch


@dataclass
class OnChipState:
    l2: L2Residency                           # activations in L2 (an LRU of bytes streamed past)
    dispatch: ExpertDispatch | None = None    # experts in SRAM, prefetches in flight, statistics
    router_on_chip: bool = False              # the routers' weights pinned in SRAM
