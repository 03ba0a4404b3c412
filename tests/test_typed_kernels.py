"""Issue 30 item 2: what reads a built-in schedule's kernels reads their typed fields (code kind,
role) and typed Collective items, never their names; attention and FFN blocks are registered by
config name and refuse what they do not support."""

import typing
from dataclasses import fields

import numpy as np
import pytest

from hwsim.pipeline import system
from hwsim.config.load import load_model
from hwsim.config.scenario import Runtime, Scenario, kv_cache
from hwsim.errors import ConfigError
from hwsim.model import ir
from hwsim.model.ir import Collective
from hwsim.ktrace.shapes import weight_shapes
from hwsim.model import blocks
from hwsim.model.kernel import ExpertBlock, Kernel, Role, copy_kernel, named_kernels
from hwsim.model.l2_residency import L2Residency
from hwsim.model.schedule import Schedule, StepShape
from hwsim.model.shapes import MlaAttention
from hwsim.parallel import layout as lay
from hwsim.parallel.multi import cut_points
from hwsim.workload import kv_format

MIB = 2**20


def _renamed(items):
    """The stream with every kernel's name replaced: what reads names would see nothing."""
    out = []
    for it in items:
        if type(it) is Kernel:
            out.append(copy_kernel(it, name="anonymous"))
        elif type(it) is ExpertBlock:
            out.append(ExpertBlock(tuple(copy_kernel(k, name="anonymous") for k in it.kernels), it.layer, 0, ""))
        else:
            out.append(it)
    return out


def test_code_kind_is_set_at_construction_and_the_l2_walk_reads_it_not_the_name():
    silu = Kernel(name="L3.expert12.silu", layer=3, tiles=4, l2_read=100.0, reads=("a",))
    assert silu.code == "silu" and Kernel(name="x", layer=0, tiles=1, code="gemm").code == "gemm"

    def cold_code_trips(k):
        l2 = L2Residency(50 * MIB, spill_address=1 << 30)
        l2.previous_kind, l2.code_last_use["silu"] = "gemm", 0.0    # silu's code ran, then a GEMM's
        l2.last_use["a"] = 0.0
        return l2.walk(k).start_trips

    assert cold_code_trips(silu) > 0
    # another name, the same code: the same wait; the same name, other code: another kind
    assert cold_code_trips(copy_kernel(silu, name="renamed")) == cold_code_trips(silu)
    l2 = L2Residency(50 * MIB, spill_address=1 << 30)
    l2.previous_kind = "silu"
    l2.last_use["a"] = 0.0
    assert l2.walk(silu).start_trips == 0                               # the same kind ran last
    assert l2.walk(copy_kernel(silu, code="mul")).start_trips > 0


@pytest.mark.parametrize("moe_schedule", ["per-expert", "grouped", "fused"])
def test_expert_parallel_cuts_follow_roles_and_are_collective_items(h200, moe_schedule):
    """Data-parallel attention, experts over 4 GPUs: each MoE layer dispatches before its routed
    experts' first kernel and combines after them; the cuts are the same with every kernel's
    name wiped (the roles say where they go), and are typed Collective items."""
    model = load_model("qwen3-30b-a3b")
    layout = lay.Layout(gpus=4, tp=1, ep=4, gpus_per_node=4, dp_attention=True)
    sched = Schedule(model, h200, moe_schedule=moe_schedule, max_batch=4, max_context=64)
    rng = np.random.default_rng(0)
    routing = {ly: rng.integers(0, model.moe.experts, (4, model.moe.top_k)) for ly in range(model.layers)}
    shape = StepShape("decode", 4, 4, 32)
    items = sched.step(shape, routing)
    segments = cut_points(items, layout, set(routing), shape, model.hidden, model.vocab)
    cuts = [c for _, c in segments]
    assert cuts == [c for _, c in cut_points(_renamed(items), layout, set(routing), shape, model.hidden, model.vocab)]
    assert all(isinstance(c, Collective) for c in cuts[:-1]) and cuts[-1] is None
    assert [(c.kind, c.layer) for c in cuts[:4]] == [("dispatch", 0), ("combine", 0), ("dispatch", 1), ("combine", 1)]
    first_after_dispatch = segments[1][0][0]
    assert (type(first_after_dispatch) is ExpertBlock or first_after_dispatch.role is Role.ROUTED)
    assert all(getattr(k, "role", None) is not Role.ROUTED for k in segments[0][0])


def test_tensor_parallel_all_reduce_is_a_collective_of_the_hidden_states(h200):
    model = load_model("mixtral-8x7b")
    layout = lay.Layout(gpus=2, tp=2, ep=1, gpus_per_node=2, dp_attention=False)
    shard = lay.shard_model(model, layout)
    sched = Schedule(shard, h200, max_batch=8, max_context=64)
    routing = {ly: np.zeros((8, 2), int) for ly in range(model.layers)}
    shape = StepShape("decode", 8, 8, 32)
    cuts = [c for _, c in cut_points(sched.step(shape, routing), layout, set(), shape, model.hidden, model.vocab)]
    assert cuts[0] == Collective("all_reduce", 8 * model.hidden * 2, 2, 0)
    assert len(cuts) == 2 * model.layers + 1
    assert cuts[-1] == Collective("all_gather", 8 * model.vocab * 2, 2, -1)


def _choices(field_name: str) -> set[str]:
    return set(typing.get_args(Runtime.model_fields[field_name].annotation))


def test_every_config_choice_has_a_registered_block():
    assert set(blocks.ATTENTION_KERNELS) == _choices("attention_kernel")
    assert set(blocks.MOE_SCHEDULES) == _choices("moe_schedule")


@pytest.mark.parametrize("moe_schedule", sorted(blocks.MOE_SCHEDULES))
@pytest.mark.parametrize("placement", ["interleaved", "per-expert"])
def test_an_ffn_block_refuses_exactly_the_placements_it_does_not_declare(moe_schedule, placement):
    cfg = Scenario.model_validate({"hardware": "h200-sxm", "model": "mixtral-8x7b", "workload": {"decode_steps": 1},
                                   "runtime": {"moe_schedule": moe_schedule}, "moe": {"placement": placement}})
    problems = list(blocks.moe_schedule_problems(cfg))
    assert bool(problems) == (placement not in blocks.MOE_SCHEDULES[moe_schedule].placements)
    if problems:
        with pytest.raises(ConfigError) as e:
            system(cfg)
        assert e.value.key == "moe.placement" and "\n" not in e.value.render()


@pytest.mark.parametrize("name", sorted(blocks.ATTENTION_KERNELS))
@pytest.mark.parametrize("model,kv_bits", [("mixtral-8x7b", 16), ("deepseek-v2-lite", 16), ("deepseek-v2-lite", 4)])
def test_an_attention_kernel_refuses_what_it_does_not_declare(h200, name, model, kv_bits):
    block = blocks.ATTENTION_KERNELS[name]
    m = load_model(model)
    kv = kv_format.from_config(kv_cache({"bits": kv_bits}))
    mla = isinstance(m.attention, MlaAttention)
    supported = (mla or not block.mla_only) and (kv.is_unquantized or not block.bf16_kv_only)
    if supported:
        assert Schedule(m, h200, kv=kv, attention_kernel=name).attention is block
    else:
        with pytest.raises(ConfigError) as e:
            Schedule(m, h200, kv=kv, attention_kernel=name)
        assert e.value.key == "runtime.attention_kernel"


def test_kernel_ir_has_no_new_mutable_slots():
    """The typed fields are plain data compared and copied with the kernel (issue 32 asks the IR
    back to plain data: no more cache slots)."""
    f = {x.name: x for x in fields(Kernel)}
    assert f["code"].compare and f["role"].compare and f["code"].init and f["role"].init


@pytest.mark.parametrize("moe_schedule", ["per-expert", "grouped"])
def test_a_built_in_step_emits_the_typed_items_a_trace_is_classified_into(h200, moe_schedule):
    """The items of the built-in schedule's kernels are the IR's: its weight GEMMs are the model's
    weight shapes (those an imported trace's GEMMs are checked against), its grouped GEMMs hold
    every routed (token, expert) row, its decode attention attends over the context plus the new
    token, and its memory kernels say the bytes they move."""
    model = load_model("mixtral-8x7b")
    sched = Schedule(model, h200, moe_schedule=moe_schedule, max_batch=4, max_context=64)
    routing = {ly: np.array([[0, 1], [1, 2], [3, 4], [0, 7]]) for ly in range(model.layers)}
    ks = [k for k in named_kernels(sched.step(StepShape("decode", 4, 4, 32), routing)) if type(k) is Kernel]
    shapes = {(k, n) for k, n, _ in weight_shapes(model)}
    gemms = [k.item for k in ks if isinstance(k.item, ir.Gemm)]
    assert gemms and all((g.k, g.n) in shapes and g.m in (1, 2, 4) for g in gemms if g.weight)
    attention = [k.item for k in ks if isinstance(k.item, ir.Attention)]
    assert len(attention) == model.layers and {(a.batch, a.kv_heads, a.kv_len) for a in attention} == {(4, 8, 33)}
    grouped = [k.item for k in ks if isinstance(k.item, ir.GroupedGemm)]
    if moe_schedule == "grouped":
        assert len(grouped) == 2 * model.layers and all(sum(g.rows) == 4 * 2 for g in grouped)
        assert {(g.k, g.n) for g in grouped} <= shapes
    else:
        assert not grouped
    assert all(isinstance(k.item, (ir.Gemm, ir.GroupedGemm, ir.Attention, ir.Memory)) for k in ks)
