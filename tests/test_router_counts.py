"""Per-expert counts drawn directly (issue 33: the serving path's shapes) have the statistics of
counting per-token uniform top-k draws: the mean and variance of each expert's count and of the
number of distinct experts, and the counts add up to tokens x top_k in every layer."""

import numpy as np
import pytest

from hwsim.model.shapes import Moe
from hwsim.workload.router import (assignments, experts_chosen, tokens_per_expert, uniform_topk,
                                   uniform_topk_counts)

DRAWS = 4000


def _moe(experts: int, top_k: int) -> Moe:
    return Moe(experts=experts, top_k=top_k, expert_ffn=64)


@pytest.mark.parametrize("tokens, experts, top_k", [(20, 16, 4), (3, 128, 8), (200, 8, 2)])
def test_direct_counts_have_the_statistics_of_per_token_topk(tokens, experts, top_k):
    moe = _moe(experts, top_k)
    direct = uniform_topk_counts(np.random.default_rng(1), tokens, moe, DRAWS)
    rng = np.random.default_rng(2)
    per_token = np.array([tokens_per_expert(uniform_topk(rng, tokens, moe), experts) for _ in range(DRAWS)])
    assert (direct.sum(axis=1) == tokens * top_k).all()
    p = top_k / experts                       # each token includes a given expert with this chance
    mean, var = tokens * p, tokens * p * (1 - p)
    for counts in (direct, per_token):
        # every expert's count pooled: mean within 4 standard errors, variance within 5%
        assert counts.mean() == pytest.approx(mean, abs=4 * np.sqrt(var / counts.size))
        assert counts.var() == pytest.approx(var, rel=0.05)
    # distinct experts per draw: the two samplers agree (no closed form for the variance)
    d_direct = np.count_nonzero(direct, axis=1)
    d_token = np.count_nonzero(per_token, axis=1)
    spread = np.sqrt((d_direct.var() + d_token.var()) / DRAWS)
    assert d_direct.mean() == pytest.approx(d_token.mean(), abs=4 * spread + 1e-12)
    assert d_direct.mean() == pytest.approx(experts * (1 - (1 - p) ** tokens), abs=4 * spread + 1e-12)
    if d_token.var() > 0:
        assert d_direct.var() == pytest.approx(d_token.var(), rel=0.15)


def test_a_multinomial_would_not_do():
    """The test above can fail: a multinomial of tokens x top_k over the experts (what a direct
    draw might naively be) lets a token take an expert twice, and its per-expert variance is
    off by the factor (1 - 1/E) k / (1 - k/E): 6% at 8 of 128, 33% at 4 of 16."""
    tokens, experts, top_k = 20, 16, 4
    counts = np.random.default_rng(3).multinomial(tokens * top_k, [1 / experts] * experts, size=DRAWS)
    p = top_k / experts
    assert counts.var() != pytest.approx(tokens * p * (1 - p), rel=0.05)


def test_assignments_read_back_as_the_counts():
    counts = np.array([3, 0, 1, 4])
    choice = assignments(counts, 2)
    assert choice.shape == (4, 2)
    assert (tokens_per_expert(choice, 4) == counts).all()
    assert experts_chosen(choice) == 3
