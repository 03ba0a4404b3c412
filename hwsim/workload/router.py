"""Routing: which experts each token visits in each MoE layer."""

from __future__ import annotations

import numpy as np

from hwsim.model.shapes import Moe


def uniform_topk(rng: np.random.Generator, tokens: int, moe: Moe) -> np.ndarray:
    """[tokens, top_k] distinct expert ids per token, uniformly at random (the measured schedule)."""
    scores = rng.random((tokens, moe.experts))
    return np.argpartition(scores, moe.top_k - 1, axis=1)[:, : moe.top_k]


def tokens_per_expert(choice: np.ndarray, experts: int) -> np.ndarray:
    return np.bincount(choice.ravel(), minlength=experts)
