"""Per-request latency metrics and the serving summary."""

from __future__ import annotations

import numpy as np

from hwsim.metrics import percentiles, percentiles_in_place
from hwsim.serving.loop import ServingLoop
from hwsim.summary import (DecodeTier, KVTransferSummary, PrefillTier, Served, ServingSummary, SwapSummary,
                           Tiers)

QUANTILES = (50, 90, 99)      # serving summaries also report p90


def request_rows(loop: ServingLoop) -> list[dict]:
    rows = []
    for r in sorted(loop.finished, key=lambda r: r.rid):
        gapped = r.tokens > 1
        rows.append({"request": r.rid, "arrival_s": r.arrival_s, "prompt_tokens": r.prompt_tokens,
                     "output_tokens": r.output_tokens, "queue_ms": (r.admitted_s - r.arrival_s) * 1e3,
                     "ttft_ms": (r.first_token_s - r.arrival_s) * 1e3, "e2e_ms": (r.last_token_s - r.arrival_s) * 1e3,
                     "itl_max_ms": r.itl_max_s * 1e3 if gapped else 0.0,
                     "itl_mean_ms": r.itl_mean_s * 1e3 if gapped else 0.0,
                     "finish_s": r.last_token_s, "cached_prompt_tokens": r.cached_tokens,
                     "preemptions": r.preemptions})
        if loop.w.disaggregation:
            rows[-1].update(disaggregated_row(r))
    return rows


def disaggregated_row(r) -> dict:
    """A disaggregated request's GPUs, its wait for a decode GPU and its KV transfer."""
    one_token = r.handoff_s is None
    return {"prefill_gpu": r.prefill_gpu, "decode_gpu": r.decode_gpu,
            "decode_wait_ms": 0.0 if one_token else (r.decode_admitted_s - r.handoff_s) * 1e3,
            "kv_transfer_ms": r.kv_transfer_s * 1e3, "kv_transfer_bytes": r.kv_transfer_bytes}


def swap_summary(host) -> SwapSummary:
    """Swap preemption's copies to the host and back, and the time they held the iterations."""
    return SwapSummary(link=host.link.name, copies=len(host.copies),
                       bytes_out=float(sum(c.bytes for c in host.copies if c.direction == "out")),
                       bytes_in=float(sum(c.bytes for c in host.copies if c.direction == "in")),
                       ms=float(sum(c.end_s - c.start_s for c in host.copies) * 1e3))


def tiers_summary(loop, span: float) -> dict:
    """Per tier: GPUs, the share of the makespan they iterate, iterations and queueing; and
    the KV transfers between them (docs/metrics.md): the serving part's `tiers` and `kv_transfer`."""
    reqs = loop.finished
    sent = [r for r in reqs if r.handoff_s is not None]

    def tier(instances, queue_s) -> dict:
        its = [it for inst in instances for it in inst.iterations]
        return {"gpus": len(instances),
                "utilisation": sum(inst.busy_s for inst in instances) / (len(instances) * span),
                "iterations": len(its), "queue_ms": percentiles(queue_s, QUANTILES)}

    prefill = PrefillTier(**tier(loop.prefill, [r.admitted_s - r.arrival_s for r in reqs]),
                          prompt_tokens_per_iteration=float(np.mean([it.prefill_tokens for p in loop.prefill
                                                                     for it in p.iterations] or [0])))
    decode = DecodeTier(**tier(loop.decode, [r.decode_admitted_s - r.handoff_s for r in sent]),
                        batch_mean=float(np.mean([it.decodes for d in loop.decode for it in d.iterations] or [0])))
    fabric = loop.fabric
    return {"tiers": Tiers(prefill=prefill, decode=decode),
            "kv_transfer": KVTransferSummary(
                link=fabric.link, topology=fabric.topology, transfers=len(sent),
                ms=percentiles([r.kv_transfer_s for r in sent], QUANTILES),
                bytes_total=float(sum(r.kv_transfer_bytes for r in sent)),
                bytes_mean=float(np.mean([r.kv_transfer_bytes for r in sent])) if sent else 0.0)}


def within(gaps_s: np.ndarray, limit_s: float, chunk: int = 1 << 20) -> float | None:
    """The fraction of `gaps_s` at most `limit_s` (as np.mean(gaps_s <= limit_s)), a chunk at a
    time: no bool array of them all (50 MB at 100,000 requests)."""
    if not len(gaps_s):
        return None
    hits = sum(int(np.count_nonzero(gaps_s[i:i + chunk] <= limit_s)) for i in range(0, len(gaps_s), chunk))
    return hits / len(gaps_s)


def serving_summary(loop: ServingLoop, budget_ms: float) -> Served:
    """The run's serving figures. Reads the inter-token gaps once: they are left in milliseconds,
    reordered, for `loop.gaps.ms()` (a second summary of the loop raises)."""
    w = loop.w
    reqs = loop.finished
    slo = within(loop.gaps.seconds(), budget_ms * 1e-3)
    itl = percentiles_in_place(loop.gaps.ms(), QUANTILES)
    ttft = [r.first_token_s - r.arrival_s for r in reqs]
    tokens = sum(r.tokens for r in reqs)
    start = min((r.arrival_s for r in reqs), default=0.0)
    end = max((r.last_token_s for r in reqs), default=0.0)
    span = max(end - start, 1e-12)
    itl_target = (w.itl_target_ms or budget_ms) * 1e-3
    good = [r for r in reqs if r.first_token_s - r.arrival_s <= w.ttft_target_ms * 1e-3
            and (r.tokens < 2 or r.itl_max_s <= itl_target)]
    queue = [r.admitted_s - r.arrival_s for r in reqs]
    return Served(
        itl_ms=itl, ttft_ms=percentiles(ttft, QUANTILES),
        serving=ServingSummary(
            throughput_tok_s=tokens / span,
            slo_attainment=slo,
            goodput_rps=len(good) / span,
            queue_ms_p99=float(np.percentile(queue, 99) * 1e3) if queue else None,
            requests_completed=len(reqs),
            requests_rejected=len(loop.rejected),
            e2e_ms=percentiles([r.last_token_s - r.arrival_s for r in reqs], QUANTILES),
            queue_ms=percentiles(queue, QUANTILES),
            offered_rps=len(reqs) / max(max((r.arrival_s for r in reqs), default=0) - start, 1e-12),
            kv_blocked_ms=loop.kv_blocked_s * 1e3,
            iterations=len(loop.iterations),
            iteration_shapes_simulated=loop.oracle.simulated,
            prefix_hit_rate=loop.prefix_hit_rate,
            preemptions=loop.preemptions,
            makespan_s=span,
            swap=swap_summary(loop.host) if loop.host else None,
            **(tiers_summary(loop, span) if w.disaggregation else {"tiers": None, "kv_transfer": None}),
        ),
    )
