"""Hugging Face transformers 5.17's paged|sdpa attention as the kernels it launches per decoder
layer: one dense SDPA over the whole packed batch, not one attention per sequence.

Continuous batching packs every sequence of a step into one row of `q` query tokens that reads
`k` keys (input_outputs.ContinuousBatchingIOs.get_model_kwargs: kv_size = max_kv_read +
num_q_tokens), and integrations/sdpa_paged.sdpa_attention_paged_forward runs, per layer:
- cache.PagedAttentionCache.update: `index_copy_` of the step's K and V into the paged cache
  (q rows each), then, unless the step reads no cache (first-chunk prefills only), `index_select`
  of K and V over the read index (k rows each): a gather of the cache into a new tensor;
- repeat_kv: K and V expanded to the query heads and reshaped, a strided copy each (with one
  query head a KV head, the `.contiguous()` before SDPA copies the transposed view the same way);
- `query.contiguous()`: the query, a transposed view after the rotary embedding, copied;
- SDPA over q x k with the q x k bias (utils.build_attention_mask's block-diagonal mask),
  `is_causal=False`: every query meets every key of the step, 4 q k head_dim flops a head;
- `attn_output.transpose(1, 2).contiguous()`: the output copied back to token-major.
With CUDA graphs the library pads q and the KV read first (hwsim/serving/packed_attention.py).

The SDPA backend's MMAs sustain `PackedShape.share` of the chip's tensor peak: the engine host
profile's packed_sdpa_efficiency (cuDNN, eager) or packed_sdpa_efficiency_graphs (PyTorch's
memory-efficient kernel), each sourced there. cuDNN's spreads its work over the SMs (sdpa); the
memory-efficient kernel runs its own grid, a block per (64 query rows, head), each over all the
keys (mem_efficient_sdpa). A tensor larger than half the L2 streams from (to) HBM, as
hwsim/ktrace/lower.py rules for a traced kernel's; a smaller one stays in L2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hwsim.metrics import Component
from hwsim.model import ir, ops
from hwsim.model.kernel import Kernel, relocated
from hwsim.model.ops import INDEX_TRIPS, in_hbm


@dataclass(frozen=True, slots=True)
class PackedShape:
    """The packed batch's attention: `q` query rows, `k` key columns (cached reads and the step's
    own tokens), whether the keys are gathered from the paged cache, the SDPA backend's share
    of the tensor peak, and `lone`: 0 for cuDNN's SDPA, else PyTorch's memory-efficient kernel,
    a block of which alone on its SM takes `lone` times its MMAs' time (the engine host profile's
    packed_sdpa_lone_graphs). q = 0: none in this pass (the step clock runs it in its own stream)."""
    q: int
    k: int
    gathers: bool
    share: float = 0.0
    lone: float = 0.0


APART = PackedShape(0, 0, False)


def layer_kernels(sched, layer: int, p: PackedShape) -> list[Kernel]:
    """The engine's attention kernels of `layer` for the packed shape `p` (between the QKV
    projection and o_proj), for `sched` (a Schedule: the model, the chip's sizes, the cache)."""
    if not p.q:
        return []
    a, chip, ab = sched.model.attention, sched.chip, ops.ACT_BYTES
    heads, kv_heads, hd = a.heads, a.kv_heads or a.heads, a.head_dim
    cache = sched._kv_addr(layer)
    kv_elems, rep_elems = p.k * kv_heads * hd, p.k * heads * hd
    ks = [ops.kv_append(f"L{layer}.{w}_write", layer, p.q, kv_heads * hd, ab, cache, chip) for w in "kv"]
    if p.gathers:
        ks += [_memory(sched, f"L{layer}.{w}_gather", layer, kv_elems * ab, kv_elems * ab, cache=True,
                       trips=INDEX_TRIPS, data=Component.KV_READ) for w in "kv"]
    # repeat_kv's copy reads an expanded (stride-0) view: PyTorch's strided element-wise kernel
    # (elementwise_kernel<128, 4> direct_copy in the profiled Qwen3 graphs replay, 144 a replay
    # with the query's copy: validation/data/hf_serving/h100_call_s21). Under CUDA graphs it is
    # costed at that kernel's rate (16.4 ms measured, 15.8 simulated); eager keeps the HBM rate
    # its cuDNN share (packed_sdpa_efficiency) was fitted with
    strided = p.lone > 0
    ks += [_memory(sched, f"L{layer}.{w}_repeat", layer, kv_elems * ab, rep_elems * ab, vectorized=not strided)
           for w in "kv"]
    q_bytes = p.q * heads * hd * ab
    ks.append(_memory(sched, f"L{layer}.q_copy", layer, q_bytes, q_bytes, vectorized=False))
    ks.append((mem_efficient_sdpa if p.lone else sdpa)(f"L{layer}.sdpa", layer, p, heads, hd, chip))
    ks.append(_memory(sched, f"L{layer}.attn_out_copy", layer, q_bytes, q_bytes, vectorized=False))
    return ks


def stack_kernels(sched, p: PackedShape) -> list[Kernel]:
    """layer_kernels of every layer, in layer order: the first layer's built, each other's its
    relocated copies (renamed, and at that layer's KV cache where they touch it), which share
    their timing: the kernels of one shape differ between layers by name, layer and cache address
    only (tests/test_pass_memos.py holds them equal to each layer's own build). The step clock
    makes a stream of them for every packed shape it meets."""
    first = layer_kernels(sched, 0, p)
    cache0 = sched._kv_addr(0)
    out = list(first)
    for layer in range(1, sched.model.layers):
        cache, prefix = sched._kv_addr(layer), f"L{layer}."
        out += [relocated(k, prefix + k.name[len("L0."):], layer, cache if k.address == cache0 else k.address)
                for k in first]
    return out


def _memory(sched, name: str, layer: int, read: float, write: float, *, cache: bool = False,
            vectorized: bool = True, trips: float = 1, data: Component = Component.ACTIVATION_IO) -> Kernel:
    """A copy of `read` bytes into `write` bytes: from the KV cache (`cache`: HBM at any size) or
    an activation (HBM past half the L2), written to L2 or, past half of it, to HBM."""
    addr = sched._kv_addr(layer) if cache else sched.activation_address
    return ops.streamed_copy(name, layer, read, write, 0.0, sched.chip, from_cache=cache, addr=addr,
                             component=data, vectorized=vectorized, trips=trips)


def sdpa(name: str, layer: int, p: PackedShape, heads: int, head_dim: int, chip) -> Kernel:
    """SDPA over the packed q x k with a bias, not causal: a tile per (block of ATTN_BLOCK_M query
    rows, head), each streaming its head's K and V and its rows of the bias; rows padded to the
    MMA's. Its work is spread over every SM (`balanced`), as its share of the tensor peak was
    profiled: the whole batch's SDPA time against the whole chip's peak (cuDNN splits the keys of
    a small grid over the SMs: its lean_reduction_kernel, calibration/data/h200_attention_backends.jsonl).
    What the tiles read first comes from HBM where it is larger than half the L2 (K and V at the
    query heads, as repeat_kv wrote them; the bias), the tiles' re-reads from L2. A tile loads a
    block of ATTN_BLOCK_N keys' K and V while it computes on the last (cp.async into shared
    memory, as FlashAttention's and cutlass's kernels): those bytes are in flight."""
    ab = ops.ACT_BYTES
    q_blocks = math.ceil(p.q / ops.ATTN_BLOCK_M)
    tiles = q_blocks * heads
    rows = math.ceil(p.q / ops.MMA_M) * ops.MMA_M / q_blocks            # a tile's mean rows, padded
    kv, bias = heads * p.k * 2 * head_dim * ab, p.q * p.k * ab
    first = (kv if in_hbm(chip, kv) else 0.0) + (bias if in_hbm(chip, bias) else 0.0)
    tile_bytes = rows * head_dim * ab + p.k * 2 * head_dim * ab + rows * p.k * ab     # Q, K and V, bias
    return Kernel(
        name=name, layer=layer, tiles=tiles, balanced=True, hbm_read=first / tiles,
        l2_read=tile_bytes - first / tiles, l2_write=rows * head_dim * ab,
        tensor_flops=2.0 * rows * p.k * 2 * head_dim, tensor_share=p.share,
        vector_flops=(ops.SOFTMAX_OPS + 1) * rows * p.k,                  # the bias added, then softmax
        smem_bytes=(ops.ATTN_BLOCK_M * head_dim + 2 * ops.ATTN_BLOCK_N * 2 * head_dim) * ab // 2,
        inflight_bytes=ops.ATTN_BLOCK_N * 2 * head_dim * ab,             # its next K and V blocks
        round_trips=ops.ATTN_ROUND_TRIPS, data=Component.KV_READ, compute=Component.ATTENTION_COMPUTE,
        item=ir.Attention("packed", 1, heads, heads, head_dim, p.q, p.k, "sdpa"),
    )



# PyTorch's memory-efficient SDPA as the H100 runs it under CUDA graphs (cuDNN off):
# fmha_cutlassF_bf16_aligned_64x128_rf_sm80, i.e. aten/src/ATen/native/transformers/cuda/
# mem_eff_attention/kernel_forward.h AttentionKernel<bf16, Sm80, aligned, 64, 128, kMaxK 128>
MEM_EFF_BLOCK_M = 64          # kQueriesPerBlock: a block's query rows (grid: q blocks x heads x batch)
MEM_EFF_BLOCK_N = 128         # kKeysPerBlock: the keys of one iteration of its loop
MEM_EFF_THREADS = 256         # kNumWarpsPerBlock = 64 x 128 / (32 x 32) = 8 warps
MEM_EFF_BLOCKS_PER_SM = 2     # kMinBlocksPerSm: 16 warps an SM (bf16, sm80+) / 8 (its launch bounds)
MEM_EFF_K_STEP, MEM_EFF_STAGES = 32, 4      # MM0's cp.async pipeline: 32 of head_dim a stage, 4 stages


def mem_efficient_sdpa(name: str, layer: int, p: PackedShape, heads: int, head_dim: int, chip) -> Kernel:
    """The memory-efficient kernel over the packed q x k with its bias: a block per (64 query rows,
    head), no split of the keys, so a decode step's 64 padded rows run `heads` blocks however long
    the keys (32 of the H100's 132 SMs for Qwen3 or Llama). Each block loops over the keys 128 at
    a time: Q x K^T (Q re-read from L2 every iteration, K through MM0's cp.async stages), the bias
    block loaded to shared memory, the online softmax, P x V (V preloaded), each phase after a
    __syncthreads. Its MMAs run at `p.share` of the tensor peak (the graphs warm-up, compute-bound
    with two blocks an SM); a block alone on its SM waits on its own loads between them
    (`alu_chain` = p.lone: a block alone takes that many times its compute, a second block on
    the SM fills the gaps). K and V (at the query heads, as repeat_kv wrote them) and the bias
    come from HBM where larger than half the L2, every re-read from L2."""
    ab = ops.ACT_BYTES
    tiles = math.ceil(p.q / MEM_EFF_BLOCK_M) * heads
    rows, iters = MEM_EFF_BLOCK_M, math.ceil(p.k / MEM_EFF_BLOCK_N)
    keys = iters * MEM_EFF_BLOCK_N                                     # the last block's MMAs run whole
    kv, bias = heads * p.k * 2 * head_dim * ab, p.q * p.k * ab
    first = (kv if in_hbm(chip, kv) else 0.0) + (bias if in_hbm(chip, bias) else 0.0)
    tile_bytes = iters * rows * head_dim * ab + p.k * 2 * head_dim * ab + rows * p.k * ab   # Q each time, K, V, bias
    stage = (MEM_EFF_BLOCK_M + MEM_EFF_BLOCK_N) * MEM_EFF_K_STEP * ab
    return Kernel(
        name=name, layer=layer, tiles=tiles, hbm_read=first / tiles,
        l2_read=tile_bytes - first / tiles, l2_write=rows * head_dim * ab,
        tensor_flops=2.0 * rows * keys * 2 * head_dim, tensor_share=p.share,
        vector_flops=(ops.SOFTMAX_OPS + 1) * rows * keys,                # the bias added, then softmax
        block_threads=MEM_EFF_THREADS, smem_bytes=chip.smem_bytes_per_sm // MEM_EFF_BLOCKS_PER_SM,
        inflight_bytes=(MEM_EFF_STAGES - 1) * stage, alu_chain=p.lone,
        round_trips=ops.ATTN_ROUND_TRIPS, data=Component.KV_READ, compute=Component.ATTENTION_COMPUTE,
        item=ir.Attention("packed", 1, heads, heads, head_dim, p.q, p.k, "sdpa"),
    )
