"""Swap preemption: a preempted request's KV copied to host memory and back over the host link,
instead of being recomputed."""

from pathlib import Path

import pytest

from hwsim.pipeline import system
from hwsim.config.load import load_scenario
from hwsim.errors import ConfigError
from hwsim.serving.host_link import HOST_LINKS
from hwsim.serving.loop import ServingLoop, StepOracle

TINY = str(Path(__file__).parent / "data" / "tiny-moe.yaml")


def crowded(*sets):
    """Eight 4k-token prompts at once into a GPU with KV room for about six."""
    return load_scenario(None, [f"model={TINY}", "hardware=small-hbm", "workload.prompt.tokens=4096",
                                "workload.output.tokens=256", "workload.arrivals.kind=poisson",
                                "workload.arrivals.rate_per_s=1000", "workload.arrivals.requests=8",
                                "workload.kv_allocation=as_needed", *sets])


class Watched(StepOracle):
    """Checks, at every iteration, that the KV held fits the memory the weights leave."""

    def time(self, *shape):
        loop = self.loop
        assert loop._reserved + loop.prefix.used <= loop._kv_capacity * (1 + 1e-12)
        return super().time(*shape)


def serve(cfg) -> ServingLoop:
    b = system(cfg)
    oracle = Watched(b)
    loop = ServingLoop(b, oracle=oracle)
    oracle.loop = loop
    loop.run()
    return loop


def test_swap_copies_kv_out_and_back_and_recomputes_nothing(small_hbm):
    recompute = serve(crowded())
    swap = serve(crowded("workload.preemption=swap"))
    assert swap.preemptions > 0 and recompute.preemptions > 0
    prompts = sum(r.prompt_tokens for r in swap.finished)
    assert sum(it.prefill_tokens for it in swap.iterations) == prompts          # every prompt once
    assert sum(it.prefill_tokens for it in recompute.iterations) > prompts      # recompute prefills again
    for r in swap.finished:
        assert r.tokens == r.output_tokens and (swap.gaps.of(r) >= 0).all()
        assert r.recomputed == 0 and r.swapped_bytes == 0
    copies = swap.host.copies
    out = [c for c in copies if c.direction == "out"]
    back = [c for c in copies if c.direction == "in"]
    assert out and sum(c.bytes for c in out) == pytest.approx(sum(c.bytes for c in back))
    link = HOST_LINKS["pcie-gen5"]
    for c in copies:          # one at a time: latency + bytes / (line rate x efficiency)
        assert c.end_s - c.start_s == pytest.approx(link.latency_s + c.bytes / (link.bytes_s * link.efficiency),
                                                    rel=1e-9)
        # the pass that needed the copy starts when it has landed
        assert any(it.t_start == pytest.approx(c.end_s, abs=1e-12) for it in swap.iterations)


def test_a_faster_host_link_swaps_sooner(small_hbm):
    pcie = serve(crowded("workload.preemption=swap")).host.copies
    c2c = serve(crowded("workload.preemption=swap", "workload.host_link=nvlink-c2c")).host.copies
    assert [c.bytes for c in pcie] == [c.bytes for c in c2c]
    assert sum(c.end_s - c.start_s for c in c2c) < 0.2 * sum(c.end_s - c.start_s for c in pcie)


def test_swap_without_preemption_is_refused():
    serving = ["workload.arrivals.kind=poisson"]          # preemption is a key of serving only
    with pytest.raises(ConfigError, match="as_needed") as e:
        load_scenario(None, [*serving, "workload.preemption=swap"])
    assert e.value.key == "workload"
    with pytest.raises(ConfigError) as e:
        load_scenario(None, [*serving, "workload.preemption=offload"])
    assert e.value.key == "workload.preemption"
