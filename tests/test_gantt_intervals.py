"""A run that keeps the units' busy intervals in full only for the step the Gantt chart draws
(every_interval=False, what `hwsim run` does without --trace) draws the same chart: the same
rows (every lane ever busy) and the same intervals within the drawn step."""

from __future__ import annotations

import pytest

from hwsim.pipeline import run_config, system
from hwsim.config.load import load_scenario
from hwsim.run import drawn_step

PREFETCH = ["moe.prefetch.enabled=true", "moe.prefetch.predictor=oracle", "moe.cache.pin_router=true"]


def chart(result):
    """What the chart draws: per busy lane, the intervals that end after the drawn step starts."""
    step = max(r.step for r in result.records)
    t0 = min(r.t_start for r in result.records if r.step == step)
    return {lane: [s for s in spans if s[1] > t0] for lane, spans in result.lanes.items() if spans}


@pytest.mark.parametrize("sets", [
    ["workload.decode_steps=4"],
    ["workload.decode_steps=5", "runtime.kernel_records=3", "workload.prompt_tokens=256", *PREFETCH],
    ["workload.decode_steps=2", "runtime.kernel_records=0", "workload.prompt_tokens=128"],
], ids=["decode", "prefill-prefetch-window", "prefill-drawn"])
def test_only_the_drawn_step_in_full_draws_the_same_chart(sets):
    cfg = load_scenario(None, sets)
    full = run_config(cfg, system(cfg))
    lean = run_config(cfg, system(cfg), every_interval=False)
    assert max(r.step for r in full.records) == drawn_step(cfg)
    assert full.summary["itl_ms"] == lean.summary["itl_ms"]
    assert chart(full) == chart(lean) and chart(full)
    kept, every = (sum(map(len, r.lanes.values())) for r in (lean, full))
    assert kept < every if drawn_step(cfg) > 0 else kept == every     # a step before the drawn one


@pytest.mark.parametrize("scenario", [None, "scenarios/qwen3-235b-ep4.yaml"], ids=["one-gpu", "ep4"])
def test_a_run_that_draws_nothing_keeps_no_intervals_and_the_same_results(scenario):
    """`hwsim run` without --plots or --trace keeps no busy intervals at all (intervals=False):
    nothing reads them, and every result but the lanes is the same."""
    cfg = load_scenario(scenario, ["workload.decode_steps=2"])
    full = run_config(cfg, system(cfg), every_interval=False)
    bare = run_config(cfg, system(cfg), every_interval=False, intervals=False)
    assert any(full.lanes.values()) and not any(bare.lanes.values())
    for result in (full, bare):
        result.summary["sim"].pop("wall_s")
    assert bare.summary == full.summary
    assert bare.records.rows == full.records.rows
