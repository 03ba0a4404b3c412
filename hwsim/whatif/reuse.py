"""What a what-if's runs share: the passes' plans (their routing and kernels, hwsim/step.py)
where the number changed is not one the plans are made from.

A plan is made from the chip's sizes only (hwsim/hw/chip.py ChipSizes: SMs, block slots, shared
memory, the L2, the HBM channels and interleave, the GEMM tiles, the tensor cores' native
dtypes and the latency ratio the L2 walk weighs evictions by): the schedule keeps nothing else
of the chip. A changed profile number whose chip has the base's sizes, a rate of any kind
changed, replays the base run's plans: the same kernels and routing, timed on the changed
chip. The test suite checks the replay against a full rebuild."""

from __future__ import annotations

from hwsim.hw.chip import SIZE_FIELDS, ChipSpec
from hwsim.model.expert_sram import cache_policy


class SharedPlans:
    """The base run, made once with its plans kept, and the chip's sizes they were made from;
    `for_profile` says whether a changed profile's run may replay them (equal sizes)."""

    def __init__(self, base):
        from hwsim import pipeline
        cfg = base.cfg
        self.plans: dict = {}
        built = pipeline.checked_build(base)
        # an expert SRAM cache's and a prefetcher's state is advanced by making plans, and
        # what they hold depends on timing: their runs make their own
        moe = cfg.moe
        self.enabled = (built.gpus.plans_ahead and not cfg.workload.serving
                        and not cache_policy(moe.cache.policy).keeps and not moe.prefetch.enabled)
        self.summary = pipeline.run(base, built, intervals=False,
                                    plans=self.plans if self.enabled else None).summary
        self.fields = SIZE_FIELDS            # the chip's fields plans are made from
        self.sizes = ChipSpec.from_profile(base.profile).sizes

    def for_profile(self, profile) -> dict | None:
        """The base plans, if `profile` differs from the base's only where no plan looks."""
        if not self.enabled or ChipSpec.from_profile(profile).sizes != self.sizes:
            return None
        return self.plans
