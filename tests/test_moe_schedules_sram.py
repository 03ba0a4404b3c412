"""Expert SRAM (moe.cache, moe.prefetch) under the grouped and fused MoE schedules, and the
keys those schedules cannot honour (issue 28: they used to be ignored silently)."""

import pytest

from hwsim.config.load import load_scenario
from hwsim.errors import ConfigError
from hwsim.model.kernel import AwaitLoad, Kernel
from hwsim.pipeline import run_config

MIXTRAL = ["workload.decode_steps=2"]


def summary(*sets):
    return run_config(load_scenario(None, [*MIXTRAL, *sets]), intervals=False).summary


@pytest.mark.parametrize("schedule", ["grouped", "fused"])
def test_prefetched_expert_bytes_are_read_from_sram_not_hbm(schedule):
    """Pre-dispatch copies each predicted expert's first bytes into SRAM during attention; the
    grouped or fused kernel then reads them from there: HBM weight bytes fall by what was copied
    (once from HBM by the copy, not again by the kernel), and the step is faster."""
    plain = summary(f"runtime.moe_schedule={schedule}")
    fetched = summary(f"runtime.moe_schedule={schedule}", "moe.prefetch.enabled=true", "moe.cache.policy=lru")
    copied = fetched["bytes"]["expert_prefetch"]
    assert copied > 1e9                                            # Mixtral: 1.26 GB a step
    assert plain["bytes"]["weights"] - fetched["bytes"]["weights"] == pytest.approx(copied, rel=0.01)
    assert fetched["itl_ms"]["mean"] < plain["itl_ms"]["mean"]
    assert fetched["moe"]["cache"]["hit_rate"] == 1.0              # every needed expert was staged
    assert fetched["moe"]["prefetch"]["wasted_bytes_per_step"] == 0.0


@pytest.mark.parametrize("schedule", ["grouped", "fused"])
def test_pinned_experts_hit_under_one_kernel_schedules(schedule):
    """pinned-hot keeps Qwen3's 9 MB experts in SRAM: the grouped and fused kernels read the
    pinned ones from there (fewer HBM weight bytes, lookups counted)."""
    sets = ["model=qwen3-30b-a3b", "workload.batch_size=8", f"runtime.moe_schedule={schedule}"]
    plain, pinned = summary(*sets), summary(*sets, "moe.cache.policy=pinned-hot")
    assert pinned["moe"]["cache"]["hit_rate"] > 0
    assert pinned["bytes"]["weights"] < plain["bytes"]["weights"]


def test_one_kernel_waits_for_copies_still_in_flight(scenario_factory):
    """The stream waits on every in-flight copy once, before the first kernel that reads expert
    weights, and after the routing bookkeeping."""
    from hwsim.pipeline import system
    from hwsim.model.schedule import StepShape
    b = system(scenario_factory("runtime.moe_schedule=grouped", "moe.prefetch.enabled=true"))
    routing = b.router.step(0, 1)
    items = b.schedule.step(StepShape("decode", 1, 1, 4096), routing, b.onchip)
    layer0 = [i for i in items if (i.key[0] if isinstance(i, AwaitLoad) else getattr(i, "layer", -1)) == 0
              and isinstance(i, (AwaitLoad, Kernel))]
    waits = [n for n, i in enumerate(layer0) if isinstance(i, AwaitLoad)]
    assert len(waits) == 2                                          # Mixtral: top-2 at batch 1
    after = layer0[waits[-1] + 1]
    assert after.name == "L0.experts.gate_up.prepare"
    assert any(k.name == "L0.argsort" for k in layer0[:waits[0]])


@pytest.mark.parametrize("schedule", ["grouped", "fused"])
def test_per_expert_placement_with_one_kernel_schedules_is_refused(schedule):
    with pytest.raises(ConfigError) as err:
        load_scenario("scenarios/moe-hotspots.yaml", [f"runtime.moe_schedule={schedule}"])
    e = err.value
    assert e.key == "moe.placement" and e.line == 13 and e.file.endswith("moe-hotspots.yaml")
    assert "runtime.moe_schedule" in e.message and schedule in e.message


def test_per_expert_placement_is_refused_when_built_directly():
    """Sweeps validate points without the file's cross checks: the pipeline's check stage
    refuses them too (pipeline.system: load, check, build)."""
    from hwsim.pipeline import system
    from hwsim.config.scenario import Scenario
    cfg = Scenario.model_validate({"hardware": "h200-sxm", "model": "mixtral-8x7b",
                                   "runtime": {"moe_schedule": "fused"}, "moe": {"placement": "per-expert"}})
    with pytest.raises(ConfigError, match="placement per-expert"):
        system(cfg)
