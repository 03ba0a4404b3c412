"""The trace's step as the host issued it: its host calls in time order, each with the CPU work
before it and the device events it launched (classified), from the last ProfilerStep window that
launched anything (else an engine's own repeated step annotation, else the whole trace:
step_window)."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, replace

from hwsim.errors import ConfigError
from hwsim.ktrace import gemm_sequence
from hwsim.model import ir
from hwsim.ktrace.classify import Point, classify, expands_kv
from hwsim.ktrace.reader import COPIES, GRAPH_LAUNCHES, KEY, LAUNCHES, SYNCS, DeviceEvent, HostCall, Trace
from hwsim.model.shapes import ModelShape

US = 1e-6
ITEM_ONCE = (ir.Gemm, ir.GroupedGemm, ir.Attention)   # one op, one item: its other kernels are absorbed


@dataclass(frozen=True)
class TraceStep:
    steps: tuple[ir.HostStep, ...]
    window_s: float                  # the traced step's wall time (profiled)
    device_busy_s: float             # union of its device events, as traced
    kernels: tuple[ir.TraceKernel, ...]
    alloc_s: float = 0.0             # of the host's traced time, in cudaMalloc/cudaFree calls
    allocs: int = 0
    profiler_s: float = 0.0          # of the host's traced time, taken out as the profiler's own
    window: str = "ProfilerStep"     # what marked the step imported (step_window)

    def report(self) -> dict:
        """Counts for the JSON's `trace` block: what was classified, and how."""
        ks = self.kernels
        fallback = [k for k in ks if isinstance(k.item, ir.Unclassified)]
        traced = sum(k.traced_s for k in ks)
        how: dict[str, int] = {}
        for k in ks:
            how[k.how] = how.get(k.how, 0) + 1
        kinds: dict[str, int] = {}
        for k in ks:
            name = ir.kind_of(k.item)
            kinds[name] = kinds.get(name, 0) + 1
        return {"kernels": len(ks), "classified": len(ks) - len(fallback),
                "fallback_kernels": len(fallback),
                "fallback_share": sum(k.traced_s for k in fallback) / traced if traced else 0.0,
                "classified_by": how, "items": kinds,
                "traced_step_ms": self.window_s * 1e3, "traced_device_busy_ms": self.device_busy_s * 1e3,
                "host_alloc_ms": self.alloc_s * 1e3, "host_allocs": self.allocs,
                "profiler_removed_ms": self.profiler_s * 1e3, "step_window": self.window}


def step_window(trace: Trace) -> tuple[float, float, str]:
    """(start, end, what marked it) of the step hwsim imports: the last ProfilerStep# window
    that launched kernels; else the last of a user annotation that repeats, never overlaps
    itself, launches in each span and covers at least half the trace's launches, the one of
    fewest spans (an engine's per-step mark, not a per-layer one: vLLM and SGLang profile a
    few steps without ProfilerStep#); else the whole trace."""
    launches = sorted(c.ts for c in trace.calls if c.name in LAUNCHES | GRAPH_LAUNCHES)
    for start, end in reversed(trace.steps):
        if any(start <= t <= end for t in launches):
            return start, end, "ProfilerStep"
    best = None
    for name, spans in trace.annotations.items():
        spans = sorted(spans)
        if len(spans) < 2 or any(b[0] < a[1] for a, b in zip(spans, spans[1:])):
            continue
        counts = [bisect_right(launches, e) - bisect_left(launches, s) for s, e in spans]
        if min(counts) > 0 and 2 * sum(counts) >= len(launches):
            rank = (len(spans), -sum(counts))
            if best is None or rank < best[0]:
                best = (rank, (spans[-1][0], spans[-1][1], f"annotation '{name}'"))
    if best:
        return best[1]
    events = [e for evs in trace.device.values() for e in evs]
    start = min([c.ts for c in trace.calls] + [e.ts for e in events])
    end = max([c.ts + c.dur for c in trace.calls] + [e.ts + e.dur for e in events])
    return start, end, "whole trace"


def _issuing_thread(calls) -> int:
    """The host thread that launched the most kernels: the one whose CPU time is the step's."""
    counts: dict[int, int] = {}
    for c in calls:
        if c.name in LAUNCHES or c.name in GRAPH_LAUNCHES:
            counts[c.tid] = counts.get(c.tid, 0) + 1
    return max(counts, key=counts.get) if counts else (calls[0].tid if calls else 0)


def _union(events: list[DeviceEvent]) -> float:
    busy, reach = 0.0, float("-inf")
    for e in sorted(events, key=lambda e: e.ts):
        end = e.ts + e.dur
        if end > reach:
            busy += end - max(e.ts, reach)
            reach = end
    return busy * US


class _Launches:
    """Each host call's device events, in time order, each issued once: calls that share a
    correlation id (or carry none) would otherwise each re-issue all of them (355 kernels
    became 126,025)."""

    def __init__(self, trace: Trace):
        self.trace, self.issued = trace, set()

    def __call__(self, c: HostCall) -> list[DeviceEvent]:
        if c.correlation < 0 or c.correlation in self.issued:
            return []
        self.issued.add(c.correlation)
        return sorted(self.trace.device.get(c.correlation, ()), key=lambda e: e.ts)


class _Assembly:
    """What the walk over one traced step's host calls accumulates: the kernels as classified (and
    their device events, for the GEMMs' sequence), and the profiler's own host time taken out."""

    def __init__(self, trace: Trace, model: ModelShape, point: Point, profiler_overhead: float,
                 event_us: float, marks):
        self.trace, self.model, self.point = trace, model, point
        self.profiler_overhead, self.event_us, self.marks = profiler_overhead, event_us, marks
        self.removed = 0.0                 # seconds of the host's traced time taken out (unprofiled)
        self.seen_ops: set[int] = set()
        self.prev_gemm = None              # (K, N) of the last GEMM: what the next one may consume
        self.kv_expanded = False           # whether K and V were expanded since the last attention
        self.kernels: list[ir.TraceKernel] = []
        self.events: list[DeviceEvent] = []

    def unprofiled(self, t0: float, t1: float, activities: int = 0) -> float:
        """Seconds of host work in [t0, t1) (us) once the profiler's own are taken out: its
        host events there, and the device `activities` a launch call records (CUPTI's records:
        a CUDA-graph launch's duration grows with its kernels when profiled)."""
        recorded = bisect_left(self.marks, t1) - bisect_left(self.marks, t0) + activities
        kept = max(0.0, t1 - t0 - recorded * self.event_us) * US / self.profiler_overhead
        self.removed += (t1 - t0) * US - kept
        return kept

    def classified(self, ev: DeviceEvent, ext: int) -> ir.TraceKernel:
        op = self.trace.ops.get(ext if ext >= 0 else ev.ext_id)
        item, how = classify(ev, op, self.model, self.point, self.prev_gemm, self.kv_expanded)
        if isinstance(item, (ir.Gemm, ir.GroupedGemm)):
            self.prev_gemm = (item.k, item.n)
        self.kv_expanded = expands_kv(ev.name) or (self.kv_expanded and not isinstance(item, ir.Attention))
        if how == "op-shapes" and isinstance(item, ITEM_ONCE):
            if ext in self.seen_ops:
                item, how = ir.Absorbed(op.name), "op-shapes"
            self.seen_ops.add(ext)
        k = ir.TraceKernel(ev.name, item, how, ev.dur * US, ev.stream, op.name if op else "")
        self.kernels.append(k)
        self.events.append(ev)
        return k

    def host_steps(self, calls: list[HostCall], orphans: list[DeviceEvent], main, start: float,
                   end: float) -> list[ir.HostStep]:
        """The issuing thread's calls in order, each with the host gap before it; other threads'
        launches and orphan kernels at no host cost, in time order."""
        launched = _Launches(self.trace)
        steps: list[ir.HostStep] = []
        t, oi = start, 0
        for c in calls:
            while oi < len(orphans) and orphans[oi].ts <= c.ts:
                steps.append(ir.HostStep(0.0, 0.0, 0, False, (self.classified(orphans[oi], -1),)))
                oi += 1
            if c.tid != main:      # another thread's call: its kernels in time order, no host time here
                steps.append(ir.HostStep(0.0, 0.0, 0, False,
                                         tuple(self.classified(e, c.ext_id) for e in launched(c))))
                continue
            gap = self.unprofiled(t, c.ts) if c.ts > t else 0.0
            evs = launched(c)
            ks = tuple(self.classified(e, c.ext_id) for e in evs)
            if c.name in SYNCS and c.name not in COPIES:
                steps.append(ir.HostStep(gap, 0.0, 0, True, ()))
            elif c.name in SYNCS:                       # a blocking copy: issue it, then wait for it
                steps.append(ir.HostStep(gap, 0.0, 1, False, ks))
                steps.append(ir.HostStep(0.0, 0.0, 0, True, ()))
            else:
                steps.append(ir.HostStep(gap, self.unprofiled(c.ts, c.ts + c.dur, len(evs)), 1, False, ks))
            t = max(t, c.ts + c.dur)
        for e in orphans[oi:]:
            steps.append(ir.HostStep(0.0, 0.0, 0, False, (self.classified(e, -1),)))
        steps.append(ir.HostStep(self.unprofiled(t, end) if end > t else 0.0, 0.0, 0, False, ()))
        return steps


def assemble(trace: Trace, model: ModelShape, point: Point, profiler_overhead: float,
             event_us: float = 0.0) -> TraceStep:
    """The host steps of the traced step. CPU gaps between the issuing thread's calls are the
    host's own work, less the profiler's own: `event_us` for each host event it recorded there
    (an op, a runtime call), then divided by `profiler_overhead`; a sync's duration is the
    device's (the simulation waits instead), a launch's is the launch call's cost (less its
    events' and its kernels' records). Other threads' launches keep their kernels' place in time, at no host
    cost."""
    if not trace.device:
        raise ConfigError("the trace has no GPU kernels: record it with "
                          "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]", file=trace.path, key=KEY)
    start, end, window = step_window(trace)
    calls = [c for c in trace.calls if start <= c.ts <= end]
    linked = {c.correlation for c in calls}
    recorded = {c.correlation for c in trace.calls if c.correlation >= 0}
    # device events whose launching call was not recorded (or that carry no correlation id) keep
    # their place by their own start
    orphans = sorted((e for corr, evs in trace.device.items() if corr not in recorded for e in evs
                      if start <= e.ts <= end), key=lambda e: e.ts)
    main = _issuing_thread(calls)
    # the issuing thread's own marks: another's cost it nothing
    walk = _Assembly(trace, model, point, profiler_overhead, event_us, trace.marks.get(main, ()))
    steps = _sequence_gemms(walk.host_steps(calls, orphans, main, start, end), walk.kernels, walk.events, model)
    kernels = [k for st in steps for k in st.kernels]
    in_window = [e for corr in linked & recorded for e in trace.device.get(corr, ())] + orphans
    if not kernels:
        raise ConfigError("the trace's step launches no GPU kernels", file=trace.path, key=KEY)
    allocs = [dur for ts, dur in trace.allocs if start <= ts <= end]
    return TraceStep(tuple(steps), (end - start) * US, _union(in_window), tuple(kernels),
                     sum(allocs) * US, len(allocs), walk.removed, window)


def _sequence_gemms(steps: list[ir.HostStep], kernels: list[ir.TraceKernel], events: list[DeviceEvent],
                    model: ModelShape) -> list[ir.HostStep]:
    """The steps with the shapeless GEMMs' weights taken from their place in the layer
    (hwsim/ktrace/gemm_sequence.py) where the sequence says it; as they were otherwise."""
    gemms = [i for i, k in enumerate(kernels) if k.how == "name+grid+model" and isinstance(k.item, ir.Gemm)
             and not gemm_sequence.FP32_SIMT.search(k.name)]
    shapes = gemm_sequence.assign([(events[i].name, events[i].grid) for i in gemms], model)
    if not shapes:
        return steps
    new = {}
    for j, (k_dim, n_dim) in shapes.items():
        old = kernels[gemms[j]]
        new[id(old)] = replace(old, item=replace(old.item, k=k_dim, n=n_dim), how="name+sequence+model")
    return [replace(st, kernels=tuple(new.get(id(k), k) for k in st.kernels)) for st in steps]

