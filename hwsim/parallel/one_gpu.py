"""The GPUs of a one-GPU system (`OneGpu`): the N = 1 case of the GPUs a pass runs on
(hwsim/step.py:simulate_pass asks `Built.gpus`), beside several GPUs' ParallelRun (multi.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from hwsim.engine.records import RecordLog, StreamTotals
from hwsim.metrics import Component
from hwsim.model.schedule import StepShape
from hwsim.step import PassPlan, StepResult, active_experts, moved_bytes, plan_pass

if TYPE_CHECKING:
    from hwsim.engine.stream import Stream
    from hwsim.model.onchip import OnChipState
    from hwsim.parallel.layout import Layout
    from hwsim.parallel.memory import GpuMemory


@dataclass
class OneGpu:
    """The GPUs of a one-GPU system: the N = 1 case (the trivial layout, no topology, no
    collectives). Several GPUs are hwsim.parallel.multi.ParallelRun, which answers the same."""
    layout: "Layout"                 # gpus = tp = ep = 1
    streams: list["Stream"]
    onchips: list["OnChipState"]
    memory: "GpuMemory"
    topology: str | None = None
    # a pass's plan (routing and kernels) is made before it and can be kept and replayed
    # (hwsim/whatif/reuse.py, a power governor's probes); several GPUs plan inside their pass
    plans_ahead: ClassVar[bool] = True

    def plan(self, b, shape: StepShape, step: int, counts_only: bool = False) -> PassPlan:
        return plan_pass(b, shape, step, counts_only)

    def lanes(self) -> dict[str, list]:
        """Every unit's recorded busy intervals, in lane order (units the chip lacks have none)."""
        return {u.name: list(u.intervals or ()) for u in self.streams[0].device.units}

    def simulate(self, b, shape: StepShape, step: int, records: RecordLog | None,
                 every_interval: bool, plan: PassPlan | None, intervals: bool) -> StepResult:
        """The pass on the one GPU: its kernels on its stream (b.stream, b.onchip: a power
        governor's probe may carry the planning system's on-chip state, hwsim/run.py)."""
        plan = plan or plan_pass(b, shape, step)
        routing, kernels = plan.routing, plan.items
        stream = b.stream
        device = stream.device
        work_before = device.work()
        copies = stream.copies
        prefetched_before = copies.bytes
        env = b.env
        t0 = env.now
        totals = StreamTotals()
        keep = b.scenario.runtime.kernel_records   # past this window the step's records are not made
        recorded = records is not None and (keep < 0 or step < keep)
        device.record_intervals(recorded and intervals, first_runs_only=not every_interval)
        env.process(stream.run(kernels, step, records if recorded else None, totals))
        env.run()
        by_component = dict.fromkeys(Component, 0.0)
        by_component.update(totals.parts)
        breakdown = {c.value: secs for c, secs in by_component.items()}
        if b.scenario.workload.kernel_trace is not None:     # its attention's KV bytes are kv_read
            from hwsim.engine.kv_share import kv_attributed
            breakdown = kv_attributed(breakdown, totals.moved.get(Component.KV_READ, 0.0), b.chip.hbm_read_bytes_s)
        moved = moved_bytes((totals,))
        if b.onchip.dispatch:
            b.onchip.dispatch.end_step()
        moved["expert_prefetch"] = copies.bytes - prefetched_before
        return StepResult(step=step, phase=shape.phase, batch=shape.batch, context=shape.context,
                          t_start=t0, t_end=env.now, breakdown_s=breakdown, bytes=moved,
                          kernels=totals.kernels, tokens=shape.tokens, **active_experts(b, routing),
                          activity=device.work() - work_before, host=totals.host)
