"""Expert placement across GPUs, and the load imbalance a routing then puts on them.

Three policies, as serving engines place experts:
- contiguous: experts 0..E/G-1 on GPU 0, the next E/G on GPU 1, ... (the default of most);
- round-robin: expert e on GPU e mod G (spreads neighbouring, often co-hot, experts);
- redundant: DeepSeek's EPLB idea: `slots_per_gpu` > E/G expert slots on every GPU, the spare
  slots filled with extra copies of the hottest experts (each copy taking an equal share of
  its expert's tokens), then the copies packed onto GPUs heaviest first, each onto the least
  loaded GPU with a free slot.

A placement is a list of (expert, GPU, share of the expert's tokens) copies. Given each
expert's expected load (tokens, or probability), it yields each GPU's load; the imbalance is
max / mean (1: perfectly balanced), the factor by which the slowest GPU's expert work exceeds
the average, which the others wait for.
"""

from __future__ import annotations

import heapq

import numpy as np

Copy = tuple[int, int, float]          # (expert, gpu, share of that expert's tokens)


def contiguous(experts: int, gpus: int) -> list[Copy]:
    return [(e, e * gpus // experts, 1.0) for e in range(experts)]


def round_robin(experts: int, gpus: int) -> list[Copy]:
    return [(e, e % gpus, 1.0) for e in range(experts)]


def redundant(load: np.ndarray, gpus: int, slots_per_gpu: int) -> list[Copy]:
    """EPLB-style: replicate the hottest experts into the spare slots, then pack greedily."""
    experts = len(load)
    if slots_per_gpu * gpus < experts:
        raise ValueError(f"{gpus} GPUs x {slots_per_gpu} slots cannot hold {experts} experts")
    copies = np.ones(experts, dtype=int)
    for _ in range(slots_per_gpu * gpus - experts):       # each spare slot to the hottest per copy
        copies[int(np.argmax(load / copies))] += 1
    pieces = sorted(((load[e] / copies[e], e) for e in range(experts) for _ in range(copies[e])), reverse=True)
    heap = [(0.0, g) for g in range(gpus)]
    free = [slots_per_gpu] * gpus
    out: list[Copy] = []
    for piece, e in pieces:
        held = []
        while True:
            gpu_load, g = heapq.heappop(heap)
            if free[g] > 0:
                break
            held.append((gpu_load, g))
        free[g] -= 1
        out.append((e, g, 1.0 / copies[e]))
        heapq.heappush(heap, (gpu_load + piece, g))
        for h in held:
            heapq.heappush(heap, h)
    return out


def gpu_load(placement: list[Copy], load: np.ndarray, gpus: int) -> np.ndarray:
    out = np.zeros(gpus)
    for e, g, share in placement:
        out[g] += load[e] * share
    return out


def imbalance(placement: list[Copy], load: np.ndarray, gpus: int) -> float:
    """max / mean GPU load (1.0: every GPU does the same expert work)."""
    per_gpu = gpu_load(placement, load, gpus)
    return float(per_gpu.max() / per_gpu.mean()) if per_gpu.mean() > 0 else 1.0
