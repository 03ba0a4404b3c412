"""One pass of the schedule over the device: a decode step, a prefill, or a serving
iteration of decodes and prompt chunks; the unit both the fixed-batch run (hwsim/run.py) and
the serving loop (hwsim/serving/loop.py) are made of."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from hwsim.build import Built
from hwsim.engine.host import HostTotals
from hwsim.engine.records import RecordLog, StreamTotals
from hwsim.hw.power import Activity, activity_of
from hwsim.metrics import Component, traffic_class
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
    activity: Activity = Activity()    # counted work, what its power is made of (one GPU: the busiest)
    host: HostTotals = HostTotals()    # the host's side of the pass (several GPUs: the first GPU's)

    @property
    def duration_s(self) -> float:
        return self.t_end - self.t_start



@dataclass(frozen=True)
class PassPlan:
    """What one pass on one GPU issues: its routing and its stream of kernels."""
    routing: dict
    items: list

    @cached_property
    def activity(self) -> Activity:
        """The kernels' counted work: the same at every clock, so a plan replayed at another
        (a power governor's probe) counts it once."""
        return activity_of(self.items)


def plan_pass(b: Built, shape: StepShape, step: int, counts_only: bool = False) -> PassPlan:
    """The pass's routing draw and kernels, read off (and updating) what is on chip before it.
    The schedule reads the chip's sizes, never its SM clock: a power governor's probe at
    another clock (Built.at_sm_clock) can replay the same plan (hwsim/validate.py).
    `counts_only`: per-expert counts drawn directly where they can be (Router.step)."""
    routing = b.router.step(step, shape.tokens, counts_only) if b.router else {}
    return PassPlan(routing, b.schedule.step(shape, routing, b.onchip))


def simulate_pass(b: Built, shape: StepShape, step: int, records: RecordLog | None,
                  every_interval: bool = True, plan: PassPlan | None = None,
                  intervals: bool = True) -> StepResult:
    """`every_interval=False`: of the units' busy intervals, keep only each item's first run
    (hwsim.hw.device.Device.record_intervals), for a step that no chart draws. `plan`: the
    pass's kernels as plan_pass built them for this shape and step on an equal system (at
    another SM clock); by default they are built here. `intervals=False`: no busy intervals
    (nothing draws or writes them)."""
    if b.parallel is not None:
        return _parallel_pass(b, shape, step, records, intervals)
    plan = plan or plan_pass(b, shape, step)
    routing, kernels = plan.routing, plan.items
    copies = b.stream.copies
    prefetched_before = copies.bytes
    t0 = b.env.now
    totals = StreamTotals()
    keep = b.scenario.runtime.kernel_records   # past this window the step's records are not made
    recorded = records is not None and (keep < 0 or step < keep)
    b.device.record_intervals(recorded and intervals, first_runs_only=not every_interval)
    b.env.process(b.stream.run(kernels, step, records if recorded else None, totals))
    b.env.run()
    by_component = dict.fromkeys(Component, 0.0)
    by_component.update(totals.parts)
    breakdown = {c.value: secs for c, secs in by_component.items()}
    moved = {"weights": 0.0, "kv": 0.0, "activations": 0.0}
    for comp, nbytes in totals.moved.items():
        moved[traffic_class(comp)] += nbytes
    if b.onchip.dispatch:
        b.onchip.dispatch.end_step()
    moved["expert_prefetch"] = copies.bytes - prefetched_before
    return StepResult(step=step, phase=shape.phase, batch=shape.batch, context=shape.context,
                      t_start=t0, t_end=b.env.now, breakdown_s=breakdown, bytes=moved,
                      kernels=totals.kernels, tokens=shape.tokens, **_active_experts(b, routing),
                      activity=plan.activity, host=totals.host)


def _active_experts(b: Built, routing: dict) -> dict[str, float]:
    """StepResult's mean distinct experts per MoE layer and share of the weights touched."""
    active = [experts_chosen(r) for r in routing.values()]
    return {"active_experts_per_layer": float(np.mean(active)) if active else 0.0,
            "active_weight_fraction": b.schedule.active_weight_bytes(active)
            / b.schedule.weight_bytes_total()}


def _parallel_pass(b: Built, shape: StepShape, step: int, records: RecordLog | None,
                   intervals: bool) -> StepResult:
    """A pass on several GPUs (hwsim/parallel/multi.py): the breakdown averages the GPUs' kernels
    and adds the collectives and the wait for the slowest GPU; bytes and kernels are summed."""
    from hwsim.parallel import multi
    t0, totals, stats, routing, busiest = multi.simulate(b, shape, step, records, intervals)
    moved = {"weights": 0.0, "kv": 0.0, "activations": 0.0}
    for t in totals:
        for comp, nbytes in t.moved.items():
            moved[traffic_class(comp)] += nbytes
    moved["expert_prefetch"] = 0.0
    for onchip in b.parallel.onchips:
        if onchip.dispatch:
            onchip.dispatch.end_step()
    return StepResult(step=step, phase=shape.phase, batch=shape.batch, context=shape.context,
                      t_start=t0, t_end=b.env.now, breakdown_s=multi.breakdown(totals, stats),
                      bytes=moved, kernels=sum(t.kernels for t in totals), tokens=shape.tokens,
                      **_active_experts(b, routing), parallel=stats, activity=busiest,
                      host=totals[0].host)
