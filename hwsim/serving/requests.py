"""Token requests: when they arrive and how long their prompts and replies are.

Every draw comes from its own seeded stream (arrivals, prompt lengths, output lengths), so
changing one distribution never reshuffles the others.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hwsim.config.scenario import TraceArrivals
from hwsim.serving.traces import read_trace


@dataclass
class Request:
    rid: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    admitted_s: float | None = None
    # its reply's tokens, kept as the summary reads them (issue 33: a list of every token's time,
    # 8 bytes a token, was 0.4 GB of a 100,000-request trace's peak)
    tokens: int = 0                         # reply tokens out so far
    first_token_s: float | None = None
    last_token_s: float | None = None
    gaps: array | None = None               # between its tokens (s), until it finishes (then a GapLog's)
    itl_max_s: float = 0.0                  # its largest and mean gap, set when it finishes
    itl_mean_s: float = 0.0
    gaps_at: int = -1                       # where its gaps start in the run's GapLog (finished)
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

    def token(self, t: float) -> None:
        """Its next token is out at `t` (the serving loop's decodes inline the same)."""
        if self.tokens:
            self.gaps.append(t - self.last_token_s)
        else:
            self.first_token_s = t
            self.gaps = array("d")
        self.last_token_s = t
        self.tokens += 1

    @property
    def done(self) -> bool:
        return self.tokens >= self.output_tokens

    @property
    def prefill_target(self) -> int:
        """Tokens its prefill computes: the prompt, and after a preemption its reply so far."""
        return self.prompt_tokens + self.recomputed

    @property
    def context(self) -> int:
        return self.prompt_tokens + self.tokens


class GapLog:
    """The inter-token gaps (s) of a run's finished requests, in one array in the order they
    finished (each request's in its tokens' order): 8 bytes a gap, grown in place. A request's
    own gaps move here when it finishes, with its largest and mean gap kept on it.

    The summary reads them once: `ms()` turns them into milliseconds in place and the
    percentiles then partition them in place (issue 33: copies of 50 million gaps were 0.8 GB)."""

    def __init__(self):
        self._buf = array("d")
        self._ms: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self._buf)

    def add(self, req: Request) -> None:
        """`req` has finished: its gaps join the log."""
        req.gaps_at = len(self._buf)
        if req.gaps:
            own = np.frombuffer(req.gaps, dtype=float)
            req.itl_max_s, req.itl_mean_s = float(own.max()), float(own.mean())
            self._buf.extend(req.gaps)
        req.gaps = None

    def seconds(self) -> np.ndarray:
        """Every gap in seconds, in finishing order: a view, no copy (until `ms()`)."""
        if self._ms is not None:
            raise RuntimeError("the gaps were turned into milliseconds (GapLog.ms) and reordered")
        return np.frombuffer(self._buf, dtype=float) if self._buf else np.empty(0)

    def of(self, req: Request) -> np.ndarray:
        """A finished request's gaps (s), in its tokens' order: a view."""
        return self.seconds()[req.gaps_at:req.gaps_at + max(req.tokens - 1, 0)]

    def ms(self) -> np.ndarray:
        """Every gap in milliseconds, in the log's own memory; after the first call the log
        holds only these (their order is whatever the percentiles' partitions left)."""
        if self._ms is None:
            ms = self.seconds()
            ms *= 1e3                      # the same products as `gaps * 1e3`, in place
            self._ms = ms
        return self._ms


def open_loop_requests(workload, streams) -> list[Request]:
    """All requests of an open-loop arrival process (poisson, gamma or a trace)."""
    a = workload.arrivals
    if isinstance(a, TraceArrivals):
        rows = read_trace(Path(a.trace), start=a.start, duration=a.duration, rate_scale=a.rate_scale,
                          limit=a.requests)
        return [Request(i, r.arrival_s, r.prompt_tokens, r.output_tokens, hash_ids=r.hash_ids)
                for i, r in enumerate(rows)]
    n = a.requests
    times = np.cumsum(a.gaps(streams.get("arrivals"), n))
    prompts = workload.prompt.draw(streams.get("prompt_lengths"), n)
    outputs = workload.output.draw(streams.get("output_lengths"), n)
    return [Request(i, float(times[i]), int(prompts[i]), int(outputs[i])) for i in range(n)]
