"""A serving run whose scheduler is a real engine's (workload.engine.kind): the engine is given
hwsim's step clock and the run's requests, and its per-request token times become the run's
serving summary (hwsim/run.py makes the result). Checked first by hwsim/config/engine_install.py."""

from __future__ import annotations

from hwsim.errors import ConfigError
from hwsim.config.engine_install import HF, SGLANG

DEFAULT_HOST = {HF: "hf-transformers-h200", SGLANG: None}   # no SGLang host profile yet: device time only


def engine_host(cfg, b):
    """The engine's host: from its host_trace, a named profile, or the engine's default profile."""
    from hwsim.serving.engine_host import EngineHost, load_engine_host
    e = cfg.workload.engine
    if e.host_trace:
        from hwsim.serving.engine_host_trace import profile_from_trace
        profile = profile_from_trace(e.host_trace, load_engine_host(e.host or DEFAULT_HOST[e.kind]), b.model.layers)
        return EngineHost(profile, b.model.layers), f"host_trace {e.host_trace}"
    name = e.host or DEFAULT_HOST[e.kind]
    if name is None:
        return None, "none (device time only)"
    host = EngineHost(load_engine_host(name), b.model.layers)
    return host, name + _layer_scale(host, b.model)


def _layer_scale(host, model) -> str:
    """Scale the profile's kernels per layer to the served model's layer structure by the ATen ops
    the engine dispatches per layer of each (hwsim/serving/engines/hf_ops.py); what was done."""
    from hwsim.serving.engines import hf_ops
    reference = host.p.ops_per_layer_reference
    if reference is None:
        return ""
    try:
        ops = _profiled_count(host.p, model) or hf_ops.ops_per_layer(model)
    except (hf_ops.CountError, ImportError) as exc:   # a layer it cannot run; no engine installed to count
        return f" (kernels per layer as profiled: {exc})"
    host.layer_scale = ops / reference.value
    return f" (kernels per layer x{host.layer_scale:.3f}: {ops:g} ATen ops a layer against the profile's {reference.value:g})"


def _profiled_count(profile, model) -> float | None:
    """The profile's own count where `model`'s layer structure is the one it was counted on
    (ops_per_layer_model; tests/test_hf_ops.py holds the two equal): the count runs the engine on
    two tiny copies and imports the model's HF module, 2-3 s of a 1 s serving run; else None."""
    from hwsim.config.files import load_model
    from hwsim.serving.engines import hf_ops
    if profile.ops_per_layer_model is None:
        return None
    try:
        counted = load_model(profile.ops_per_layer_model)
    except ConfigError as exc:
        raise ConfigError(f"engine host profile '{profile.name}': ops_per_layer_model: {exc.message}",
                          key="workload.engine.host") from exc
    if hf_ops.architecture(model) != hf_ops.architecture(counted):
        return None
    return float(profile.ops_per_layer_reference.value)


def available_bytes(b) -> float:
    """SGLang's view of what is free once the weights are loaded: the nominal capacity less
    hwsim's resident bytes and a 0.5 GiB context (the HF engine's: hf_memory.free_bytes)."""
    from hwsim.serving.engines.hf_memory import HF_CONTEXT_BYTES
    return b.memory.kv_room - HF_CONTEXT_BYTES


def hf_free_bytes(b) -> float:
    """What torch.cuda.mem_get_info leaves free to the HF engine when it sizes its cache."""
    from hwsim.serving.engines.hf_memory import free_bytes
    return free_bytes(b.chip, b.model)


def serve_with_engine(cfg, b):
    """The scenario's requests served by its engine on b's step clock: (Served, request rows,
    engine steps, inter-token gaps in ms, tokens), what hwsim/run.py makes a serving result of."""
    from hwsim.rng import RandomStreams
    from hwsim.serving.engines import hf
    from hwsim.serving.requests import open_loop_requests
    from hwsim.serving.step_clock import StepClock

    e, w = cfg.workload.engine, cfg.workload
    host, host_name = engine_host(cfg, b)
    if e.kind == SGLANG:
        return _serve_sglang(cfg, b, StepClock(b, host=host), host_name)
    # HF's paged|sdpa runs one dense SDPA over the packed batch: its kernels, on one GPU (several
    # plan their own passes) for a model of grouped-query heads (MLA's latent cache is not paged so)
    packed = b.gpus.plans_ahead and not b.model.attention.latent
    clock = StepClock(b, host=host, packed=packed)
    free = hf_free_bytes(b)
    if free <= 0 and "num_blocks" not in e.config:
        raise ConfigError(f"{b.model.name}'s weights leave no memory on {b.chip.name} for the HF engine's "
                          f"KV cache ({free / 2**30:.1f} GiB free after the weights and the CUDA context)", key="model")
    try:
        engine = hf.HfEngine(b.model, clock, dict(e.config), free)
    except hf.EngineError as exc:
        raise ConfigError(str(exc), key="workload.engine") from exc
    run = engine.serve(open_loop_requests(w, RandomStreams(cfg.seed)))
    resolved = {"block_size": engine.processor.cache.block_size, "num_blocks": run.num_blocks,
                "max_batch_tokens": run.max_batch_tokens,
                "max_requests_per_batch": engine.manager.continuous_batching_config.max_requests_per_batch,
                "scheduler_type": engine.manager.continuous_batching_config.scheduler_type, **dict(e.config)}
    return _served(cfg, hf.transformers_version(), resolved, run, clock, host_name)


def _serve_sglang(cfg, b, clock, host_name):
    """serve_with_engine for SGLang's Scheduler (hwsim/serving/engines/sglang.py)."""
    from importlib import metadata
    from hwsim.rng import RandomStreams
    from hwsim.serving.engines import sglang
    from hwsim.serving.requests import open_loop_requests

    e, w = cfg.workload.engine, cfg.workload
    try:
        engine = sglang.SglEngine(b.model, clock, dict(e.config), b.chip.hbm_capacity_bytes, available_bytes(b))
        run = engine.serve(open_loop_requests(w, RandomStreams(cfg.seed)))
    except sglang.EngineError as exc:
        raise ConfigError(str(exc), key="workload.engine") from exc
    a = engine.args
    resolved = {"chunked_prefill_size": a.chunked_prefill_size, "max_prefill_tokens": a.max_prefill_tokens,
                "max_running_requests": run.max_running_requests, "max_total_tokens": run.max_total_tokens,
                "schedule_policy": a.schedule_policy, "page_size": a.page_size,
                "mem_fraction_static": a.mem_fraction_static, "disable_radix_cache": a.disable_radix_cache}
    return _served(cfg, metadata.version("sglang"), resolved, run, clock, host_name)


def _served(cfg, version: str, resolved: dict, run, clock, host_name):
    """An engine's run as serve_with_engine returns it (either engine's run has the same fields)."""
    from hwsim.serving.engines import results
    part = results.engine_summary(cfg.workload.engine.kind, version, resolved, run, clock, host_name)
    served, gaps_ms = results.served(run, cfg.workload, cfg.budget_ms, part)
    if not run.steps:
        raise ConfigError("no request was served (the engine scheduled no step)", key="workload.arrivals")
    tokens = sum(len(t) for t in run.token_times.values())
    return served, results.request_rows(run), results.engine_steps(run), gaps_ms, tokens
