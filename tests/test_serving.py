"""Serving: arrivals, continuous batching, queueing, and per-request latency metrics."""

from pathlib import Path

import numpy as np
import pytest

from hwsim.pipeline import run_config, system
from hwsim.config.load import load_scenario
from hwsim.model.schedule import StepShape
from hwsim.step import simulate_pass

TINY = str(Path(__file__).parent / "data" / "tiny-moe.yaml")


def serve(*sets):
    cfg = load_scenario(None, [f"model={TINY}", "workload.prompt.tokens=128", "workload.output.tokens=16",
                               *sets])
    return cfg, run_config(cfg)


def littles_law_terms(requests):
    arrivals = np.array([r["arrival_s"] for r in requests])
    finishes = np.array([r["finish_s"] for r in requests])
    t0, t1 = arrivals.min(), finishes.max()
    # time-average number in system, from the arrival/departure step function
    events = sorted([(a, 1) for a in arrivals] + [(f, -1) for f in finishes])
    area, n, last = 0.0, 0, t0
    for t, d in events:
        area += n * (t - last)
        n, last = n + d, t
    L = area / (t1 - t0)
    lam = len(requests) / (t1 - t0)
    W = float(np.mean(finishes - arrivals))
    return L, lam * W


def test_littles_law_holds_on_the_simulated_queue():
    _, r = serve("workload.arrivals.kind=poisson", "workload.arrivals.rate_per_s=200",
                 "workload.arrivals.requests=200")
    L, lam_w = littles_law_terms(r.requests)
    assert L == pytest.approx(lam_w, rel=0.02)
    assert L > 1    # the queue was actually exercised


def test_vanishing_load_gives_one_prefill_and_batch_one_steps():
    cfg, r = serve("workload.arrivals.kind=poisson", "workload.arrivals.rate_per_s=0.01",
                   "workload.arrivals.requests=4", "workload.context_tokens=128")
    b = system(cfg)
    prefill = simulate_pass(b, StepShape("prefill", 1, 128, 0), 0, None).duration_s * 1e3
    b.env.run()
    step = simulate_pass(b, StepShape("decode", 1, 1, 512), 1, None).duration_s * 1e3
    assert r.summary["ttft_ms"]["p50"] == pytest.approx(prefill, rel=0.02)
    assert r.summary["itl_ms"]["p50"] == pytest.approx(step, rel=0.02)
    assert r.summary["serving"]["queue_ms_p99"] == pytest.approx(0, abs=1e-9)


def test_past_saturation_queueing_grows_with_time():
    _, r = serve("workload.arrivals.kind=poisson", "workload.arrivals.rate_per_s=5000",
                 "workload.arrivals.requests=120", "workload.max_batch_size=4")
    q = [row["queue_ms"] for row in sorted(r.requests, key=lambda x: x["arrival_s"])]
    third = len(q) // 3
    assert np.mean(q[-third:]) > 3 * np.mean(q[:third])


def test_same_seed_same_request_records():
    sets = ["workload.arrivals.kind=gamma", "workload.arrivals.rate_per_s=300", "workload.arrivals.cv=3",
            "workload.arrivals.requests=40", "workload.prompt.kind=lognormal", "seed=5"]
    a, b = serve(*sets)[1].requests, serve(*sets)[1].requests
    assert a == b
    c = serve(*sets[:-1], "seed=6")[1].requests
    assert a != c


def test_trace_replay_reproduces_the_arrivals(tmp_path):
    trace = tmp_path / "log.csv"
    rows = [(0.0, 100, 5), (0.001, 60, 3), (0.0015, 300, 8), (0.2, 20, 2)]
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{t},{p},{o}\n" for t, p, o in rows))
    _, r = serve("workload.arrivals.kind=trace", f"workload.arrivals.trace={trace}")
    got = [(x["arrival_s"], x["prompt_tokens"], x["output_tokens"]) for x in r.requests]
    assert got == rows
    assert all(len(x) for x in r.requests)


def test_closed_loop_never_exceeds_its_users():
    _, r = serve("workload.arrivals.kind=closed", "workload.arrivals.users=3", "workload.arrivals.think_ms=1",
                 "workload.arrivals.requests=18")
    assert max(it.decodes for it in r.iterations) <= 3
    assert r.summary["serving"]["requests_completed"] == 18


def test_kv_capacity_makes_requests_wait(small_hbm):
    _, r = serve("hardware=small-hbm", "workload.prompt.tokens=4096", "workload.arrivals.kind=poisson",
                 "workload.arrivals.rate_per_s=1000", "workload.arrivals.requests=8")
    s = r.summary["serving"]
    assert s["kv_blocked_ms"] > 0 and s["requests_completed"] == 8
    assert max(it.decodes for it in r.iterations) < 8


def test_serving_json_contract():
    _, r = serve("workload.arrivals.kind=poisson", "workload.arrivals.rate_per_s=100",
                 "workload.arrivals.requests=10")
    s = r.summary
    assert {"p50", "p99", "mean"} <= set(s["itl_ms"]) and {"p50", "p99", "mean"} <= set(s["ttft_ms"])
    assert {"throughput_tok_s", "slo_attainment", "goodput_rps", "queue_ms_p99",
            "requests_completed"} <= set(s["serving"])
    assert 0 <= s["serving"]["slo_attainment"] <= 1
