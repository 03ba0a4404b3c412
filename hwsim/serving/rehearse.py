"""A serving run's cost, found before it runs, by rehearsing its scheduling.

What a serving run costs is the distinct iteration shapes the engine simulates (each about a
decode step's wall time) plus the loop's own work per iteration; which shapes occur depends
on the arrivals, lengths and batching. So the rehearsal runs the serving loop itself on the
first requests (at most REHEARSE_REQUESTS) with a stand-in oracle: it records the shape keys
the real oracle would simulate, and times each iteration by interpolating three passes
simulated by the engine (a batch-1 decode, a full-batch decode, a full-budget prefill). It
runs on a build of its own, so the real run's random streams are untouched: made by the
pipeline's build (hwsim/pipeline.py cost hands it `build`), as every other system is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hwsim.build import Built
from hwsim.config.scenario import Scenario
from hwsim.serving.disaggregation import serving_loop
from hwsim.serving.loop import CONTEXT_BUCKET, PREFILL_BUCKET, StepOracle, shape_key

REHEARSE_REQUESTS = 2000


@dataclass
class Rehearsal:
    limit: int                   # the most requests it rehearses
    requests: int                # requests rehearsed (all of them, or the first REHEARSE_REQUESTS)
    iterations: int
    tokens: int                  # tokens generated
    shapes: list[tuple]          # distinct shape keys, in the order first seen
    new_shapes_half: int         # new shapes its second half of requests found (they keep appearing)


class _Timed:
    def __init__(self, duration_s: float):
        self.duration_s = duration_s


class StandInOracle:
    """The oracle's interface and keys; durations interpolated from three simulated passes."""

    def __init__(self, built):
        w = built.scenario.workload
        real = StepOracle(built)
        self.batch = max(1, w.max_batch_size)
        self.budget = max(PREFILL_BUCKET, w.token_budget)
        self.t1 = real.simulate((1, CONTEXT_BUCKET, 0, 0)).duration_s
        self.tb = real.simulate((self.batch, CONTEXT_BUCKET, 0, 0)).duration_s if self.batch > 1 else self.t1
        prefill = (0, 0, -(-self.budget // PREFILL_BUCKET) * PREFILL_BUCKET, 1)
        self.tp = real.simulate(prefill).duration_s
        self.keys: dict[tuple, None] = {}

    def time(self, decodes: int, mean_context: float, prefill_tokens: int, prefill_sequences: int):
        key = shape_key(decodes, mean_context, prefill_tokens, prefill_sequences)
        self.keys.setdefault(key)
        d, _, pre, _ = key
        t = self.t1 + (self.tb - self.t1) * max(0, d - 1) / max(1, self.batch - 1)
        return _Timed(t + max(0.0, self.tp - self.t1) * pre / self.budget)


def rehearsal_scenario(cfg: Scenario, limit: int) -> Scenario:
    """The scenario a rehearsal runs: `cfg` cut to its first `limit` requests."""
    a = cfg.workload.arrivals
    arrivals = a.model_copy(update={"requests": min(a.requests, limit)})
    return cfg.model_copy(update={"workload": cfg.workload.model_copy(update={"arrivals": arrivals})})


def rehearse(cfg: Scenario, build: Callable[[Scenario], Built], limit: int | None = None) -> Rehearsal:
    """The first `limit` requests of `cfg` (REHEARSE_REQUESTS) served on a system `build` makes
    (the pipeline's), every iteration timed by a StandInOracle."""
    limit = limit or REHEARSE_REQUESTS
    built = build(rehearsal_scenario(cfg, limit))
    oracle = StandInOracle(built)
    half = {}

    def progress(done: int, total: int) -> None:
        if done * 2 >= total and not half:
            half.update(done=done, shapes=len(oracle.keys))

    loop = serving_loop(built, progress=progress, oracle=oracle)
    finished = loop.run()
    done = len(finished)
    growth = len(oracle.keys) - half["shapes"] if half and done > half["done"] else 0
    return Rehearsal(limit=limit, requests=done + len(loop.rejected), iterations=len(loop.iterations),
                     tokens=sum(r.tokens for r in finished), shapes=list(oracle.keys),
                     new_shapes_half=growth)
