"""A scenario's workload.kernel_trace as the schedule of its passes (docs/traces.md), with the
warnings the import raises."""

from __future__ import annotations

from pathlib import Path

from hwsim.engine.cluster import Cluster
from hwsim.ktrace import expert_loop, plausible
from hwsim.model import ir
from hwsim.ktrace.classify import Point
from hwsim.ktrace.host import load_host
from hwsim.ktrace.reader import read_trace
from hwsim.ktrace.schedule import TraceSchedule
from hwsim.ktrace.shapes import weight_shapes
from hwsim.ktrace.timeline import assemble
from hwsim.parallel.topology import resolve


def trace_schedule(cfg, base, streams, chip) -> TraceSchedule:
    """The scenario's workload.kernel_trace as the schedule of its passes; the streams it feeds
    pay no launch cost of their own (the trace's host steps carry it). One GPU's: build refuses
    a trace on several (hwsim/build.py:_topology). `chip`: the ChipSpec its traced collectives'
    group is built of (the schedule keeps only the chip's sizes)."""
    kt = cfg.workload.kernel_trace
    host = load_host(kt.host)
    trace = read_trace(Path(kt.path))
    model = base.model
    a = model.attention
    point = Point(kt.batch_size, kt.context_tokens, model.moe.top_k if model.moe else 1,
                  tuple(sorted({a.heads, a.cached_heads})))
    traced = assemble(trace, model, point, host.profiler_overhead.value,
                      host.profiler_event_us.value if host.profiler_event_us else 0.0)
    plausible.check(traced.kernels, point, trace.path)
    loops = expert_loop.find(traced.steps, model)     # HF's eager experts loop, if any
    warnings = (_warnings(trace, cfg.hardware, traced) + _model_check(traced, model, cfg.model)
                + _loop_check(traced, model, point, cfg.workload.batch_size, loops))
    for s in streams:
        s.launch_s = 0.0
    return TraceSchedule(base, traced, point, host, warnings, loops, _group(cfg, chip))


def _group(cfg, chip) -> Cluster | None:
    """The traced collectives' group: group_size GPUs of the chip (what-ifs included) in the
    topology a multi-GPU scenario on it gets (parallel.topology if set); None below 2."""
    g = cfg.workload.kernel_trace.group_size
    if g < 2:
        return None
    topo = resolve(cfg.parallel.topology, chip.name, f"workload.kernel_trace.group_size = {g}")
    return Cluster(topo.apply(chip), g, topo.gpus_per_node.value)


def _model_check(traced, model, name: str) -> list[str]:
    """A warning when the trace's weight GEMMs (from op shapes) are not the model's weights."""
    shapes = {(k, n) for k, n, _ in weight_shapes(model)}
    gemms = [k.item for k in traced.kernels if isinstance(k.item, ir.Gemm) and k.item.weight
             and k.how == "op-shapes"]
    foreign = [g for g in gemms if (g.k, g.n) not in shapes and (g.n, g.k) not in shapes]
    if gemms and len(foreign) > len(gemms) / 2:
        return [f"{len(foreign)} of the trace's {len(gemms)} weight GEMMs match none of {name}'s weight "
                f"shapes (e.g. K={foreign[0].k}, N={foreign[0].n}): is `model:` the traced model?"]
    return []


def _loop_check(traced, model, point: Point, batch: int, loops: list) -> list[str]:
    """A warning when a trace that runs its experts one by one (Hugging Face's eager experts
    loop: a GEMM pair per expert reached, its rows that expert's tokens) is moved to another
    batch and its iterations cannot be delimited (hwsim.ktrace.expert_loop): they stay as
    traced, though the experts a batch reaches change with it (docs/traces.md, Retargeting)."""
    if not model.moe or batch == point.batch or loops:
        return []                            # a loop that can be delimited is moved (expert_loop)
    shapes = weight_shapes(model)
    others = {(k, n) for k, n, cls in shapes if cls != "experts"}
    expert = {(k, n) for k, n, cls in shapes if cls == "experts"} - others   # no attention's look-alike
    looped = [k for k in traced.kernels if isinstance(k.item, ir.Gemm) and (k.item.k, k.item.n) in expert]
    if len(looped) <= 2 * model.layers:      # one expert's worth a layer: not a loop over them
        return []
    return [f"kernel trace: its experts run in a loop ({len(looped)} per-expert GEMMs, their rows each "
            f"expert's tokens): moved from batch {point.batch} to {batch}, the loop keeps its traced "
            f"iterations and rows; predict a batch from a trace recorded at that batch"]


def _warnings(trace, hardware: str, traced) -> list[str]:
    out = []
    if trace.synthetic:       # the profile's "calibrated on a real H200" is not about this trace
        out.append(f"kernel trace {trace.path} is SYNTHETIC ({trace.synthetic}): its kernels are "
                   f"re-timed from their shapes, but its host gaps and traced durations are made up; "
                   f"not a measured step")
    if traced.window == "whole trace":
        out.append(f"kernel trace {trace.path} marks no step (no ProfilerStep# and no repeated annotation): "
                   f"its {len(traced.kernels)} kernels are taken as one step; profile one step "
                   f"(torch.profiler.schedule(active=1)) or mark each with record_function")
    family = hardware.split("-")[0].lower()
    if trace.gpu is None:
        out.append(f"kernel trace {trace.path} does not name its GPU (no deviceProperties)")
    elif family not in trace.gpu.lower():
        out.append(f"kernel trace {trace.path} was recorded on {trace.gpu}; its kernels are re-timed "
                   f"on {hardware}, its host times are that machine's")
    if not trace.has_shapes:
        out.append(f"kernel trace {trace.path} was recorded without record_shapes=True: kernels are "
                   f"classified from their names, grids and the model's shapes only")
    r = traced.report()
    if r["fallback_kernels"]:
        out.append(f"kernel trace: {r['fallback_kernels']} of {r['kernels']} kernels "
                   f"({100 * r['fallback_share']:.1f}% of traced device time) unclassified, held at "
                   f"their traced durations")
    return out
