"""Token requests: when they arrive and how long their prompts and replies are.

Every draw comes from its own seeded stream (arrivals, prompt lengths, output lengths), so
changing one distribution never reshuffles the others.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hwsim.errors import ConfigError


@dataclass
class Request:
    rid: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    admitted_s: float | None = None
    token_times: list[float] = field(default_factory=list)
    prefilled: int = 0                      # prompt tokens already processed

    @property
    def done(self) -> bool:
        return len(self.token_times) >= self.output_tokens

    @property
    def context(self) -> int:
        return self.prompt_tokens + len(self.token_times)


def draw_lengths(cfg, rng: np.random.Generator, n: int) -> np.ndarray:
    if cfg.kind == "fixed":
        out = np.full(n, cfg.tokens)
    elif cfg.kind == "uniform":
        out = rng.integers(cfg.low, cfg.high + 1, size=n)
    else:
        out = np.round(cfg.tokens * np.exp(cfg.sigma * rng.standard_normal(n)))
    return np.clip(out, 1, cfg.max_tokens).astype(int)


def interarrival_gaps(cfg, rng: np.random.Generator, n: int) -> np.ndarray:
    """Gaps between open-loop arrivals: exponential (poisson) or gamma with the given CV."""
    mean = 1.0 / cfg.rate_per_s
    if cfg.kind == "poisson":
        return rng.exponential(mean, size=n)
    shape = 1.0 / cfg.cv ** 2            # gamma: CV = 1/sqrt(shape)
    return rng.gamma(shape, mean / shape, size=n)


def load_request_trace(path: Path) -> list[tuple[float, int, int]]:
    """CSV with columns arrival_s, prompt_tokens, output_tokens (one request a row)."""
    try:
        fh = open(path, newline="", encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read request trace: {exc.strerror or exc}", file=str(path),
                          key="workload.arrivals.trace") from None
    rows = []
    with fh:
        reader = csv.DictReader(fh)
        missing = {"arrival_s", "prompt_tokens", "output_tokens"} - set(reader.fieldnames or [])
        if missing:
            raise ConfigError(f"request trace lacks column(s) {sorted(missing)}", file=str(path), line=1)
        last = -np.inf
        for line, row in enumerate(reader, start=2):
            try:
                t, p, o = float(row["arrival_s"]), int(row["prompt_tokens"]), int(row["output_tokens"])
            except (TypeError, ValueError, AttributeError):
                raise ConfigError("arrival_s must be a number and token counts integers", file=str(path),
                                  line=line, key="workload.arrivals.trace") from None
            if t < last or p < 1 or o < 1:
                raise ConfigError("arrivals must be in time order with positive token counts",
                                  file=str(path), line=line)
            last = t
            rows.append((t, p, o))
    if not rows:
        raise ConfigError("request trace has no rows", file=str(path), line=1)
    return rows


def open_loop_requests(workload, streams) -> list[Request]:
    """All requests of an open-loop arrival process (poisson, gamma or a trace)."""
    a = workload.arrivals
    if a.kind == "trace":
        rows = load_request_trace(Path(a.trace))[: a.requests]
        return [Request(i, t, p, o) for i, (t, p, o) in enumerate(rows)]
    n = a.requests
    times = np.cumsum(interarrival_gaps(a, streams.get("arrivals"), n))
    prompts = draw_lengths(workload.prompt, streams.get("prompt_lengths"), n)
    outputs = draw_lengths(workload.output, streams.get("output_lengths"), n)
    return [Request(i, float(times[i]), int(prompts[i]), int(outputs[i])) for i in range(n)]
