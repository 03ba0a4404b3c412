"""Whether the engine a scenario names can run here (hwsim/checks.py asks): installed, the pinned
version, only its config's own field names. One (key, message) per problem: exit 2, one line."""

from __future__ import annotations

HF = "hf-transformers"


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
