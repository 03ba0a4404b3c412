"""Expert placement across GPUs (hwsim/parallel/placement.py) and the imbalance it yields."""

import numpy as np
import pytest

from hwsim.parallel import placement as pl


@pytest.mark.parametrize("policy", [pl.contiguous, pl.round_robin])
def test_a_balanced_placement_under_uniform_routing_reports_imbalance_1(policy):
    load = np.full(64, 1 / 64)
    assert pl.imbalance(policy(64, 8), load, 8) == pytest.approx(1.0)


def zipf_load(experts: int, exponent: float, rng: np.random.Generator | None = None) -> np.ndarray:
    """Expected load per expert under Zipf routing (rank r gets r^-s), the ranks shuffled over
    the expert ids when an rng is given (hot experts are not the first ids in a real model)."""
    p = 1.0 / np.arange(1, experts + 1) ** exponent
    if rng is not None:
        p = rng.permutation(p)
    return p / p.sum()


def test_every_expert_is_placed_once_with_all_its_tokens():
    load = zipf_load(64, 1.0, np.random.default_rng(0))
    for placement in (pl.contiguous(64, 8), pl.round_robin(64, 8), pl.redundant(load, 8, 10)):
        shares = np.zeros(64)
        for e, _, s in placement:
            shares[e] += s
        assert shares == pytest.approx(np.ones(64))
        assert pl.gpu_load(placement, load, 8).sum() == pytest.approx(1.0)


def test_hot_experts_make_a_hot_gpu_and_redundant_copies_cool_it():
    load = zipf_load(64, 1.2)             # unshuffled: the hot experts are 0, 1, 2...
    contiguous = pl.imbalance(pl.contiguous(64, 8), load, 8)
    assert contiguous > 2.5                  # GPU 0 holds experts 0-7, most of the tokens
    round_robin = pl.imbalance(pl.round_robin(64, 8), load, 8)
    assert 1.0 < round_robin < contiguous
    placed = pl.redundant(load, 8, 10)       # 16 spare slots for copies of the hottest
    assert sum(g == g for _, g, _ in placed) == 80
    assert max(sum(1 for _, g2, _ in placed if g2 == g) for g in range(8)) <= 10
    assert pl.imbalance(placed, load, 8) < min(round_robin, 1.15)


def test_redundant_without_spare_slots_still_packs_greedily():
    load = np.array([8.0, 1, 1, 1, 1, 1, 1, 1])
    placed = pl.redundant(load, 4, 2)
    per_gpu = pl.gpu_load(placed, load, 4)
    assert per_gpu.max() == 9.0              # the 8 cannot be split; it shares with one 1
    with pytest.raises(ValueError):
        pl.redundant(load, 2, 3)
