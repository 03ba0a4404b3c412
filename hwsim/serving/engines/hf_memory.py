"""The device memory an HF transformers engine sees free when it sizes its paged KV cache.

transformers 5.17's PagedAttentionMemoryHandler.get_available_memory reads
`total - max(allocated, reserved)` from torch.cuda.mem_get_info (allocated = total - free): the
memory CUDA reports as the device's (less than the nominal capacity: 79.19 GiB on an "80 GB"
H100), less the CUDA context and driver, less what torch's caching allocator has reserved for
the model. The engine sizes its cache before any forward runs (ContinuousBatchingManager.warmup
builds it first), so the reservation is the weights, each parameter made on the device in the
order the model's modules create them, rounded as PyTorch's CUDACachingAllocator rounds them
(c10/cuda/CUDACachingAllocator.cpp): small tensors (<= 1 MiB) share 2 MiB segments, tensors
under 10 MiB are cut from 20 MiB segments, larger ones get their own segment rounded to 2 MiB.
A Llama-3.1-8B reserves 129 MiB beyond its 15,317 MiB of weights this way (its 8 MiB k/v
projections leave 4 MiB of every 20 MiB segment unused), a Qwen3-30B-A3B 3 MiB.
"""

from __future__ import annotations

import bisect
import math

KIB, MIB = 1024, 2**20
# PyTorch's CUDACachingAllocator constants (c10/cuda/CUDACachingAllocator.cpp, unchanged 1.x-2.11)
MIN_BLOCK = 512               # kMinBlockSize: every request is rounded up to a multiple of it
SMALL_SIZE = MIB              # kSmallSize: up to it, the small pool
SMALL_BUFFER = 2 * MIB        # kSmallBuffer: a small pool segment
LARGE_BUFFER = 20 * MIB       # kLargeBuffer: a segment for requests between 1 and 10 MiB
MIN_LARGE_ALLOC = 10 * MIB    # kMinLargeAlloc: from it, a segment of its own
ROUND_LARGE = 2 * MIB         # kRoundLarge: such a segment is rounded up to it
HF_CONTEXT_BYTES = 0.5 * 2**30   # HF's requests.py comment: the CUDA context and driver take ~0.5 GiB


def parameter_bytes(model, dtype_bytes: float = 2.0) -> list[int]:
    """Bytes of each parameter a transformers decoder of `model`'s shape (hwsim's ModelShape) makes,
    in the order its modules create them: the embedding table, each layer (attention, then its MLP
    or its MoE block with the experts fused into two 3-D tensors, as transformers 5 holds them,
    then two norms), the final norm and the LM head, unless it is tied to the embedding table
    (`tied_embeddings`: transformers ties it in post_init, and the engine's
    get_device_and_memory_breakdown empties torch's cache before it reads the reservation, so the
    untied head's freed segment of its own is gone). Biases are left out (each under 1 MiB: they
    share the small pool's segments)."""
    h, moe = model.hidden, model.moe
    elements = [model.vocab * h]
    for layer in range(model.layers):
        elements += _attention(model.attention, h)
        if model.is_moe_layer(layer):
            elements += [moe.experts * 2 * moe.expert_ffn * h, moe.experts * h * moe.expert_ffn,
                         moe.experts * h]                                 # gate_up, down, router
            if moe.shared_width:
                elements += [h * moe.shared_width] * 3 + ([h] if moe.shared_expert_gate else [])
        else:
            elements += [h * model.ffn] * 3                               # gate, up, down
        elements += [h, h]                                                # input / post-attention norms
    head = [] if model.tied_embeddings else [model.vocab * h]
    return [int(n * dtype_bytes) for n in elements + [h, *head]]


def _attention(a, h: int) -> list[int]:
    """One attention block's parameter elements in creation order (GQA: q, k, v, o, QK norms;
    MLA: its low-rank projections with their norms, then o)."""
    if not a.latent:
        kv = a.kv_heads * a.head_dim
        norms = [a.head_dim] * 2 if a.qk_norm else []
        return [a.heads * a.head_dim * h, kv * h, kv * h, a.o_proj_in * h, *norms]
    out = []
    for name, k, n, _ in a.projections(h):
        out.append(k * n)
        if name in ("q_a", "kv_a"):                      # q_a_layernorm, kv_a_layernorm
            out.append(a.q_lora_rank if name == "q_a" else a.kv_lora_rank)
    return out + [a.o_proj_in * h]


def reserved_bytes(sizes: list[int]) -> int:
    """What torch's caching allocator reserves for tensors of `sizes` allocated in order and kept:
    each request takes the smallest free block that fits (best fit), or a new segment; the rest
    of a block is split off when it is at least 512 B (small pool) or more than 1 MiB (large)."""
    free = {True: [], False: []}            # pool (small?) -> sorted (size, address) of free blocks
    top = reserved = 0
    for size in sizes:
        size = MIN_BLOCK * max(1, math.ceil(size / MIN_BLOCK))
        small = size <= SMALL_SIZE
        pool = free[small]
        i = bisect.bisect_left(pool, (size, -1))
        if i < len(pool):
            block, addr = pool.pop(i)
        else:
            block = (SMALL_BUFFER if small else LARGE_BUFFER if size < MIN_LARGE_ALLOC
                     else ROUND_LARGE * math.ceil(size / ROUND_LARGE))
            addr, top, reserved = top, top + block, reserved + block
        rest = block - size
        if rest >= MIN_BLOCK if small else rest > SMALL_SIZE:
            bisect.insort(pool, (rest, addr + size))
    return reserved


def free_bytes(chip, model, held_bytes: float = 0.0) -> float:
    """The memory the engine sees free when it sizes the cache: CUDA's total for the chip, less
    the context, less the weights' reservation, less `held_bytes` (what else the process holds:
    an earlier engine's leftovers). Without the chip's `cuda` block: its nominal capacity and
    HF's 0.5 GiB context."""
    total = chip.cuda_total_bytes or chip.hbm_capacity_bytes
    context = chip.cuda_context_bytes if chip.cuda_context_bytes is not None else HF_CONTEXT_BYTES
    return total - context - reserved_bytes(parameter_bytes(model, model.weight_bytes)) - held_bytes
