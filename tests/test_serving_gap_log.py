"""The serving run keeps each request's tokens as the summary reads them (first and last time,
a count, the gaps in one GapLog array) instead of a list of every token's time (issue 33): its
figures must be exactly those of the token times, computed the straightforward way."""

from pathlib import Path

import numpy as np
import pytest

import hwsim.serving.requests as requests_mod
from hwsim.pipeline import system
from hwsim.config.load import load_scenario
from hwsim.metrics import percentiles, percentiles_in_place
from hwsim.serving.disaggregation import serving_loop
from hwsim.serving.metrics import QUANTILES, request_rows, serving_summary, within
from hwsim.serving.requests import Request

TINY = str(Path(__file__).parent / "data" / "tiny-moe.yaml")
CROWDED = [f"model={TINY}", "hardware=small-hbm", "workload.prompt.tokens=4096", "workload.output.tokens=256",
           "workload.arrivals.kind=poisson", "workload.arrivals.rate_per_s=1000", "workload.arrivals.requests=8",
           "workload.kv_allocation=as_needed"]
# the whole output block: a uniform one takes none of the scenario's lognormal keys
SHORT = [f"model={TINY}", "workload.arrivals.requests=30", "workload.output={kind: uniform, low: 1, high: 12}"]


class Recorded(Request):
    """A request that also lists every token's time, as the loop sets its last one."""

    @property
    def last_token_s(self):
        return self.__dict__.get("times", [None])[-1]

    @last_token_s.setter
    def last_token_s(self, t):
        if t is not None:
            self.__dict__.setdefault("times", []).append(t)


@pytest.mark.parametrize("scenario, sets", [
    (None, CROWDED),                                          # preempted: recomputed
    (None, CROWDED + ["workload.preemption=swap"]),           # preempted: swapped
    ("scenarios/serving-poisson.yaml", SHORT),                # one-token replies among them
    ("scenarios/serving-disaggregated.yaml", SHORT),          # the first token on another GPU
])
def test_the_summary_and_rows_are_those_of_every_token_time(small_hbm, monkeypatch, scenario, sets):
    monkeypatch.setattr(requests_mod, "Request", Recorded)
    loop = serving_loop(system(load_scenario(scenario, sets)))
    loop.run()
    reqs = loop.finished
    assert len(reqs) == (30 if scenario else 8)
    assert all(isinstance(r, Recorded) and r.tokens == len(r.times) == r.output_tokens for r in reqs)
    if scenario is None:
        assert loop.preemptions > 0
    else:
        assert any(r.output_tokens == 1 for r in reqs)
    diffs = [np.diff(r.times) for r in reqs]                  # in finishing order, as the summary took them
    for r, d in zip(reqs, diffs):
        assert r.first_token_s == r.times[0]
        assert np.array_equal(loop.gaps.of(r), d)
    ref = np.concatenate(diffs)
    assert np.array_equal(loop.gaps.seconds(), ref)

    rows = {row["request"]: row for row in request_rows(loop)}
    for r, d in zip(reqs, diffs):
        row = rows[r.rid]
        assert row["ttft_ms"] == (r.times[0] - r.arrival_s) * 1e3
        assert row["e2e_ms"] == (r.times[-1] - r.arrival_s) * 1e3 and row["finish_s"] == r.times[-1]
        assert row["itl_max_ms"] == (float(d.max() * 1e3) if len(d) else 0.0)
        assert row["itl_mean_ms"] == (float(d.mean() * 1e3) if len(d) else 0.0)

    budget_ms = float(np.median(ref)) * 1e3                  # half the gaps within it
    s = serving_summary(loop, budget_ms)
    assert s.itl_ms == percentiles(ref, QUANTILES)         # exactly: same values, same order
    assert s.serving.slo_attainment == float(np.mean(ref <= budget_ms * 1e-3))
    assert 0 < s.serving.slo_attainment < 1
    assert s.ttft_ms == percentiles([r.times[0] - r.arrival_s for r in reqs], QUANTILES)
    assert s.serving.e2e_ms == percentiles([r.times[-1] - r.arrival_s for r in reqs], QUANTILES)
    assert np.array_equal(np.sort(loop.gaps.ms()), np.sort(ref * 1e3))
    with pytest.raises(RuntimeError):                         # the gaps were read in place
        serving_summary(loop, budget_ms)


@pytest.mark.parametrize("n", [1, 2, 7, 8, 9, 1000, 100_001])
def test_percentiles_in_place_equal_percentiles(n):
    rng = np.random.default_rng(n)
    gaps_s = np.round(rng.exponential(0.03, n), 5)            # repeated values too
    ms = gaps_s * 1e3
    assert percentiles_in_place(ms, QUANTILES) == percentiles(gaps_s, QUANTILES)
    assert percentiles_in_place(np.empty(0), QUANTILES) is None


def test_within_counts_as_the_mean_of_the_comparison():
    gaps = np.round(np.random.default_rng(3).exponential(0.03, 10_007), 4)
    for limit in (0.0, 0.01, 0.03, float(gaps[5]), 1.0):
        assert within(gaps, limit, chunk=1000) == float(np.mean(gaps <= limit))
    assert within(np.empty(0), 0.03) is None
