"""Prefix caching (KV blocks shared by equal prompt prefixes) and preemption with recompute
when KV memory runs out."""

from pathlib import Path

import pytest

from hwsim.pipeline import run_config, system
from hwsim.config.load import load_scenario
from hwsim.serving.loop import ServingLoop, StepOracle
from hwsim.serving.metrics import request_rows
from hwsim.serving.prefix_cache import PrefixCache

TINY = str(Path(__file__).parent / "data" / "tiny-moe.yaml")
MOONCAKE = ["workload.arrivals.kind=trace", "workload.arrivals.trace=scenarios/traces/mooncake-sample.jsonl"]


def mooncake(*sets):
    return run_config(load_scenario(None, [f"model={TINY}", *MOONCAKE, *sets]))


def test_prefix_hits_are_the_leading_computed_blocks_of_the_trace():
    """scenarios/traces/mooncake-sample.jsonl, one request at a time except the first two,
    which arrive together: the second cannot reuse block 0 before the first has computed it."""
    on, off = mooncake(), mooncake("workload.prefix_caching=false")
    cached = [r["cached_prompt_tokens"] for r in on.requests]
    #   hash_ids:  [0,1] [0,2,3] [0,1,4] [5] [0,1,4,6] [0,7] [0,1] (1024 tokens: one is computed) [8,9]
    assert cached == [0, 0, 1024, 0, 1536, 512, 1023, 0]
    prompts = sum(r["prompt_tokens"] for r in on.requests)
    assert on.summary["serving"]["prefix_hit_rate"] == pytest.approx(sum(cached) / prompts)
    assert off.summary["serving"]["prefix_hit_rate"] == 0
    assert all(r["cached_prompt_tokens"] == 0 for r in off.requests)
    for a, b in zip(on.requests, off.requests):
        if a["cached_prompt_tokens"]:
            assert a["ttft_ms"] < b["ttft_ms"]          # less prefill, from the simulated pass
        if a["request"] < 2:
            assert a["ttft_ms"] == b["ttft_ms"]


def test_idle_prefix_blocks_are_evicted_least_recently_released_first():
    c = PrefixCache()
    c.hold((1, 2), 10.0, 1024)
    c.computed((1, 2), 1024)
    c.hold((3,), 10.0, 512)
    c.computed((3,), 512)
    c.release((3,))
    c.release((1, 2))
    assert c.used == 30 and c.evictable_bytes(set()) == 30
    assert c.hits((1, 2, 9)) == 2
    assert c.evict(15, keep={3}) == 20            # 3 kept: 1 and 2, released later, go
    assert c.hits((1, 2)) == 0 and c.hits((3,)) == 1 and c.used == 10
    assert c.hold((3, 4), 10.0, 600) == 512
    assert c.evictable_bytes(set()) == 0          # 3 is held again


def crowded(allocation: str):
    return load_scenario(None, [f"model={TINY}", "hardware=small-hbm", "workload.prompt.tokens=4096",
                                "workload.output.tokens=256", "workload.arrivals.kind=poisson",
                                "workload.arrivals.rate_per_s=1000", "workload.arrivals.requests=8",
                                f"workload.kv_allocation={allocation}"])


class Watched(StepOracle):
    """Checks, at every iteration, that the KV held fits the memory the weights leave."""

    def __init__(self, built):
        super().__init__(built)
        self.peak = 0.0

    def time(self, *shape):
        loop = self.loop
        held = loop._reserved + loop.prefix.used
        assert held <= loop._kv_capacity * (1 + 1e-12)
        assert held == pytest.approx(sum(r.held_bytes for r in loop.running) + loop.prefix.used)
        self.peak = max(self.peak, held)
        return super().time(*shape)


def serve_watched(cfg):
    b = system(cfg)
    oracle = Watched(b)
    loop = ServingLoop(b, oracle=oracle)
    oracle.loop = loop
    loop.run()
    return loop, oracle


def test_kv_as_needed_preempts_and_recomputes_when_memory_runs_out(small_hbm):
    whole, _ = serve_watched(crowded("whole"))
    loop, oracle = serve_watched(crowded("as_needed"))
    assert whole.preemptions == 0 and loop.preemptions > 0
    assert max(it.decodes for it in loop.iterations) > max(it.decodes for it in whole.iterations)
    assert oracle.peak > 0.9 * loop._kv_capacity
    rows = request_rows(loop)
    assert [r["request"] for r in rows] == list(range(8))          # one row per request
    assert sum(r["preemptions"] for r in rows) == loop.preemptions
    for r in loop.finished:
        assert r.tokens == r.output_tokens                         # no token lost or repeated
        assert len(loop.gaps.of(r)) == r.tokens - 1 and (loop.gaps.of(r) >= 0).all()
    preempted = [r for r in loop.finished if r.preemptions]
    # its recompute prefill covered the prompt and the reply so far
    assert all(r.recomputed > 0 and r.prefilled == r.prompt_tokens + r.recomputed for r in preempted)


def test_preemptions_reported_in_the_serving_summary(small_hbm):
    r = run_config(crowded("as_needed"))
    s = r.summary["serving"]
    assert s["preemptions"] == sum(q["preemptions"] for q in r.requests) > 0
    assert s["requests_completed"] == len(r.requests) == 8
    assert run_config(crowded("whole")).summary["serving"]["preemptions"] == 0


def test_the_loop_admits_into_the_hbm_its_build_left_for_kv_caches():
    """Session 21: the KV room is resolved once, by build (GpuMemory.kv_room), not asked of the
    schedule again by every loop, tier and engine: HBM less the weights and activations region."""
    b = system(load_scenario(None, [f"model={TINY}", *MOONCAKE]))
    room = b.chip.hbm_capacity_bytes - b.schedule.weight_bytes_total()
    assert b.memory.kv_room == room and ServingLoop(b)._kv_capacity == room
    assert 0 < room < b.chip.hbm_capacity_bytes
