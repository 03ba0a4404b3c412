"""Whether the engine a scenario names can run here (hwsim/checks.py asks): installed, the pinned
version, only its config's own field names; one (key, message) per problem: exit 2, one line.
The engine's own package is imported lazily, so this module sits with the schemas (the adapter,
hwsim/serving/engines/hf.py, reads the same names from here)."""

from __future__ import annotations

import dataclasses

from hwsim.config.scenario import ClosedArrivals

PINNED = "5.17.0"
HF = "hf-transformers"
SGLANG = "sglang"
SGLANG_PINNED = "0.5.4"
SGLANG_INSTALL = "pip install 'hwsim[sglang-engine]' (CPU-only steps: docs/serving.md)"


class EngineError(Exception):
    """The engine is missing, of another version, or given a field it lacks (one line, exit 2)."""


def transformers_version() -> str:
    try:
        import transformers
    except ImportError as exc:
        raise EngineError("workload.engine.kind hf-transformers needs transformers=="
                          f"{PINNED} (pip install 'hwsim[hf-engine]'): not installed") from exc
    return transformers.__version__


def check_version() -> None:
    v = transformers_version()
    if v != PINNED:
        raise EngineError(f"workload.engine.kind hf-transformers is pinned to transformers=={PINNED}; "
                          f"{v} is installed (pip install 'hwsim[hf-engine]')")


def config_fields() -> set[str]:
    from transformers.generation.configuration_utils import ContinuousBatchingConfig
    return {f.name for f in dataclasses.fields(ContinuousBatchingConfig)}


def cb_config(fields: dict):
    """The engine's ContinuousBatchingConfig from its own field names; unknown ones refused."""
    from transformers.generation.configuration_utils import ContinuousBatchingConfig
    known = config_fields()
    for name in fields:
        if name not in known:
            raise EngineError(f"workload.engine.config.{name}: ContinuousBatchingConfig of transformers "
                              f"{PINNED} has no field '{name}' (it has: {', '.join(sorted(known))})")
    return ContinuousBatchingConfig(**fields)


def check_sglang() -> None:
    """sglang importable (its CUDA-only imports stood in) and of the pinned version."""
    from importlib import metadata
    try:
        v = metadata.version("sglang")
    except metadata.PackageNotFoundError as exc:
        raise EngineError(f"workload.engine.kind sglang needs sglang=={SGLANG_PINNED}: not installed "
                          f"({SGLANG_INSTALL})") from exc
    if v != SGLANG_PINNED:
        raise EngineError(f"workload.engine.kind sglang is pinned to sglang=={SGLANG_PINNED}; {v} is "
                          f"installed ({SGLANG_INSTALL})")
    from hwsim.config.sglang_stubs import install_stubs
    install_stubs()
    import warnings
    try:
        with warnings.catch_warnings():        # its import warns of CUDA-only quantization kernels
            warnings.simplefilter("ignore")
            import sglang.srt.managers.scheduler  # noqa: F401
    except ImportError as exc:
        raise EngineError(f"workload.engine.kind sglang: sglang {v} cannot import its scheduler "
                          f"({exc}; {SGLANG_INSTALL})") from exc


def server_args_fields() -> set[str]:
    from sglang.srt.server_args import ServerArgs
    return {f.name for f in dataclasses.fields(ServerArgs)}


# ServerArgs fields the adapter sets itself (no model, no tokenizer, one CPU process, no overlap)
SGLANG_FIXED = ("model_path", "device", "skip_tokenizer_init", "disable_overlap_schedule", "tp_size",
                "dp_size", "pp_size")


def sglang_fields(fields: dict) -> None:
    """Only ServerArgs' own field names, and none the adapter fixes."""
    known = server_args_fields()
    for name in fields:
        if name not in known:
            raise EngineError(f"workload.engine.config.{name}: ServerArgs of sglang {SGLANG_PINNED} has no "
                              f"field '{name}' (e.g. chunked_prefill_size, max_running_requests, "
                              "max_total_tokens, max_prefill_tokens, schedule_policy, page_size, "
                              "mem_fraction_static, disable_radix_cache)")
        if name in SGLANG_FIXED:
            raise EngineError(f"workload.engine.config.{name}: set by hwsim's sglang adapter "
                              f"(fixed: {', '.join(SGLANG_FIXED)})")


def problems(cfg):
    """(key, message) of an engine the scenario names that cannot run here (hwsim/checks.py)."""
    if not cfg.workload.serving:            # fixed-batch decode: generate()'s loop, or hwsim's
        if cfg.workload.engine is not None:
            yield from generate_problems(cfg)
        return
    e = cfg.workload.engine
    if e.builtin:
        return
    if isinstance(cfg.workload.arrivals, ClosedArrivals):
        yield "workload.arrivals.kind", "a real engine replays open-loop arrivals (poisson, gamma, trace), not closed"
        return
    if cfg.parallel.gpus > 1:
        yield "parallel.gpus", "a real engine is simulated on one GPU"
        return
    installed, fields, config_class = ((check_sglang, sglang_fields, "ServerArgs") if e.kind == SGLANG
                                       else (check_version, cb_config, "ContinuousBatchingConfig"))
    try:
        installed()
        fields(dict(e.config))
    except EngineError as exc:
        about_config = "workload.engine.config" in str(exc) or "has no field" in str(exc)
        yield ("workload.engine.config" if about_config else "workload.engine.kind"), str(exc)
    except (TypeError, ValueError) as exc:
        yield "workload.engine.config", f"{config_class} refused it: {exc}"


def generate_problems(cfg):
    """(key, message) of an hf-generate engine this scenario cannot run: its cache is the engine
    config's (a kv_cache block beside it, other than the one it maps to, is refused), one GPU,
    a dense model (its step's kernels are counted with no routing)."""
    from hwsim.config.generate_engine import cache_kv
    e, kv = cfg.workload.engine, cfg.kv_cache
    mapped = cache_kv(e.config.model_dump())
    if mapped is None and kv.quantized:
        yield "kv_cache", ("engine hf-generate's cache is cache_implementation dynamic (the bf16 DynamicCache): "
                           "drop the kv_cache block, or set workload.engine.config.cache_implementation quantized")
    elif mapped is not None and (kv.widths() != [mapped["bits"]] * 2 + [16, 16] or kv.dequant != "unfused"
                                 or kv.group_size != mapped["group_size"] or kv.recent.tokens != mapped["recent"]["tokens"]):
        yield "kv_cache", ("set by workload.engine.config.cache_config (hf-generate's QuantizedCache): of kv_cache "
                           "only expansion may be set beside it (one-pass: a what-if of one expansion kernel)")
    if cfg.parallel.gpus > 1:
        yield "parallel.gpus", "engine hf-generate is simulated on one GPU"
