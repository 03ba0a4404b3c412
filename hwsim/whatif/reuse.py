"""What a what-if's runs share: the passes' plans (their routing and kernels, hwsim/step.py)
where the number changed is not one the plans are made from.

A plan is made from the chip's sizes (SMs, tiles, shared memory, the L2, the HBM channel
interleave, the latency ratio the L2 walk weighs evictions by), never from its rates: which
ChipSpec fields those are is recorded, not listed, by building the base run with a ChipSpec
that notes each field read by the code that makes plans (the schedule, the on-chip state,
the router: hwsim/model, hwsim/workload, hwsim/build.py) and not by the code that times them
(hwsim/hw, hwsim/engine). A changed profile number whose ChipSpec differs from the base's only
in fields never read there replays the base run's plans: the same kernels and routing, timed
on the changed chip. The test suite checks the replay against a full rebuild."""

from __future__ import annotations

import dataclasses
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

from hwsim.hw.chip import ChipSpec

FIELDS = frozenset(f.name for f in dataclasses.fields(ChipSpec))
_HWSIM = Path(__file__).resolve().parents[1]
PLAN_CODE = tuple(str(_HWSIM / p) for p in ("model", "workload", "build.py", "step.py", "parallel"))
CHIP_CODE = (str(_HWSIM / "hw" / "chip.py"), __file__)    # a property's frames, and this recorder's


class _Reads:
    seen: set[str] = set()
    active = False
    one_at_a_time = threading.Lock()    # a Dask worker of several threads records one run at a time


class _RecordingChip(ChipSpec):
    """A ChipSpec noting the fields read by plan-making code (a property's own reads are
    charged to whoever read the property)."""

    def __getattribute__(self, name):
        if _Reads.active and name in FIELDS:
            frame = sys._getframe(1)
            while frame is not None and frame.f_code.co_filename in CHIP_CODE:
                frame = frame.f_back
            if frame is not None and frame.f_code.co_filename.startswith(PLAN_CODE):
                _Reads.seen.add(name)
        return object.__getattribute__(self, name)

    def at_sm_clock(self, clock_hz):
        # copying every field to the clocked chip is no plan reading them (a power governor's
        # probe rebuilds at each clock: hwsim/hw/power.py)
        active, _Reads.active = _Reads.active, False
        try:
            chip = ChipSpec.at_sm_clock(self, clock_hz)
            return _RecordingChip(**{f: getattr(chip, f) for f in FIELDS})
        finally:
            _Reads.active = active


@contextmanager
def recording_plan_reads():
    """Within: builds (hwsim.build.build) make recording chips, and the fields plan-making code
    reads collect in the set yielded."""
    import hwsim.build as build_module
    real = build_module.ChipSpec

    class _Factory:
        @staticmethod
        def from_profile(profile):
            chip = real.from_profile(profile)
            return _RecordingChip(**{f: getattr(chip, f) for f in FIELDS})

    with _Reads.one_at_a_time:
        _Reads.seen, _Reads.active = set(), True
        build_module.ChipSpec = _Factory
        try:
            yield _Reads.seen
        finally:
            build_module.ChipSpec = real
            _Reads.active = False


def chip_fields_changed(base: ChipSpec, other: ChipSpec) -> set[str]:
    return {f for f in FIELDS if getattr(base, f) != getattr(other, f)}


class SharedPlans:
    """The base run, made once with its plans kept and the chip fields its plans read noted;
    `for_profile` says whether a changed profile's run may replay them."""

    def __init__(self, base):
        from hwsim.build import build
        from hwsim.run import run_scenario
        cfg = base.cfg
        self.plans: dict = {}
        with recording_plan_reads() as seen:
            built = build(cfg, base.profile, base.model)
            # an expert SRAM cache's and a prefetcher's state is advanced by making plans, and
            # what they hold depends on timing: their runs make their own
            moe = cfg.moe
            self.enabled = (built.gpus.plans_ahead and cfg.workload.arrivals.kind == "none"
                            and moe.cache.policy == "none" and not moe.prefetch.enabled)
            self.summary = run_scenario(cfg, built, intervals=False,
                                        plans=self.plans if self.enabled else None).summary
        self.fields = frozenset(seen)
        self.chip = ChipSpec.from_profile(base.profile)

    def for_profile(self, profile) -> dict | None:
        """The base plans, if `profile` differs from the base's only where no plan looks."""
        if not self.enabled or chip_fields_changed(self.chip, ChipSpec.from_profile(profile)) & self.fields:
            return None
        return self.plans
