"""A serving run whose scheduler is a real engine's (workload.engine.kind): the engine is
checked (installed, pinned version, its config's field names), given hwsim's step clock and the
run's requests, and its per-request token times become the run's serving summary."""

from __future__ import annotations

import time

from hwsim.errors import ConfigError

HF = "hf-transformers"
DEFAULT_HOST = {HF: "hf-transformers-h200"}


def problems(cfg):
    """(key, message) of an engine the scenario names that cannot run here (hwsim/checks.py)."""
    e = cfg.workload.engine
    if e.kind == "hwsim":
        return
    if e.kind == "sglang":
        yield "workload.engine.kind", ("engine sglang is not available in this hwsim yet "
                                       "(hf-transformers and hwsim are; docs/serving.md)")
        return
    if cfg.workload.arrivals.kind == "closed":
        yield "workload.arrivals.kind", "a real engine replays open-loop arrivals (poisson, gamma, trace), not closed"
        return
    if cfg.parallel.gpus > 1:
        yield "parallel.gpus", "a real engine is simulated on one GPU"
        return
    from hwsim.serving.engines import hf
    try:
        hf.check_version()
        hf.cb_config(dict(e.config))
    except hf.EngineError as exc:
        key = "workload.engine.config" if "has no field" in str(exc) else "workload.engine.kind"
        yield key, str(exc)
    except (TypeError, ValueError) as exc:
        yield "workload.engine.config", f"ContinuousBatchingConfig refused it: {exc}"


def engine_host(cfg, b):
    """The engine's host: from its host_trace, a named profile, or the engine's default profile."""
    from hwsim.serving.engine_host import EngineHost, load_engine_host
    e = cfg.workload.engine
    if e.host_trace:
        from hwsim.serving.engine_host_trace import profile_from_trace
        profile = profile_from_trace(e.host_trace, load_engine_host(e.host or DEFAULT_HOST[e.kind]), b.model.layers)
        return EngineHost(profile, b.model.layers), f"host_trace {e.host_trace}"
    name = e.host or DEFAULT_HOST[e.kind]
    return EngineHost(load_engine_host(name), b.model.layers), name


def available_bytes(b) -> float:
    """What torch.cuda.mem_get_info leaves free to the engine once the weights are loaded."""
    from hwsim.serving.engines.hf import CUDA_CONTEXT_BYTES
    return b.chip.hbm_capacity_bytes - b.schedule.weight_bytes_total() - CUDA_CONTEXT_BYTES


def run_engine(cfg, b, wall0: float, progress=None):
    """The scenario served by its engine: a RunResult as hwsim/run.py's serving run makes one."""
    from hwsim.engine.records import RecordLog
    from hwsim.rng import RandomStreams
    from hwsim.run import RunResult, summarize
    from hwsim.serving.engines import hf, results
    from hwsim.serving.requests import open_loop_requests
    from hwsim.serving.step_clock import StepClock

    e, w = cfg.workload.engine, cfg.workload
    host, host_name = engine_host(cfg, b)
    clock = StepClock(b, host=host)
    try:
        engine = hf.HfEngine(b.model, clock, dict(e.config), available_bytes(b))
    except hf.EngineError as exc:
        raise ConfigError(str(exc), key="workload.engine") from exc
    requests = open_loop_requests(w, RandomStreams(cfg.seed))
    run = engine.serve(requests)
    resolved = {"block_size": engine.processor.cache.block_size, "num_blocks": run.num_blocks,
                "max_batch_tokens": run.max_batch_tokens,
                "max_requests_per_batch": engine.manager.continuous_batching_config.max_requests_per_batch,
                "scheduler_type": engine.manager.continuous_batching_config.scheduler_type, **dict(e.config)}
    summary_part = results.engine_summary(e.kind, hf.transformers_version(), resolved, run, clock, host_name)
    served, gaps_ms = results.served(run, w, cfg.budget_ms, summary_part)
    steps = [st.step for _, st, _ in run.steps]
    summary = summarize(cfg, b, steps, None, time.perf_counter() - wall0)
    summary = summary.replace(batch_size=None, context_tokens=None, itl_ms=served.itl_ms, ttft_ms=served.ttft_ms,
                              within_budget=served.serving.slo_attainment, serving=served.serving,
                              simulated_tokens=sum(len(t) for t in run.token_times.values()),
                              wall_s=time.perf_counter() - wall0)
    result = RunResult(scenario=cfg, steps=[], records=RecordLog(), run_summary=summary,
                       channel_bytes=b.device.channel_bytes.tolist(), channels_per_stack=b.chip.hbm_channels_per_stack,
                       requests=results.request_rows(run), iterations=results.engine_steps(run))
    result.gaps_ms = gaps_ms
    return result
