"""One pass of the schedule over the GPUs: a decode step, a prefill, or a serving iteration of
decodes and prompt chunks; the unit both the fixed-batch run (hwsim/run.py) and the serving loop
(hwsim/serving/loop.py) are made of.

There is one pass path, `simulate_pass`, for 1 and N GPUs: it asks the built system's GPUs
(`Built.gpus`) to run it. One GPU (`OneGpu`, hwsim/parallel/one_gpu.py) is the N = 1 case: the trivial layout, no
collectives, its kernels on its one stream; several (`hwsim.parallel.multi.ParallelRun`) cut
each GPU's kernels at the collectives. The one-GPU case keeps its own body, a fast path: it
runs the pass's kernels as one stream process, without the cuts, micro-batches and idle-time
accounting of several GPUs, none of which it has (they would cost it and add nothing).

`b`, in every function here, is the built system (hwsim/build.py:Built), which this module sits
below: build makes the GPUs that run the pass (hwsim/parallel/one_gpu.py, multi.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hwsim.engine.host import HostTotals
from hwsim.engine.records import RecordLog
from hwsim.hw.power import Activity
from hwsim.metrics import traffic_class
from hwsim.model.schedule import StepShape
from hwsim.workload.router import experts_chosen


@dataclass
class StepResult:
    step: int
    phase: str
    batch: int
    context: int
    t_start: float
    t_end: float
    breakdown_s: dict[str, float]
    bytes: dict[str, float]
    kernels: int
    tokens: int
    active_experts_per_layer: float
    active_weight_fraction: float
    parallel: object | None = None     # several GPUs: hwsim.parallel.multi.PassStats
    activity: Activity = Activity()    # the units' work, what its power is made of (several GPUs: the busiest's)
    host: HostTotals = HostTotals()    # the host's side of the pass (several GPUs: the first GPU's)
    draft_s: float = 0.0               # of the duration, the draft passes' (workload.speculative)

    @property
    def duration_s(self) -> float:
        return self.t_end - self.t_start



@dataclass(frozen=True)
class PassPlan:
    """What one pass on one GPU issues: its routing and its stream of kernels."""
    routing: dict
    items: list


def plan_pass(b, shape: StepShape, step: int, counts_only: bool = False) -> PassPlan:
    """The pass's routing draw and kernels, read off (and updating) what is on chip before it.
    The schedule reads the chip's sizes, never its SM clock: a power governor's probe at
    another clock (Built.at_sm_clock) can replay the same plan (hwsim/validate.py).
    `counts_only`: per-expert counts drawn directly where they can be (Router.step)."""
    routing = b.router.step(step, shape.tokens, counts_only) if b.router else {}
    return PassPlan(routing, b.schedule.step(shape, routing, b.onchip))


def simulate_pass(b, shape: StepShape, step: int, records: RecordLog | None,
                  every_interval: bool = True, plan: PassPlan | None = None,
                  intervals: bool = True) -> StepResult:
    """One pass on b's GPUs, one or several (b.gpus runs it). `every_interval=False`: of the
    units' busy intervals, keep only each item's first run (hwsim.hw.device.Device.record_intervals),
    for a step that no chart draws. `plan`: the pass's kernels as b.gpus.plan built them for this
    shape and step on an equal system (at another SM clock); by default they are built here
    (several GPUs plan their own). `intervals=False`: no busy intervals (nothing draws or writes
    them)."""
    return b.gpus.simulate(b, shape, step, records, every_interval, plan, intervals)


def moved_bytes(totals) -> dict[str, float]:
    """Bytes moved by traffic class, summed over the streams' totals."""
    moved = {"weights": 0.0, "kv": 0.0, "activations": 0.0}
    for t in totals:
        for comp, nbytes in t.moved.items():
            moved[traffic_class(comp)] += nbytes
    return moved


def active_experts(b, routing: dict) -> dict[str, float]:
    """StepResult's mean distinct experts per MoE layer and share of the weights touched."""
    active = [experts_chosen(r) for r in routing.values()]
    return {"active_experts_per_layer": float(np.mean(active)) if active else 0.0,
            "active_weight_fraction": b.schedule.active_weight_bytes(active)
            / b.schedule.weight_bytes_total()}
