"""Whether the engine a scenario names can run here (hwsim/checks.py asks): installed, the pinned
version, only its config's own field names; one (key, message) per problem: exit 2, one line.
The engine's own package is imported lazily, so this module sits with the schemas (the adapter,
hwsim/serving/engines/hf.py, reads the same names from here)."""

from __future__ import annotations

import dataclasses

from hwsim.config.scenario import ClosedArrivals

PINNED = "5.17.0"
HF = "hf-transformers"


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



def problems(cfg):
    """(key, message) of an engine the scenario names that cannot run here (hwsim/checks.py)."""
    if not cfg.workload.serving:            # engine is a key of serving only
        return
    e = cfg.workload.engine
    if e.builtin:
        return
    if e.kind == "sglang":
        yield "workload.engine.kind", ("engine sglang is not available in this hwsim yet "
                                       "(hf-transformers and hwsim are; docs/serving.md)")
        return
    if isinstance(cfg.workload.arrivals, ClosedArrivals):
        yield "workload.arrivals.kind", "a real engine replays open-loop arrivals (poisson, gamma, trace), not closed"
        return
    if cfg.parallel.gpus > 1:
        yield "parallel.gpus", "a real engine is simulated on one GPU"
        return
    try:
        check_version()
        cb_config(dict(e.config))
    except EngineError as exc:
        key = "workload.engine.config" if "has no field" in str(exc) else "workload.engine.kind"
        yield key, str(exc)
    except (TypeError, ValueError) as exc:
        yield "workload.engine.config", f"ContinuousBatchingConfig refused it: {exc}"
