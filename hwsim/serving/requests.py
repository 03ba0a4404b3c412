"""Token requests: when they arrive and how long their prompts and replies are.

Every draw comes from its own seeded stream (arrivals, prompt lengths, output lengths), so
changing one distribution never reshuffles the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hwsim.serving.traces import read_trace


@dataclass
class Request:
    rid: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    admitted_s: float | None = None
    token_times: list[float] = field(default_factory=list)
    prefilled: int = 0                      # prompt tokens already processed (or read from cache)
    cached_tokens: int = 0                  # prompt tokens whose KV was resident (prefix caching)
    held_bytes: float = 0.0                 # KV bytes it holds outside shared prefix blocks
    recomputed: int = 0                     # reply tokens to prefill again after a preemption
    preemptions: int = 0
    hash_ids: tuple[int, ...] = ()          # trace's KV block ids of the prompt (Mooncake)
    swapped_bytes: float = 0.0              # KV it has in host memory (swap preemption)
    private_kv: bool = False                # swapped back: its KV is all its own, no shared blocks
    # disaggregated runs (hwsim/serving/disaggregation.py)
    prefill_gpu: int | None = None
    decode_gpu: int | None = None
    handoff_s: float | None = None          # prompt done: waits for a decode GPU from here
    decode_admitted_s: float | None = None  # a decode GPU took it: its KV transfer starts
    kv_transfer_s: float = 0.0
    kv_transfer_bytes: float = 0.0

    @property
    def done(self) -> bool:
        return len(self.token_times) >= self.output_tokens

    @property
    def prefill_target(self) -> int:
        """Tokens its prefill computes: the prompt, and after a preemption its reply so far."""
        return self.prompt_tokens + self.recomputed

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


def open_loop_requests(workload, streams) -> list[Request]:
    """All requests of an open-loop arrival process (poisson, gamma or a trace)."""
    a = workload.arrivals
    if a.kind == "trace":
        rows = read_trace(Path(a.trace), start=a.start, duration=a.duration, rate_scale=a.rate_scale,
                          limit=a.requests)
        return [Request(i, r.arrival_s, r.prompt_tokens, r.output_tokens, hash_ids=r.hash_ids)
                for i, r in enumerate(rows)]
    n = a.requests
    times = np.cumsum(interarrival_gaps(a, streams.get("arrivals"), n))
    prompts = draw_lengths(workload.prompt, streams.get("prompt_lengths"), n)
    outputs = draw_lengths(workload.output, streams.get("output_lengths"), n)
    return [Request(i, float(times[i]), int(prompts[i]), int(outputs[i])) for i in range(n)]
