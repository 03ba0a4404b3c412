"""A sweep's points in groups that share their plans (issue 33): points whose scenarios differ
only in the hardware (`hardware`, `hardware_overrides`) make the same passes, and where their
chips also agree in every field the plans are made from, the passes' plans (routing and
kernels) made for the first are replayed for the others, which are only re-timed.

The reuse is hwsim/whatif/reuse.py's (SharedPlans: plans are made from the chip's sizes, and
equal sizes replay them), not a second mechanism: a group is built and run on one worker,
so its plans never leave the process that made them. A point whose chip differs where plans
look makes its own (and the next such point replays them); a replayed run's summary is the
solo run's (hwsim/run.py restores what planning left in the expert dispatch)."""

from __future__ import annotations

import json
import math

from hwsim.sweep.point import run_point

HARDWARE_KEYS = ("hardware", "hardware_overrides")
MAX_GROUP = 64        # points per task: enough to amortise the plans, small enough to stream and balance
MIN_GROUP = 16        # fewer remake the plans too often (a point that makes them costs 2-3 that replay)


def plan_key(scenario: dict) -> str:
    """What feeds a point's plans, beyond its chip: the resolved scenario less its hardware."""
    return json.dumps({k: v for k, v in scenario.items() if k not in HARDWARE_KEYS}, sort_keys=True)


def group_points(points: list[dict], workers: int = 1) -> list[list[dict]]:
    """The points by plan_key, in their order; a large group split into near-equal tasks of at
    most MAX_GROUP points (and, down to MIN_GROUP, into enough tasks to keep `workers` busy)."""
    groups: dict[str, list[dict]] = {}
    for p in points:
        groups.setdefault(plan_key(p["scenario"]), []).append(p)
    per_task = min(MAX_GROUP, max(MIN_GROUP, math.ceil(len(points) / (2 * max(1, workers)))))
    tasks = []
    for members in groups.values():
        n = math.ceil(len(members) / per_task)
        size = math.ceil(len(members) / n)
        tasks += [members[i:i + size] for i in range(0, len(members), size)]
    return tasks


class GroupPlans:
    """The plans made so far by a group's points (one SharedPlans per distinct plan-making chip)."""

    def __init__(self):
        self.bases = []
        self.models: dict = {}
        self.reusable = True

    def summary(self, cfg, profile=None, model=None) -> dict:
        """The point's summary: its plans replayed from an earlier point's where its chip allows.
        `profile` and `model`: the resolved ones the point carries (read from the files if not)."""
        from hwsim import pipeline
        from hwsim.config.load import load_model
        from hwsim.whatif.reuse import SharedPlans

        if model is None:
            if cfg.model not in self.models:
                self.models[cfg.model] = load_model(cfg.model)
            model = self.models[cfg.model]
        loaded = pipeline.from_config(cfg, profile, model)
        if not self.reusable:
            return pipeline.summary(loaded)
        for shared in self.bases:
            plans = shared.for_profile(loaded.profile)
            if plans is not None:
                return pipeline.summary(loaded, plans)
        shared = SharedPlans(loaded)
        self.reusable = shared.enabled       # serving, several GPUs, an expert cache: no reuse
        if shared.enabled:
            self.bases.append(shared)
        return shared.summary


def run_group(points: list[dict], max_gb: float | None = None, client_pid: int | None = None) -> list[dict]:
    """A group's points on one worker, its plans made once: one table row each. Each point runs
    under the memory cap `max_gb` (RLIMIT_DATA, as `hwsim run --max-gb`) where only it can
    feel the cap: in a worker process of its own that runs one task at a time."""
    plans = GroupPlans()
    cap = max_gb if max_gb is not None and _alone_in_process(client_pid) else None
    return [run_point(p, plans, max_gb=cap) for p in points]


def _alone_in_process(client_pid: int | None) -> bool:
    """Whether this task is the only work of its process: a Dask worker of one thread, not in
    the sweep client's process (an in-process cluster shares it with the client). The limit is
    per process: a worker running tasks in several threads would cap, and put back, the
    others' limit under them."""
    import os

    try:
        from dask.distributed import get_worker
        worker = get_worker()
    except (ImportError, ValueError):
        return False          # not on a Dask worker: the caller's own process
    return worker.state.nthreads == 1 and os.getpid() != client_pid
