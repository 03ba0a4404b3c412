"""Serving metrics of one measured run, from its per-request records (no torch).

A record (one JSONL line of measure_hf_serving.py) holds, in seconds from the run's start:
`arrival_s` (the trace's), `token_s` (the engine's time stamp of every generated token, the
first one being the prefill's) and `error` (None when it finished). The definitions are those
of vLLM's and SGLang's serving benchmarks:
    TTFT  first token - arrival                      (one per request)
    ITL   gap between consecutive tokens of a request (pooled over all requests)
    TPOT  (last token - first token) / (tokens - 1)   (one per request with 2+ tokens)
    E2E   last token - arrival                        (one per request)
    throughput  generated tokens / (last token of the run - first arrival)
"""

from __future__ import annotations

import statistics


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default), None for no values."""
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def spread_ms(values_s: list[float]) -> dict:
    """p50/p90/p99/mean in ms, rounded to the microsecond."""
    out = {f"p{q}": percentile(values_s, q) for q in (50, 90, 99)}
    out["mean"] = statistics.fmean(values_s) if values_s else None
    return {k: (round(v * 1e3, 3) if v is not None else None) for k, v in out.items()}


def summarize(records: list[dict]) -> dict:
    """The run's TTFT, ITL, TPOT and E2E spreads (ms), throughput and counts."""
    done = [r for r in records if r.get("error") is None and r.get("token_s")]
    ttft = [r["token_s"][0] - r["arrival_s"] for r in done]
    e2e = [r["token_s"][-1] - r["arrival_s"] for r in done]
    itl = [b - a for r in done for a, b in zip(r["token_s"], r["token_s"][1:])]
    tpot = [(r["token_s"][-1] - r["token_s"][0]) / (len(r["token_s"]) - 1) for r in done if len(r["token_s"]) > 1]
    tokens = sum(len(r["token_s"]) for r in done)
    span = (max(r["token_s"][-1] for r in done) - min(r["arrival_s"] for r in records)) if done else 0.0
    return {"requests": len(records), "finished": len(done), "failed": len(records) - len(done),
            "generated_tokens": tokens, "ttft_ms": spread_ms(ttft), "itl_ms": spread_ms(itl),
            "tpot_ms": spread_ms(tpot), "e2e_ms": spread_ms(e2e), "span_s": round(span, 4),
            "throughput_tok_s": round(tokens / span, 2) if span > 0 else None}
