"""Seeded request traces for the HF continuous-batching serving validation (issue 43, item 5).

No torch here: the trace is made and written the same way on the device (measure_hf_serving.py)
and in the tests, and hwsim reads it back through `workload.arrivals: {kind: trace, trace: PATH}`
(hwsim/serving/traces.py). The file is Mooncake JSONL, one request a line:

    {"timestamp": <arrival, ms from the run's start>, "input_length": <prompt tokens>,
     "output_length": <reply tokens, exact: EOS is off>, "id": <request index>}

No `hash_ids`: the prompts are random token ids, so no two requests share a KV block.

Loads (each a Poisson process but `burst`; lognormal lengths given by their median, clipped):
    chat   prompt median 400 (sigma 0.6, 16..2048), reply median 150 (sigma 0.35, 32..256)
    long   prompt median 6000 (sigma 0.15, 4096..8000), reply median 100 (sigma 0.3, 32..200)
    burst  N chat requests, all at t = 0
Chat replies are clipped to 256 tokens (6% of the draws) so that a run of the eager engine (ITL
100-350 ms in the issue's measurement) ends within ~45 s of its last arrival.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Lengths:
    median: int
    sigma: float
    low: int
    high: int

    def draw(self, rng: random.Random) -> int:
        return min(self.high, max(self.low, round(rng.lognormvariate(math.log(self.median), self.sigma))))


CHAT = (Lengths(400, 0.6, 16, 2048), Lengths(150, 0.35, 32, 256))
LONG = (Lengths(6000, 0.15, 4096, 8000), Lengths(100, 0.3, 32, 200))
TINY = (Lengths(32, 0.3, 8, 64), Lengths(8, 0.3, 4, 16))     # --quick (CPU smoke test)
SHAPES = {"chat": CHAT, "long": LONG, "tiny": TINY}


@dataclass(frozen=True)
class TraceRow:
    arrival_s: float
    prompt_tokens: int
    output_tokens: int


# The measured loads, in the order that seeds them: the measuring call (measure_hf_serving.py)
# and hwsim's predictions of it (predict_hf_serving.py) draw the same traces from these.
LOADS = ["burst", "light", "near", "past", "long"]
SEED = 43


def load_seed(load: str) -> int:
    return SEED + LOADS.index(load) if load in LOADS else SEED


def make_trace(shape: str, rate_per_s: float | None, requests: int, seed: int) -> list[TraceRow]:
    """`requests` requests of `shape` lengths; Poisson arrivals at `rate_per_s`, or all at t = 0
    when `rate_per_s` is None (a burst). The same arguments give the same trace."""
    prompt, reply = SHAPES[shape]
    rng = random.Random(seed)
    t, rows = 0.0, []
    for i in range(requests):
        if rate_per_s is not None and i > 0:     # the first request opens the run at t = 0
            t += rng.expovariate(rate_per_s)
        rows.append(TraceRow(round(t, 6), prompt.draw(rng), reply.draw(rng)))
    return rows


def write_trace(rows: list[TraceRow], path: Path) -> None:
    """Mooncake JSONL, which hwsim's request-trace reader accepts (timestamps in ms)."""
    with open(path, "w") as fh:
        for i, r in enumerate(rows):
            fh.write(json.dumps({"timestamp": round(r.arrival_s * 1e3, 3), "input_length": r.prompt_tokens,
                                 "output_length": r.output_tokens, "id": i}) + "\n")


def read_trace(path: Path) -> list[TraceRow]:
    """The rows `write_trace` wrote (for re-measuring a committed trace)."""
    rows = []
    with open(path) as fh:
        for line in fh:
            if line.strip():
                o = json.loads(line)
                rows.append(TraceRow(o["timestamp"] / 1e3, o["input_length"], o["output_length"]))
    return rows
