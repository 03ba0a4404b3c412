"""An imported trace as the schedule of a pass: the host's steps and the device items they
issue, the items retargeted to the pass's batch and context and lowered for the target chip.
Everything but `step` (weights, KV cache, memory) is the built-in schedule's, which the
scenario's model, weights and kv_cache keys configure as for any run."""

from __future__ import annotations

import copy
from collections import Counter

from hwsim.engine.host import HostWork
from hwsim.engine.cluster import Cluster
from hwsim.ktrace import expert_loop
from hwsim.model import ir
from hwsim.ktrace.classify import Point
from hwsim.ktrace.host import HostProfile
from hwsim.ktrace.lower import Lowering
from hwsim.ktrace.retarget import retarget
from hwsim.ktrace.timeline import TraceStep
from hwsim.model.blocks import attention_kernel
from hwsim.model.kernel import Kernel, copy_kernel
from hwsim.model.l2_residency import L2Residency
from hwsim.model.schedule import Schedule, StepShape

NAME_CHARS = 64


class TraceSchedule:
    def __init__(self, base: Schedule, traced: TraceStep, point: Point, host: HostProfile,
                 warnings: list[str], loops: list[expert_loop.Loop], group: Cluster | None = None):
        self.base = base
        self.traced = traced
        self.point = point
        self.host = host
        self.warnings = warnings
        lowering = copy.copy(base)     # the attention library the trace ran, on its own memo
        lowering._memo = {}
        lowering.attention = attention_kernel(_backend(traced))
        self.lowering = Lowering(lowering, group)
        self.loops = loops             # HF's eager experts loop (expert_loop.find), moved with the batch
        self._passes: dict[tuple[int, int], tuple[list, int]] = {}

    def __getattr__(self, name):
        return getattr(self.base, name)

    def step(self, shape: StepShape, routing: dict, state=None) -> list:
        return self._pass(shape.batch, shape.context)[0]

    def collectives(self) -> dict:
        """The trace's collectives: re-timed by hwsim's model on the group, or held as traced."""
        calls = [k.item for k in self.traced.kernels if isinstance(k.item, ir.Collective)]
        retimed = sum(self.lowering.collective_s(c) is not None for c in calls)
        group = self.lowering.group
        return {"retimed": retimed, "held": len(calls) - retimed,
                "group_size": len(group.devices) if group else 1}

    def not_rescaled(self, batch: int, context: int) -> int:
        """Device items the retargeting rules left as traced at this point (docs/traces.md)."""
        return self._pass(batch, context)[1]

    def _pass(self, batch: int, context: int) -> tuple[list, int]:
        key = (batch, context)
        if key not in self._passes:
            if len(self._passes) > 64:
                self._passes.clear()
            self._passes[key] = self._build(Point(batch, context, self.point.top_k, self.point.heads))
        return self._passes[key]

    def _build(self, new: Point) -> tuple[list, int]:
        h = self.host
        speed, launch_us = h.cpu_speed.value, h.launch_us.value if h.launch_us else None
        items: list = []
        missed = 0
        index = 0
        if self.loops and new.batch != self.point.batch:
            steps = [(hs, in_loop, in_loop) for hs, in_loop in
                     expert_loop.moved(self.traced.steps, self.loops, self.base.model, new)]
        else:
            iterations = expert_loop.inside(self.loops)
            steps = [(hs, False, i in iterations) for i, hs in enumerate(self.traced.steps)]
        for hs, in_loop, in_iteration in steps:
            launch_s = hs.launches * launch_us * 1e-6 if launch_us is not None else hs.launch_s
            if hs.cpu_s or launch_s or hs.launches or hs.sync:
                items.append(HostWork(hs.cpu_s / speed, launch_s, hs.launches, hs.sync))
            for tk in hs.kernels:
                # a loop iteration's items were moved with it (no dim of theirs is the batch or context)
                item, scaled = (tk.item, True) if in_loop else retarget(tk.item, self.point, new)
                missed += not scaled
                lowered = self.lowering.kernels(f"trace.{index}.{tk.name[:NAME_CHARS]}", item, tk.traced_s)
                items += [named(k, item, in_iteration) if type(k) is Kernel and k.l2_read else k for k in lowered]
                index += 1
        return l2_walked(items, self.base), missed


# A Kineto trace names no tensors (shapes, not addresses), so the L2 walk is given these: the
# activation each kernel reads from the one before it and writes for the next, and, inside an
# experts loop's iteration, the tensor a gather reads rows of (the hidden states) and the one a
# scatter adds rows into (the output), each touched once an iteration: an expert's weights ago.
ACTIVATION = ("act",)
LOOP_CARRIED = {"index": ("act", "loop gathered"), "scatter": ("act", "loop scattered")}


def named(k: Kernel, item: ir.WorkItem, in_iteration: bool) -> Kernel:
    """k reading and writing the activation names above (k itself is shared: a builder's memo)."""
    names = LOOP_CARRIED.get(item.kind, ACTIVATION) if in_iteration and isinstance(item, ir.Memory) else ACTIVATION
    return copy_kernel(k, reads=names, writes=names)


def l2_walked(items: list, base: Schedule) -> list:
    """The pass after the built-in schedule's L2 walk (hwsim/model/l2_residency.py) over those
    names: a kernel reading what a kernel that streamed more than the L2 left, or a tensor an
    iteration of the loop ago, reads it from HBM. Code-fetch waits are not charged: inside real
    traces ATen's vectorised element-wise kernels are already timed high without them
    (validation/compare_trace_kernels.py: adds +35%, Qwen3-30B-A3B at batch 1 on the H200)."""
    chip = base.chip
    walk = L2Residency(chip.l2_bytes, base.activation_address, chip.eviction_latency_ratio,
                       code_fetches=False).walk
    return [walk(k) if type(k) is Kernel else k for k in items]


def _backend(traced: TraceStep) -> str:
    """The decode attention library the trace ran (cudnn or flash; others are timed as flash)."""
    seen = Counter(k.item.backend for k in traced.kernels if isinstance(k.item, ir.Attention))
    return "cudnn" if seen and seen.most_common(1)[0][0] == "cudnn" else "flash"
