"""Decode attention with several query tokens per sequence (a speculative verification), as the
two bf16 libraries run it: unpacked, a program per (sequence, query head, query block).

FlashAttention-2. PyTorch's FA2 (aten/src/ATen/native/transformers/cuda/flash_attn/flash_api.cpp,
mha_fwd) folds a GQA group into the query rows only when seqlen_q == 1
(`seqlenq_ngroups_swapped`): with Q > 1 query tokens a sequence each program owns one (query
block, sequence, query head) and computes a whole M tile for that head's Q rows (64 rows in the
split-KV kernel, 128 unsplit), so the Q x group rows hwsim packs for one token are here
`group` programs of Q rows each. The split count comes from num_splits_heuristic over
batch x heads x ceil(Q / 64) programs (set_params_splitkv), which at batch 8 and 32 heads
already fills the SMs: no split, 128-row tiles, each program walking the whole context.

cuDNN. With one query a sequence cuDNN's SDPA runs its split decode kernel (sm80 wmma, 16 x 128
tiles, a lean reduction after: hwsim.model.ops.decode_attention). With Q > 1 it runs its Hopper
forward kernel instead (transformers' assisted generation on the H100, Llama-8B, Q = 5 over 517
keys, validation/data/assisted_h100/hf-llama-3.1-8b-verify-q5-b1-l512.json.gz:
cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128, grid 32 x 1 x 1
for 1 sequence x 32 query heads, 384 threads, 232,448 B of shared memory, 168 registers, no
reduction kernel): a 64-query x 128-key tile per program, the context unsplit.

Either way the group's programs read the same KV head side by side: the chunk comes from HBM
once and from the L2 for the other group - 1 programs.

cuDNN's program is a latency chain (calibration/data/h100_cudnn_verify.md, 120 cases on an H100):
its time is linear in the keys, the same for K/V expanded or GQA (an L2 hit is no faster than a
miss for it) and, at batch 8, twice batch 1's on a persistent grid of one program per SM (its
232 KB of shared memory and 168 x 384 registers hold one an SM: hwsim's occupancy gives the
second round). Each 128-key block's loads, MMAs and softmax run in sequence, and the additive
mask's block loads with them: hwsim charges each tile its blocks' cycles as Kernel.chain_ops
(the profile's cudnn_fprop block, fitted by calibration/fit_cudnn_verify.py). The "odd-Q slow
path" is the mask's: without a mask Q = 5 takes Q = 2's time; with one, an odd key count (the
cache's even length + an odd Q) leaves the mask's rows 2-byte aligned, and each block's mask
load costs ~2.9x its cost on 4-byte aligned rows. A verification through SDPA always passes a
mask: is_causal aligns the causal mask to the top left, wrong for queries at the end of the keys.
Where many programs read HBM at once (batch 8, K/V expanded) the load pipe's queueing binds
instead of the chain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hwsim.hw.chip import ChipSizes
from hwsim.metrics import Component
from hwsim.model import ir, ops
from hwsim.model.kernel import Kernel

# cuDNN's sm90 forward kernel as the trace above compiled it (its name: 64 x 128 x 128 tiles)
CUDNN_FPROP_BLOCK_M = 64
CUDNN_FPROP_BLOCK_N = 128
CUDNN_FPROP_THREADS = 384
CUDNN_FPROP_REGS = 168
CUDNN_FPROP_SMEM = 232448


@dataclass(frozen=True)
class Program:
    """One library's per-query-head program: its tile and, where traced, its footprint."""
    library: str
    block_m: int
    block_n: int
    splits: int = 1
    threads: int = 0
    regs: int = 0
    smem: int = 0


def fa2_splits(batch: int, heads: int, queries: int, context: int, chip: ChipSizes, head_dim: int) -> int:
    """num_splits_heuristic as set_params_splitkv calls it for Q query tokens a sequence."""
    programs = batch * heads * math.ceil(queries / ops.FA2_SPLIT_BLOCK_M)
    return ops._fa2_splits(programs, ops.FA2_SPLIT_WAVE_SMS * chip.sms,
                           math.ceil(context / ops.fa2_split_block_n(head_dim)))


def program(library: str, batch: int, heads: int, queries: int, context: int, chip: ChipSizes,
            head_dim: int) -> Program:
    if library == "cudnn":
        return Program("cudnn", CUDNN_FPROP_BLOCK_M, CUDNN_FPROP_BLOCK_N, 1, CUDNN_FPROP_THREADS,
                       CUDNN_FPROP_REGS, CUDNN_FPROP_SMEM)
    splits = fa2_splits(batch, heads, queries, context, chip, head_dim)
    if splits > 1:
        return Program("flash", ops.FA2_SPLIT_BLOCK_M, ops.fa2_split_block_n(head_dim), splits)
    return Program("flash", ops.FA2_BLOCK_M, ops.FA2_BLOCK_N)


def cudnn_chain_ops(chip: ChipSizes, context: int, mask: bool) -> float:
    """cuDNN's program's chain over `context` keys (ChipSizes.cudnn_fprop_chain_ops; 0: none):
    its 128-key blocks' K/V and, with a mask, the mask's rows, paired when the key count is even."""
    if not chip.cudnn_fprop_chain_ops:
        return 0.0
    kv_ops, paired_ops, unpaired_ops = chip.cudnn_fprop_chain_ops
    mask_ops = (paired_ops if context % 2 == 0 else unpaired_ops) if mask else 0.0
    return math.ceil(context / CUDNN_FPROP_BLOCK_N) * (kv_ops + mask_ops)


def multi_query_attention(name: str, layer: int, batch: int, heads: int, kv_heads: int, queries: int,
                          qk_dim: int, v_dim: int, context: int, kv_bytes_per_token_head: float,
                          cache_addr: int, chip: ChipSizes, library: str = "flash",
                          mask: bool = True) -> list[Kernel]:
    """The attention kernel (and FA2's split-KV combine) of Q > 1 queries a sequence, unpacked.
    `mask`: cuDNN's call passes an additive mask (SDPA's verification always does; False only
    for the calibration's maskless cases)."""
    group = heads // kv_heads
    p = program(library, batch, heads, queries, context, chip, qk_dim)
    m_blocks = math.ceil(queries / p.block_m)
    rows = min(queries, p.block_m)          # a block's real query rows; its MMAs run all block_m
    chunk = context / p.splits
    kv = chunk * kv_bytes_per_token_head    # the KV head's chunk one program reads
    footprint = dict(block_threads=p.threads, regs_per_thread=p.regs, smem_bytes=p.smem) if p.regs else \
        dict(smem_bytes=(p.block_n * (qk_dim + v_dim) + p.block_m * qk_dim) * ops.ACT_BYTES)
    cudnn = p.library == "cudnn"
    mask_bytes = rows * context * ops.ACT_BYTES if cudnn and mask else 0.0   # its sequence's mask rows
    main = Kernel(
        name=name, layer=layer, tiles=batch * heads * m_blocks * p.splits,
        hbm_read=kv / group,
        l2_read=kv * (group - 1) / group + rows * qk_dim * ops.ACT_BYTES + mask_bytes,
        l2_write=rows * (v_dim + 2) * ops.ACC_BYTES,
        tensor_flops=2.0 * p.block_m * chunk * (qk_dim + v_dim),
        vector_flops=ops.SOFTMAX_OPS * rows * chunk,
        address=cache_addr, data=Component.KV_READ, compute=Component.ATTENTION_COMPUTE,
        round_trips=ops.ATTN_ROUND_TRIPS, mma_sync=True,
        chain_ops=cudnn_chain_ops(chip, context, mask) if cudnn else 0.0,
        item=ir.Attention("decode", batch, heads, kv_heads, qk_dim, queries, context, library),
        **footprint,
    )
    if p.splits == 1:
        return [main]
    return [main, ops.split_combine(f"{name}.combine", layer, batch * heads * queries, p.splits, v_dim, chip,
                                    ops.COMBINE_ROUND_TRIPS + ops.COMBINE_TRIPS_PER_SPLIT * p.splits)]

