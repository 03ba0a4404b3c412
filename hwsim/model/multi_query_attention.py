"""FlashAttention-2 decode with several query tokens per sequence (a speculative verification).

PyTorch's FlashAttention-2 (aten/src/ATen/native/transformers/cuda/flash_attn/flash_api.cpp,
mha_fwd) folds a GQA group into the query rows only when seqlen_q == 1
(`seqlenq_ngroups_swapped`): with Q > 1 query tokens a sequence each program owns one (query
block, sequence, query head) and computes a whole M tile for that head's Q rows (64 rows in the
split-KV kernel, 128 unsplit), so the Q x group rows hwsim packs for one token are here
`group` programs of Q rows each. The split count comes from num_splits_heuristic over
batch x heads x ceil(Q / 64) programs (set_params_splitkv), which at batch 8 and 32 heads
already fills the SMs: no split, 128-row tiles, each program walking the whole context.
The group's programs read the same KV head side by side: the chunk comes from HBM once and from
the L2 for the other group - 1 programs.
"""

from __future__ import annotations

import math

from hwsim.hw.chip import ChipSizes
from hwsim.metrics import Component
from hwsim.model import ir, ops
from hwsim.model.kernel import Kernel


def fa2_splits(batch: int, heads: int, queries: int, context: int, chip: ChipSizes, head_dim: int) -> int:
    """num_splits_heuristic as set_params_splitkv calls it for Q query tokens a sequence."""
    programs = batch * heads * math.ceil(queries / ops.FA2_SPLIT_BLOCK_M)
    return ops._fa2_splits(programs, ops.FA2_SPLIT_WAVE_SMS * chip.sms,
                           math.ceil(context / ops.fa2_split_block_n(head_dim)))


def fa2_multi_query(name: str, layer: int, batch: int, heads: int, kv_heads: int, queries: int,
                    qk_dim: int, v_dim: int, context: int, kv_bytes_per_token_head: float,
                    cache_addr: int, chip: ChipSizes) -> list[Kernel]:
    """The attention kernel (and the split-KV combine) of Q > 1 queries a sequence, unpacked."""
    group = heads // kv_heads
    splits = fa2_splits(batch, heads, queries, context, chip, qk_dim)
    block_m = ops.FA2_SPLIT_BLOCK_M if splits > 1 else ops.FA2_BLOCK_M
    block_n = ops.fa2_split_block_n(qk_dim) if splits > 1 else ops.FA2_BLOCK_N
    m_blocks = math.ceil(queries / block_m)
    rows = min(queries, block_m)            # a block's real query rows; its MMAs run all block_m
    chunk = context / splits
    kv = chunk * kv_bytes_per_token_head    # the KV head's chunk one program reads
    main = Kernel(
        name=name, layer=layer, tiles=batch * heads * m_blocks * splits,
        hbm_read=kv / group,
        l2_read=kv * (group - 1) / group + rows * qk_dim * ops.ACT_BYTES,
        l2_write=rows * (v_dim + 2) * ops.ACC_BYTES,
        tensor_flops=2.0 * block_m * chunk * (qk_dim + v_dim),
        vector_flops=ops.SOFTMAX_OPS * rows * chunk,
        smem_bytes=(block_n * (qk_dim + v_dim) + block_m * qk_dim) * ops.ACT_BYTES,
        address=cache_addr, data=Component.KV_READ, compute=Component.ATTENTION_COMPUTE,
        round_trips=ops.ATTN_ROUND_TRIPS, mma_sync=True,
        item=ir.Attention("decode", batch, heads, kv_heads, qk_dim, queries, context, "flash"),
    )
    if splits == 1:
        return [main]
    partial = batch * heads * queries * splits * (v_dim + 2) * ops.ACC_BYTES
    combine = ops.elementwise(f"{name}.combine", layer, partial, batch * heads * queries * v_dim * ops.ACT_BYTES,
                              ops.SOFTMAX_OPS / ops.ACC_BYTES, chip, component=Component.ATTENTION_COMPUTE,
                              round_trips=ops.COMBINE_ROUND_TRIPS + ops.COMBINE_TRIPS_PER_SPLIT * splits)
    return [main, combine]
