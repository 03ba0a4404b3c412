"""Whole-run invariants: time and bytes are conserved, results are deterministic."""

import json

import pytest

from hwsim.metrics import Component
from hwsim.model.shapes import builtin_models
from hwsim.pipeline import run_config


@pytest.fixture(scope="module")
def default_run():
    from hwsim.config.load import load_scenario
    return run_config(load_scenario(None, ["workload.decode_steps=2"]))


def test_breakdown_sums_to_each_step(default_run):
    for step in default_run.steps:
        total = sum(step.breakdown_s.values())
        assert total == pytest.approx(step.duration_s, rel=0.005)


def test_weight_components_take_at_least_the_weight_bytes_over_hbm_bandwidth(default_run, h200):
    """Weight streaming attributed on the critical path cannot beat the bytes at full HBM rate."""
    s = default_run.summary
    weight_ms = sum(s["breakdown_ms"][c.value] for c in (Component.WEIGHT_READ, Component.EXPERT_READ,
                                                         Component.ROUTER))
    assert weight_ms * 1e-3 >= s["bytes"]["weights"] / h200.hbm_peak_bytes_s


def test_bytes_match_the_analytic_bytes(default_run):
    """Weights of the touched experts + attention + LM head, plus the KV read and written."""
    b = default_run
    cfg = b.scenario
    from hwsim.pipeline import system
    built = system(cfg)
    m = built.model
    d, wb = m.hidden, m.weight_bytes
    a = m.attention
    attn = (d * (a.heads + 2 * a.kv_heads) * a.head_dim + a.heads * a.head_dim * d) * wb
    expert = 3 * m.moe.expert_ffn * d * wb
    router = d * m.moe.experts * wb
    norms = 2 * d * wb
    for step in b.steps:
        experts_touched = step.active_experts_per_layer * m.layers
        weights = m.layers * (attn + router + norms) + experts_touched * expert + (m.vocab * d + d) * wb
        kv_read = m.layers * cfg.workload.batch_size * (step.context + 1) * a.kv_elements_per_token() * 2
        kv_write = m.layers * cfg.workload.batch_size * a.kv_elements_per_token() * 2
        assert step.bytes["weights"] == pytest.approx(weights, rel=0.01)
        assert step.bytes["kv"] == pytest.approx(kv_read + kv_write, rel=0.01)


def test_decode_step_not_faster_than_bytes_over_peak(default_run, h200):
    for step in default_run.steps:
        floor = (step.bytes["weights"] + step.bytes["kv"]) / h200.hbm_peak_bytes_s
        assert step.duration_s >= floor


def test_no_unit_above_full_utilisation(scenario_factory):
    """With expert prefetch the copy engine shares HBM with the kernels: no unit of the device
    may serve more than its rate allows over the run, and every byte the kernels and copies
    moved through HBM is on the stacks."""
    from hwsim.pipeline import system
    cfg = scenario_factory("workload.batch_size=8", "moe.prefetch.enabled=true")
    built = system(cfg)
    result = run_config(cfg, built)
    elapsed = built.env.now
    device = built.device
    assert device.copy_engines[0].busy_s > 0
    for unit in device.units:
        assert unit.busy_s <= elapsed * (1 + 1e-9), unit.name
        if unit.measure == "bytes":
            assert unit.served <= unit.rate * elapsed * (1 + 1e-9), unit.name
    moved = sum(sum(s.bytes[k] for k in ("weights", "kv", "activations", "expert_prefetch"))
                for s in result.steps)
    assert sum(u.served for u in device.hbm_stacks) == pytest.approx(moved, rel=1e-9)


def test_same_seed_same_summary(scenario_factory):
    a = run_config(scenario_factory("workload.batch_size=4", "seed=7")).summary
    b = run_config(scenario_factory("workload.batch_size=4", "seed=7")).summary
    for s in (a, b):
        s["sim"].pop("wall_s")
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_routing_depends_on_the_seed(scenario_factory):
    runs = [run_config(scenario_factory("workload.batch_size=2", f"seed={s}")) for s in range(4)]
    experts = {r.summary["active_experts_per_layer"] for r in runs}
    assert len(experts) > 1


def test_more_batch_touches_more_experts_and_takes_longer(scenario_factory):
    one = run_config(scenario_factory("workload.batch_size=1")).summary
    many = run_config(scenario_factory("workload.batch_size=16")).summary
    assert one["active_experts_per_layer"] == 2
    assert many["active_experts_per_layer"] > 6
    assert many["itl_ms"]["p50"] > 2 * one["itl_ms"]["p50"]


def test_prefill_fills_ttft(scenario_factory):
    s = run_config(scenario_factory("workload.prompt_tokens=256")).summary
    assert s["ttft_ms"]["p50"] > s["itl_ms"]["p50"]


def test_eager_launch_is_slower_than_graph(scenario_factory):
    graph = run_config(scenario_factory("runtime.launch=graph")).summary
    eager = run_config(scenario_factory("runtime.launch=eager")).summary
    assert eager["itl_ms"]["p50"] > graph["itl_ms"]["p50"]
    assert eager["breakdown_ms"]["launch_overhead"] > graph["breakdown_ms"]["launch_overhead"]


@pytest.mark.parametrize("model", builtin_models())
def test_every_builtin_model_streams_its_active_weights_no_faster_than_hbm(scenario_factory, model, h200):
    """Each model's step reads at least its dense weights and at most all of them, and takes
    at least its bytes over peak bandwidth."""
    from hwsim.pipeline import system
    # the big ones do not fit one H200: timed as if they did (a what-if the run must be told)
    cfg = scenario_factory(f"model={model}", "workload.decode_steps=1", "parallel.allow_overcommit=true")
    built = system(cfg)
    s = run_config(cfg, built).summary
    total = built.schedule.weight_bytes_total()
    assert 0 < s["bytes"]["weights"] <= total * (1 + 1e-9)
    if not built.model.moe:
        assert s["bytes"]["weights"] == pytest.approx(total, rel=0.01)
    moved = s["bytes"]["weights"] + s["bytes"]["kv"]
    assert s["itl_ms"]["p50"] * 1e-3 >= moved / h200.hbm_peak_bytes_s


def test_step_totals_equal_the_sum_of_its_kernel_records(scenario_factory):
    """The stream sums each step's breakdown and bytes as kernels complete (replays in bulk);
    the per-kernel records, kept for every step here, must add up to the same figures."""
    result = run_config(scenario_factory("workload.decode_steps=3", "workload.batch_size=4",
                                           "runtime.kernel_records=-1"))
    for step in result.steps:
        records = [r for r in result.records if r.step == step.step]
        assert len(records) == step.kernels
        for comp in Component:
            summed = sum(r.attribution.get(comp, 0.0) for r in records)
            assert summed == pytest.approx(step.breakdown_s[comp.value], rel=1e-9, abs=1e-15)
        hbm = sum(r.hbm_read_bytes + r.hbm_write_bytes for r in records)
        assert hbm == pytest.approx(step.bytes["weights"] + step.bytes["kv"] + step.bytes["activations"])


def test_kernel_records_window_keeps_the_first_steps_and_every_steps_figures(scenario_factory):
    full = run_config(scenario_factory("workload.decode_steps=4", "runtime.kernel_records=-1"))
    windowed = run_config(scenario_factory("workload.decode_steps=4", "runtime.kernel_records=2"))
    assert {r.step for r in windowed.records} == {0, 1}
    assert len(windowed.records) == sum(1 for r in full.records if r.step < 2)
    for a, b in zip(full.steps, windowed.steps):
        assert a.duration_s == b.duration_s and a.breakdown_s == b.breakdown_s
