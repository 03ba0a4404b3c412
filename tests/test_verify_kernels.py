"""Issue 45: the kernels of a verification step (Q > 1 query tokens a sequence) as the libraries
launch them: FlashAttention-2 and cuDNN unpacked (hwsim/model/multi_query_attention.py) and cuBLAS's
narrow-N decode GEMMs per chip (gemm.narrow_n_blocks)."""

import json
import tarfile
from pathlib import Path

import pytest

from hwsim import operators as mb
from hwsim.config.load import load_profile
from hwsim.hw.chip import ChipSpec
from hwsim.model import ops
from hwsim.model.multi_query_attention import fa2_splits, multi_query_attention

ROOT = Path(__file__).resolve().parents[1]
KV = 2 * 128 * 2          # K and V bytes a token and KV head, head dim 128, bf16


@pytest.fixture(scope="module")
def chips():
    return {name: ChipSpec.from_profile(load_profile(name)) for name in ("h100-sxm", "h200-sxm")}


def attention(chip, batch, queries, context=4096, heads=32, kv_heads=4):
    return multi_query_attention("a", 0, batch, heads, kv_heads, queries, 128, 128, context, KV, 0, chip.sizes,
                                 "flash")


def test_fa2_heuristic_counts_query_heads_not_kv_heads(chips):
    """flash_api.cpp: 8 x 32 heads x 1 query block = 256 programs >= 0.8 x 264 slots: no split;
    one sequence's 32 programs split the context (the packed count, 4 KV heads, would split more)."""
    chip = chips["h100-sxm"].sizes
    assert fa2_splits(8, 32, 8, 4096, chip, 128) == 1
    assert ops._fa2_splits(8 * 4, 2 * chip.sms, 32) > 1       # what packing the group would give
    one = fa2_splits(1, 32, 2, 4096, chip, 128)
    assert 1 < one < ops.decode_attention_splits(1, 4, 4096, chip)


def test_fa2_verification_runs_a_padded_tile_per_query_head(chips):
    """Batch 8, Q = 8, Qwen3's 32 query heads over 4 KV heads: 256 programs of 128 rows, each
    walking the whole context; the group's 8 programs read their KV head from HBM once."""
    chip = chips["h100-sxm"]
    [k] = attention(chip, 8, 8)
    assert k.tiles == 8 * 32
    assert k.tensor_flops == pytest.approx(2 * 128 * 4096 * 256)
    assert k.tiles * k.hbm_read == pytest.approx(8 * 4 * 4096 * KV)
    assert k.tiles * (k.hbm_read + k.l2_read) > 8 * 8 * 4 * 4096 * KV * 0.99


def test_fa2_verification_costs_what_its_padded_tiles_cost(chips):
    """The unpacked kernel at batch 8 is MMA-bound, so Q = 2 and Q = 8 cost alike and several
    times the one-query (GQA-packed) decode attention; at batch 1 it splits and stays short."""
    chip = chips["h100-sxm"]
    t = {q: mb.device_time_s(chip, attention(chip, 8, q)) for q in (2, 8)}
    one = mb.device_time_s(chip, ops.decode_attention("a", 0, 8, 32, 4, 128, 128, 4096, KV, 0, chip.sizes))
    assert t[2] == pytest.approx(t[8], rel=0.02)
    assert t[8] > 3 * one
    assert mb.device_time_s(chip, attention(chip, 1, 8)) < t[8] / 4


def test_verification_step_uses_the_unpacked_kernel_of_either_library():
    """A workload.speculative step's attention: FA2 and cuDNN both unpacked (a program per query
    head: 8 x 32), cuDNN's unsplit (no reduction kernel after it)."""
    from hwsim.pipeline import system
    from hwsim.config.load import load_scenario
    from hwsim.model.schedule import StepShape
    sets = ["model=qwen3-30b-a3b", "workload.batch_size=8", "workload.context_tokens=4096"]
    for kernel in ("flash", "cudnn"):
        b = system(load_scenario(None, sets + [f"runtime.attention_kernel={kernel}"]))
        shape = StepShape("decode", 8, 8 * 4, 4096, queries=4)
        ks = b.schedule._decode_attention(0, shape, 4, 128, 128)
        att = [k for k in ks if k.name == "L0.attention"][0]
        assert att.item.q_len == 4 and att.item.backend == kernel and att.tiles == 8 * 32
        if kernel == "cudnn":
            assert [k.name for k in ks] == ["L0.attention"]


def cudnn(chip, batch, queries, context=4096, heads=32, kv_heads=8):
    return multi_query_attention("a", 0, batch, heads, kv_heads, queries, 128, 128, context, KV, 0,
                                 chip.sizes, "cudnn")


def test_cudnn_verification_is_the_traced_grid(chips):
    """The H100 assisted-generation trace (Llama-8B, batch 1, Q = 5, 517 keys, K and V expanded to
    32 heads): cuDNN's sm90 forward kernel on a grid of 32 x 1 x 1, no reduction kernel; the
    packed model split it over 256 blocks and merged them."""
    chip = chips["h100-sxm"]
    [k] = cudnn(chip, 1, 5, context=517, kv_heads=32)
    assert k.tiles == 32 and k.hbm_read == pytest.approx(517 * KV)
    assert k.tensor_flops == pytest.approx(2 * 64 * 517 * 256)
    packed = ops.decode_attention("a", 0, 1, 32 * 5, 32, 128, 128, 517, KV, 0, chip.sizes, library="cudnn")
    assert packed[0].tiles == 256 and len(packed) == 2
    assert mb.device_time_s(chip, [k]) > mb.device_time_s(chip, packed)
    assert len(cudnn(chip, 1, 65)) == 1 and cudnn(chip, 1, 65)[0].tiles == 32 * 2   # a second 64-row block


def test_cudnn_verification_holds_one_program_an_sm(chips):
    """The traced program (384 threads, 168 registers, 232,448 B of shared memory) fills an SM:
    128 programs (batch 4) run in one wave of the H100's 132 SMs, 256 (batch 8) in two."""
    chip = chips["h100-sxm"]
    t4, t8 = (mb.device_time_s(chip, cudnn(chip, b, 4, context=2048)) for b in (4, 8))
    assert t8 > 1.8 * t4


def test_narrow_n_gemms_are_the_h200s_not_the_h100s(chips):
    """Qwen3's gate+up (2048 -> 1536) at 1-8 rows: the H200's cuBLAS spreads N over 96 blocks
    (calibration/data/h200_gemm_kernels.jsonl), the H100's runs its base 64-column tiles, 24 blocks,
    as its profiled steps show (validation/data/harness_traces_h100)."""
    for m in (1, 4, 8):
        assert ops.gemm_tiling(m, 2048, 1536, chips["h200-sxm"].sizes).base == 96
        assert ops.gemm_tiling(m, 2048, 1536, chips["h100-sxm"].sizes).base == 24
    assert ops.gemm_tiling(16, 2048, 1536, chips["h200-sxm"].sizes).base == 24


def test_h100_traces_run_the_base_tile_for_the_gate_up_gemm(chips):
    """The H100 profile's 0 is what its own traces show: the smallest profiled step (b1, 1k
    context) runs no narrow-N kernel (the H200's ..._16x64_..._TNN), and its gate+up GEMMs are
    the nvjet 64x8 kernel on a 4 x 6 grid, 24 blocks, as hwsim now tiles them."""
    with tarfile.open(ROOT / "validation/data/harness_traces_h100/traces.tar.xz") as tar:
        trace = json.load(tar.extractfile("harness-qwen3-30b-a3b-eager-b1-l1024.json"))
    gemms = [(e["name"], tuple(e["args"]["grid"])) for e in trace["traceEvents"]
             if e.get("cat") == "kernel" and e["name"].startswith("nvjet")]
    assert not [n for n, _ in gemms if "x64_64x16" in n and n.endswith("TNN")]
    assert sum(1 for n, g in gemms if "_64x8_64x16_4x1_" in n and g == (4, 6, 1)) == 8 * 48
    assert chips["h100-sxm"].gemm_narrow_n_blocks == 0
    assert ops.gemm_tiling(1, 2048, 1536, chips["h100-sxm"].sizes).base == 4 * 6
