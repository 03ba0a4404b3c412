"""paged|sdpa attention as transformers 5.17 continuous batching runs it, on the step clock: the
packed batch's shape (the library's padding rules) and its kernels' stream, simulated on the
scenario's built system and cached by shape.

The kernels are the engine's per layer (hwsim/model/paged_sdpa.py: the K/V writes and gathers,
repeat_kv's copies, the SDPA over q x k with its bias); they run through the same SMs, L2 and HBM
channels as every other kernel, in place of the pass's own per-sequence attention. The step clock
times a step as the rest of its pass (its (decodes, context, prompt tokens) grid) and this stream:
the two depend on different sizes of the batch. The attention's flops and bias are q x k, which
the rest's grid cannot interpolate (a prompt's q^2 between grid points 4x apart was 36-51% high),
so this stream has a grid of its own on (q, k) (GRID), where the work is bilinear: the clock
interpolates between the four streams around the step's shape (StepClock.attention_corners),
each simulated once. With CUDA
graphs the library pads q and the KV read (a handful of shapes a run): each padded shape exactly.
"""

from __future__ import annotations

import math

from hwsim.model.ops import MMA_M
from hwsim.model.paged_sdpa import PackedShape, stack_kernels
from hwsim.model.schedule import StepShape

GRID = {"q": (MMA_M, 2), "k": (256, 2)}     # (first point, ratio): q from the MMA's rows


def pad_to_interval(size: int, interval: int, cap: int) -> int:
    """transformers 5.17 continuous_batching/utils.pad_to_interval: an empty size pads to one interval."""
    if interval <= 0:
        return cap
    return min(math.ceil(size / interval) * interval if size > 0 else interval, cap)


def packed_shape(batch, share: float, padding: tuple | None = None, lone: float = 0.0) -> PackedShape:
    """The SDPA's q x k for `batch` [(query, cached)] (ContinuousBatchingIOs.get_model_kwargs:
    kv_size = max_kv_read + num_q_tokens); `padding` (q interval, kv interval, max batch tokens,
    pages) when the engine pads (CUDA graphs: ModelRunner.maybe_pad_inputs); `lone` > 0: the SDPA
    is PyTorch's memory-efficient kernel (PackedShape.lone)."""
    q = sum(n for n, _ in batch)
    cached = sum(c for _, c in batch)
    if padding is None:
        return PackedShape(q, q + cached, cached > 0, share, lone)
    q_int, kv_int, max_tokens, pages = padding
    q_pad = pad_to_interval(q, q_int, max_tokens)
    return PackedShape(q_pad, q_pad + pad_to_interval(cached, kv_int, pages), True, share, lone)


class PackedStreams:
    """The engine's attention kernels of every layer as one stream on `built` (one GPU), per
    packed shape: simulated once, from an empty L2, and kept for the run."""

    def __init__(self, built):
        self.built = built
        self.cache: dict[PackedShape, object] = {}

    @property
    def simulated(self) -> int:
        return len(self.cache)

    def stream(self, p: PackedShape):
        """The simulated stream (hwsim.step.StepResult) of shape `p`."""
        hit = self.cache.get(p)
        if hit is None:
            from hwsim.step import PassPlan
            b = self.built
            b.env.run()
            sched = b.schedule
            items = stack_kernels(sched, p)
            plan = PassPlan({}, sched._walked(items, sched.cold_state().l2))
            shape = StepShape("prefill", 1, p.q, 0, packed=p)
            hit = self.cache[p] = b.gpus.simulate(b, shape, -1, None, False, plan, False)
        return hit
