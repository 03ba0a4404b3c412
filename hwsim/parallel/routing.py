"""What a MoE layer's routing asks of the links: the bytes each GPU sends to each other, for
the two dispatch styles, from the expected routing of tokens to experts placed on GPUs.

Uniform routing (every expert equally likely, as the published DeepEP benchmarks draw it) has
closed-form expectations; a traced or Zipf routing can pass its own per-expert probabilities.
"""

from __future__ import annotations

import numpy as np


def expert_probabilities(experts: int, weights: np.ndarray | None = None) -> np.ndarray:
    p = np.ones(experts) if weights is None else np.asarray(weights, dtype=float)
    return p / p.sum()


def gpu_of_expert(experts: int, gpus: int) -> np.ndarray:
    """Contiguous placement: expert e on GPU e // (experts / gpus)."""
    return np.arange(experts) * gpus // experts


def per_expert_matrix(tokens_per_gpu: float, topk: int, bytes_per_token: float, gpus: int,
                      placement: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Low-latency style: one message per (token, expert). [i][j]: expected bytes GPU i sends to
    GPU j (the diagonal stays on the GPU)."""
    to_gpu = np.bincount(placement, weights=probs, minlength=gpus)     # share of choices per GPU
    row = tokens_per_gpu * topk * bytes_per_token * to_gpu
    return np.tile(row, (gpus, 1))


def per_destination_matrix(tokens_per_gpu: float, bytes_per_token: float, gpus: int,
                           destinations_per_token: float) -> np.ndarray:
    """Normal style: a token once per destination (GPU or node), destinations drawn evenly
    over the `gpus` columns (uniform routing). [i][j]: expected bytes i sends to j."""
    return np.full((gpus, gpus), tokens_per_gpu * bytes_per_token * destinations_per_token / gpus)


def group_limited_topk(scores: np.ndarray, groups: int, topk_groups: int, topk: int) -> np.ndarray:
    """DeepSeek-V3's group-limited gating (node-limited routing), as DeepEP's tests draw it:
    each token keeps the `topk_groups` groups of experts with the highest best score, then its
    top-k experts among theirs. scores: [tokens, experts]; returns [tokens, topk] expert ids."""
    tokens, experts = scores.shape
    if topk_groups < groups:
        best = scores.reshape(tokens, groups, -1).max(axis=2)
        keep = np.argpartition(-best, topk_groups - 1, axis=1)[:, :topk_groups]
        masked = np.zeros((tokens, groups), dtype=bool)
        np.put_along_axis(masked, keep, True, axis=1)
        scores = np.where(np.repeat(masked, experts // groups, axis=1), scores, -np.inf)
    return np.argpartition(-scores, topk - 1, axis=1)[:, :topk]


def distinct_per_token(topk_idx: np.ndarray, experts: int, holders: int) -> float:
    """Mean number of distinct holders (GPUs or nodes, each holding experts/holders contiguous
    experts) that a token's experts fall on: the copies a normal dispatch sends of it."""
    owner = np.sort(topk_idx // (experts // holders), axis=1)
    return float(1 + (np.diff(owner, axis=1) != 0).sum(axis=1).mean())
