"""A real engine's run as hwsim reports a serving run: per-request rows, the serving summary
(TTFT, ITL, E2E percentiles, throughput) and one iteration record per engine step."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hwsim.metrics import percentiles
from hwsim.serving.metrics import QUANTILES
from hwsim.summary import EngineSummary, Served, ServingSummary


@dataclass
class EngineRun:
    """What an engine adapter records of a run and this module reads: per request its arrival,
    prompt and output lengths and token times (virtual seconds), and the engine's steps."""
    arrivals: dict = field(default_factory=dict)
    prompts: dict = field(default_factory=dict)
    outputs: dict = field(default_factory=dict)
    token_times: dict = field(default_factory=dict)
    started: dict = field(default_factory=dict)        # left the engine's queue
    steps: list = field(default_factory=list)          # (start, StepTime, batch [(query, cached)])
    cuda_graph: bool = False
    async_batching: bool = False
    preemptions: int = 0                               # requests taken off and queued again


@dataclass(slots=True)
class EngineStep:
    """One engine step, as the bundle's iterations.csv and timeline read an Iteration."""
    t_start: float
    duration_s: float                # the step's wall time (device and host on the critical path)
    decodes: int
    prefill_tokens: int
    waiting: int
    breakdown_s: dict                # device components and host parts (summing to more than
    step: object                     # the wall where host and device overlap); the simulated pass
    batch: object = None             # the step's StepBatch (what the clock timed)


def engine_steps(run) -> list[EngineStep]:
    from hwsim.serving.step_clock import StepBatch
    out = []
    for t0, st, batch in run.steps:
        sb = StepBatch.of(batch)
        out.append(EngineStep(t0, st.total_s, sb.decodes, sb.prefill_tokens, 0, st.breakdown_s, st.step, sb))
    return out


def request_rows(run) -> list[dict]:
    rows = []
    for rid in sorted(run.arrivals):
        a, times = run.arrivals[rid], run.token_times[rid]
        gaps = np.diff(times)
        rows.append({"request": rid, "arrival_s": a, "prompt_tokens": run.prompts[rid],
                     "output_tokens": run.outputs[rid], "queue_ms": (run.started[rid] - a) * 1e3,
                     "ttft_ms": (times[0] - a) * 1e3, "e2e_ms": (times[-1] - a) * 1e3,
                     "itl_max_ms": float(gaps.max()) * 1e3 if len(gaps) else 0.0,
                     "itl_mean_ms": float(gaps.mean()) * 1e3 if len(gaps) else 0.0,
                     "finish_s": times[-1], "cached_prompt_tokens": 0, "preemptions": 0})
    return rows


def served(run, w, budget_ms: float, engine: EngineSummary) -> tuple[Served, np.ndarray]:
    """The serving summary of an engine run and every inter-token gap (ms)."""
    rids = sorted(run.arrivals)
    done = [r for r in rids if len(run.token_times[r]) >= run.outputs[r]]
    gaps_ms = np.concatenate([np.diff(run.token_times[r]) for r in done] or [np.zeros(0)]) * 1e3
    ttft = [run.token_times[r][0] - run.arrivals[r] for r in done]
    tokens = sum(len(run.token_times[r]) for r in done)
    start = min((run.arrivals[r] for r in done), default=0.0)
    span = max(max((run.token_times[r][-1] for r in done), default=0.0) - start, 1e-12)
    itl_target = (w.itl_target_ms or budget_ms)
    good = [r for r in done if (run.token_times[r][0] - run.arrivals[r]) * 1e3 <= w.ttft_target_ms
            and (len(run.token_times[r]) < 2 or np.diff(run.token_times[r]).max() * 1e3 <= itl_target)]
    queue = [run.started[r] - run.arrivals[r] for r in done]
    last_arrival = max((run.arrivals[r] for r in done), default=0.0)
    summary = ServingSummary(
        throughput_tok_s=tokens / span, slo_attainment=float(np.mean(gaps_ms <= budget_ms)) if len(gaps_ms) else None,
        goodput_rps=len(good) / span, queue_ms_p99=float(np.percentile(queue, 99) * 1e3) if queue else None,
        requests_completed=len(done), requests_rejected=len(rids) - len(done),
        e2e_ms=percentiles([run.token_times[r][-1] - run.arrivals[r] for r in done], QUANTILES),
        queue_ms=percentiles(queue, QUANTILES), offered_rps=len(done) / max(last_arrival - start, 1e-12),
        kv_blocked_ms=0.0, iterations=len(run.steps), iteration_shapes_simulated=engine.bucket_shapes,
        prefix_hit_rate=0.0, preemptions=run.preemptions, makespan_s=span, swap=None, tiers=None, kv_transfer=None,
        engine=engine)
    itl = percentiles(gaps_ms * 1e-3, QUANTILES)
    return Served(itl_ms=itl, ttft_ms=percentiles(ttft, QUANTILES), serving=summary), gaps_ms


def engine_summary(kind: str, version: str, config: dict, run, clock, host_name: str) -> EngineSummary:
    walls = [st.total_s for _, st, _ in run.steps]
    host_parts: dict = {}
    for _, st, _ in run.steps:
        for k, v in st.breakdown_s.items():
            if k.startswith("host_"):
                host_parts[k[5:]] = host_parts.get(k[5:], 0.0) + v * 1e3
    return EngineSummary(
        kind=kind, version=version, config=config, cuda_graph=run.cuda_graph, async_batching=run.async_batching,
        host=host_name, steps=len(walls), step_ms=percentiles(walls, QUANTILES),
        device_ms_total=sum(st.device_s for _, st, _ in run.steps) * 1e3,
        host_ms_total=sum(st.host_s for _, st, _ in run.steps) * 1e3, host_ms=host_parts,
        plans_built=clock.host.plans_built if clock.host else 0, bucket_shapes=clock.shapes_simulated)
