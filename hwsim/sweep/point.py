"""One sweep point as a table row: simulated on a worker (alone, or replaying its group's plans,
hwsim/sweep/groups.py) and its summary flattened into columns. Below both the runner, which
gathers rows, and the groups, which run a group's points, so neither imports the other."""

from __future__ import annotations

import json
import time
import traceback


def run_point(point: dict, plans=None, max_gb: float | None = None) -> dict:
    """One point, on a worker: simulate it and flatten the summary into a table row. `plans`
    (hwsim/sweep/groups.py GroupPlans): its group's plans, replayed where its chip allows.
    `max_gb`: the point runs under that memory cap (hwsim.cost.memory_capped); one that
    needs more is a failed point, the limit put back for the next."""
    from hwsim import pipeline
    from hwsim.cost import OUT_OF_MEMORY, memory_capped
    from hwsim.config.fingerprint import changed_traces
    from hwsim.config.profile import HardwareProfile
    from hwsim.config.scenario import Scenario
    from hwsim.model.shapes import ModelShape

    t0 = time.perf_counter()
    row = {"point": point["hash"], **{f"factor.{k}": v for k, v in point["factors"].items()}}
    try:
        cfg = Scenario.model_validate(point["scenario"])
        # the profile and model the client read and hashed, not the files as they are now
        profile = HardwareProfile.model_validate(point["profile"])
        model = ModelShape.model_validate(point["model"])
        with memory_capped(max_gb):
            s = (plans.summary(cfg, profile, model) if plans is not None
                 else pipeline.run(pipeline.from_config(cfg, profile, model)).summary)
        changed = changed_traces(point["inputs"])      # read here, so checked once read
        if changed:
            raise RuntimeError(f"{changed[0]} changed while the sweep ran; run the sweep again")
        row.update(flatten(s))
        row["status"] = "ok"
        row["error"] = None
    except MemoryError:       # the cap is off again: room to say so
        row["status"] = "failed"
        row["error"] = OUT_OF_MEMORY.replace("the run", "the point") + (f" (capped at {max_gb:g} GB)"
                                                                         if max_gb is not None else "")
    except Exception as exc:   # noqa: BLE001 - a failing point is recorded, the sweep goes on
        row["status"] = "failed"
        row["error"] = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    row["wall_s"] = time.perf_counter() - t0
    row["scenario_json"] = json.dumps(point["scenario"], sort_keys=True)
    return row


def flatten(summary: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in summary.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        elif isinstance(value, (int, float, str, bool)) or value is None:
            out[name] = value
        else:
            out[name] = json.dumps(value, default=str)
    return out
