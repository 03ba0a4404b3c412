"""The grid pass's shortcuts give what recomputing gives (s21, issue 43 item 6): a pass planned on
a schedule whose memos are warm from other shapes is the pass a fresh schedule plans; routing
counts kept on their assignments are the counts counted back; the direct count draw is the
one-expert-at-a-time loop it was; the per-stack expert bytes of experts all streamed from HBM
add up as the per-plan loop did, to the bit."""

import dataclasses

import numpy as np
import pytest

from hwsim.pipeline import system
from hwsim.config.load import load_scenario
from hwsim.model.kernel import timing_of
from hwsim.model.paged_sdpa import PackedShape, layer_kernels, stack_kernels
from hwsim.model.moe_dispatch import FROM_HBM, DispatchStats, ExpertDispatch, ExpertPlan
from hwsim.model.schedule import StepShape
from hwsim.model.shapes import Moe
from hwsim.workload.router import assignments, experts_chosen, tokens_per_expert, uniform_topk_counts


def _loop_counts(rng, tokens: int, moe: Moe, layers: int) -> np.ndarray:
    """uniform_topk_counts as it was written before s21: one expert at a time, summed each time."""
    k, experts = moe.top_k, moe.experts
    left = np.zeros((layers, k + 1), dtype=np.int64)
    left[:, k] = tokens
    picks = np.arange(1, k + 1)
    counts = np.empty((layers, experts), dtype=np.int64)
    for j in range(experts):
        took = rng.binomial(left[:, 1:], np.minimum(picks / (experts - j), 1.0))
        counts[:, j] = took.sum(axis=1)
        left[:, 1:] -= took
        left[:, :-1] += took
    return counts


@pytest.mark.parametrize("tokens, experts, top_k, layers", [(40, 128, 8, 48), (1, 128, 8, 3), (300, 8, 2, 32)])
def test_direct_counts_draw_as_the_loop_did(tokens, experts, top_k, layers):
    moe = Moe(experts=experts, top_k=top_k, expert_ffn=64)
    new = uniform_topk_counts(np.random.default_rng(5), tokens, moe, layers)
    old = _loop_counts(np.random.default_rng(5), tokens, moe, layers)
    assert new.dtype == old.dtype and new.flags.c_contiguous
    assert np.array_equal(new, old)


def test_kept_counts_are_the_counts_counted_back():
    counts = np.random.default_rng(0).integers(0, 5, size=16)
    choice = assignments(counts, 2 if counts.sum() % 2 == 0 else 1)
    plain = np.array(choice)                   # the same ids, nothing kept: counted
    assert np.array_equal(tokens_per_expert(choice, 16), tokens_per_expert(plain, 16))
    assert experts_chosen(choice) == experts_chosen(plain) == np.count_nonzero(counts)
    part = choice[:3]                          # a slice (a speculative pass's first rows) counts its own
    assert not np.array_equal(tokens_per_expert(part, 16), counts)
    assert np.array_equal(tokens_per_expert(part, 16), np.bincount(np.asarray(part).ravel(), minlength=16))


def _dispatch(stacks: int, expert_bytes: float) -> ExpertDispatch:
    d = object.__new__(ExpertDispatch)
    d.stacks, d.expert_bytes, d.stats, d._step = stacks, expert_bytes, DispatchStats(), 1
    return d


def test_stack_bytes_of_experts_from_hbm_add_as_the_per_plan_loop():
    stacks, expert_bytes = 6, 9.4e6 / 3
    fast, expected = _dispatch(stacks, expert_bytes), {}
    mixed = [FROM_HBM] * 4 + [ExpertPlan(0.25, 2, None)] + [FROM_HBM] * 3   # the per-plan loop's own
    for layer, plans in ((0, [FROM_HBM] * 37), (0, [FROM_HBM] * 91), (1, mixed), (1, [FROM_HBM] * 5)):
        fast.account(layer, plans)                  # a layer twice: adds onto what it has
        per = expected.setdefault((1, layer), [0.0] * stacks)
        for plan in plans:                          # the loop as it was before s21
            hbm_bytes = expert_bytes * (1.0 - plan.on_chip)
            if plan.channel_group >= 0:
                per[plan.channel_group] += hbm_bytes
            else:
                for s in range(stacks):
                    per[s] += hbm_bytes / stacks
    assert fast.stats.stack_bytes == expected       # to the bit


def _pass(built, shape, routing):
    items = built.schedule.step(shape, routing, built.schedule.cold_state())
    return [(type(k).__name__, getattr(k, "name", None), getattr(k, "address", None),
             k.timing.values if getattr(k, "timing", None) else repr(k)) for k in items]


@pytest.mark.parametrize("model", ["llama-3.1-8b", "qwen3-30b-a3b"])
def test_a_pass_on_warm_memos_is_the_pass_of_a_fresh_schedule(model):
    cfg = load_scenario(None, [f"model={model}", "runtime.moe_schedule=grouped"])
    warm, fresh = system(cfg), system(cfg)
    moe = warm.model.moe
    layers = [layer for layer in range(warm.model.layers) if warm.model.is_moe_layer(layer)]

    def routing(tokens, seed):
        if moe is None:
            return {}
        counts = uniform_topk_counts(np.random.default_rng(seed), tokens, moe, len(layers))
        return {layer: assignments(c, moe.top_k) for layer, c in zip(layers, counts)}
    shape = StepShape("mixed", 8, 8 + 64, 512, 64, 1)
    for other in (StepShape("decode", 8, 8, 1024), StepShape("mixed", 8, 72, 2048, 64, 1), shape):
        _pass(warm, other, routing(other.tokens, 1))       # warms every memo, this shape's too
    assert _pass(warm, shape, routing(shape.tokens, 2)) == _pass(fresh, shape, routing(shape.tokens, 2))


@pytest.mark.parametrize("p", [PackedShape(72, 72 + 3000, True, 0.5), PackedShape(8, 8, False, 0.5),
                               PackedShape(4096, 90_000, True, 0.4)])
def test_the_packed_attention_of_every_layer_is_each_layers_own_build(p):
    """paged_sdpa.stack_kernels relocates the first layer's kernels: each is the kernel that
    layer's own build makes (every field, its timing fields' values included)."""
    # the scenario's Llama schedule; engine kind hwsim so that CI (no transformers) builds it too
    sched = system(load_scenario("scenarios/engines/hf-llama-chat.yaml", ["workload.engine.kind=hwsim"])).schedule
    own = [k for layer in range(sched.model.layers) for k in layer_kernels(sched, layer, p)]
    stacked = stack_kernels(sched, p)
    assert len(stacked) == len(own) > sched.model.layers
    assert [_fields(k) for k in stacked] == [_fields(k) for k in own]
    assert len({k.address for k in stacked}) > 2          # the layers' caches: not all one address


def _fields(k):
    return (*(getattr(k, f.name) for f in dataclasses.fields(k) if f.init), timing_of(k).values)
