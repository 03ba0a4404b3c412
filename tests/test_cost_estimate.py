"""The cost estimate (hwsim/cost.py) counts what a run's wall time grows with: every
simulated GPU's kernel list, the stream's kernels of a grouped or fused MoE, and a serving
run's distinct iteration shapes, not its iterations (issue 33). No timings: counts only."""

from __future__ import annotations

import pytest

from hwsim.pipeline import run_config, system
from hwsim.cost import BYTES_PER_RECORD, estimate
from hwsim.config.load import load_model, load_scenario


def ep(gpus: int, steps: int = 4):
    cfg = load_scenario("deepseek-v3-ep8", [f"parallel.gpus={gpus}", f"parallel.ep={gpus}",
                                            f"parallel.nodes={max(1, gpus // 8)}", "parallel.allow_overcommit=true",
                                            f"workload.decode_steps={steps}"])
    return cfg, load_model(cfg.model)


def counted_kernels(cfg) -> tuple[int, int]:
    """(kernels the schedule built, passes it built them for) in a run of cfg."""
    b = system(cfg)
    made = []
    step = b.schedule.step

    def counting(*args, **kwargs):
        items = step(*args, **kwargs)
        made.append(sum(len(i.kernels) if hasattr(i, "cut") else 1 for i in items))
        return items
    b.schedule.step = counting
    run_config(cfg, b, intervals=False)
    return sum(made), len(made)


def test_a_multi_gpu_estimate_grows_with_the_gpus_it_simulates():
    one, eight = estimate(*ep(1)), estimate(*ep(8))
    # every GPU builds and runs its own kernel list of the whole model's layers each pass
    # (hwsim/parallel/multi.py): with a fused MoE the same length on each
    assert eight.kernels_per_pass == pytest.approx(8 * one.kernels_per_pass)
    assert eight.wall_s == pytest.approx(8 * one.wall_s, rel=0.01)
    # and a pass holds them all at once
    assert eight.memory_gb - one.memory_gb == pytest.approx(8 * one.kernels_per_pass * BYTES_PER_RECORD / 1e9,
                                                            rel=0.01)


def test_a_multi_gpu_estimate_counts_the_kernels_the_gpus_run():
    cfg, model = ep(8, steps=1)
    made, built = counted_kernels(cfg)
    assert built == 8                                        # one kernel list per GPU
    assert estimate(cfg, model).kernels_per_pass == pytest.approx(made, rel=0.15)


def test_expert_parallel_gpus_price_only_their_own_experts():
    """Per-expert kernels: each GPU runs the experts it holds (experts / ep)."""
    tiny = str(__import__("pathlib").Path(__file__).parent / "data" / "tiny-moe.yaml")
    cfgs = [load_scenario(None, [f"model={tiny}", "workload.batch_size=64", f"parallel.gpus={g}",
                                 f"parallel.ep={g}", "parallel.dp_attention=true"]) for g in (1, 2)]
    model = load_model(cfgs[0].model)
    (one, two) = (estimate(c, model) for c in cfgs)
    fixed = model.layers * 15.0
    assert (two.kernels_per_pass - 2 * fixed) == pytest.approx(one.kernels_per_pass - fixed, rel=0.05)


def test_a_grouped_moe_pass_is_priced_by_its_stream_not_its_experts():
    for batch in (1, 16, 128):
        cfg = load_scenario(None, ["model=qwen3-30b-a3b", "runtime.moe_schedule=grouped",
                                   f"workload.batch_size={batch}", "workload.decode_steps=1",
                                   "workload.context_tokens=512"])
        made, passes = counted_kernels(cfg)
        assert estimate(cfg, load_model(cfg.model)).kernels_per_pass == pytest.approx(made / passes, rel=0.15)


def test_a_serving_estimate_counts_the_shapes_the_run_simulates():
    """voice-agent: 40 requests, about 300 iterations of 26 distinct shapes (each simulated
    once); it was priced as 215 simulated passes."""
    from hwsim.serving import loop

    cfg = load_scenario("voice-agent", [])
    cost = estimate(cfg, load_model(cfg.model))
    b = system(cfg)
    simulated = []
    oracle = loop.StepOracle(b)
    real = oracle.simulate
    oracle.simulate = lambda key: simulated.append(key) or real(key)
    result_loop = loop.ServingLoop(b, oracle=oracle)
    result_loop.run()
    assert len(simulated) <= cost.passes <= 4 * len(simulated), (cost, len(simulated))
    assert cost.iterations > cost.passes
