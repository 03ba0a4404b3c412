"""An engine host profile read off a torch.profiler trace of a short burst of the engine itself
(`workload.engine.host_trace`; captured as docs/traces.md says, with the engine serving a few
requests).

What the trace gives (hwsim/ktrace/reader.py reads it, bounded):
- plans: the attention calls that built a plan, those of `aten::_cudnn_attention_forward` (or
  `aten::_scaled_dot_product_cudnn_attention`) over PLAN_FACTOR x the median call; `plan_ms` is
  their mean excess over the median call;
- eager forwards: attention calls (any SDPA backend's) / decoder layers (each layer attends once
  a forward), else ProfilerStep windows;
- kernels: launch calls / eager forwards, all counted per layer (`kernels_per_layer`, no fixed part);
- `launch_us`: the burst's host span (first op to last op's end) less the plans' time and less
  the profiler's own (`profiler_event_us` of hardware_profiles/hosts/as-traced.yaml for each
  event it recorded on the launching threads and each kernel record: the kernel-trace path's
  rule, docs/traces.md), over the launches: every other host microsecond (Python scheduling,
  dispatch, sampling) is charged per launched kernel, but the per-step and per-sequence work
  (`schedule_us`, `schedule_us_per_seq`, `mask_us_per_seq`), which a burst of one batch size
  cannot tell from per-launch work: those stay the base profile's, their share of the burst (its
  sequences from the attention calls' query shapes) taken off first. An eager engine is
  host-bound, so its span is its host's; a device-bound burst would overstate it.
A CUDA-graphs burst (graph launch calls in it) gives `graph_launch_us` (each replay's call less the
profiler's record of its kernels) and kernels per layer from its eager forwards (captures, prefills);
its eager host's numbers, which such a burst does not show, stay the base profile's.
"""

from __future__ import annotations

import statistics

from hwsim.errors import ConfigError
from hwsim.ktrace.host import load_host
from hwsim.ktrace.reader import GRAPH_LAUNCHES, LAUNCHES, read_trace

KEY = "workload.engine.host_trace"
# cuDNN's attention op (the one that builds plans): the inner op where the trace has it, else its caller
# (a traced call records both, nested: counting both counted every call twice)
ATTENTION_OPS = ("aten::_cudnn_attention_forward", "aten::_scaled_dot_product_cudnn_attention")
# SDPA's own op, one call per layer per forward whatever the backend (CUDA graphs run it without cuDNN)
SDPA_OPS = ("aten::scaled_dot_product_attention",)
# what a burst cannot give: the host-to-device copy rate, capture forwards, the what-if speed; for a
# graphs burst also the eager host's per-launch and plan time and the engine's scheduling
FROM_BASE = ("h2d_GBps", "graph_capture_forwards", "cpu_speed")
PER_SEQUENCE = ("schedule_us", "schedule_us_per_seq", "mask_us_per_seq")   # eager: what a burst cannot separate
CHIP_SIDE = ("packed_sdpa_efficiency", "packed_sdpa_efficiency_graphs", "packed_sdpa_lone_graphs")
GRAPHS_FROM_BASE = ("schedule_us", "schedule_us_per_seq", "sample_us", "mask_us_per_seq", "launch_us", "plan_ms")
PLAN_FACTOR = 10.0            # a plan build takes tens of ms; a planned call tens to hundreds of us
PROFILER_HOST = "as-traced"   # the host profile whose profiler_event_us is the profiler's cost per event


def _sourced(value: float, source: str) -> dict:
    return {"value": value, "source": source}


def profile_from_trace(path: str, base, layers: int):
    """An EngineHostProfile from the trace at `path`; `base` gives what the trace cannot."""
    trace = read_trace(path, key=KEY, simulated=False)   # launches counted, no kernel timed
    ops = list(trace.ops.values())
    if not ops:
        raise ConfigError("host_trace records no CPU ops: profile with record_shapes or the default activities",
                          file=path, key=KEY)
    launches = [c for c in trace.calls if c.name in LAUNCHES]
    if not launches:
        raise ConfigError("host_trace records no kernel launches: profile the CUDA activity too", file=path, key=KEY)
    forwards = len(_first_recorded(ops, SDPA_OPS + ATTENTION_OPS)) / layers or len(trace.steps)
    if forwards < 1:
        raise ConfigError("host_trace holds no whole step (no attention calls of every layer, no ProfilerStep)",
                          file=path, key=KEY)
    where = f"host_trace {path}"
    event_us = load_host(PROFILER_HOST).profiler_event_us
    event_us = event_us.value if event_us else 0.0
    replays = [c for c in trace.calls if c.name in GRAPH_LAUNCHES]
    fields = {**{k: getattr(base, k).model_dump() for k in FROM_BASE},
              "name": f"host_trace:{path}", "description": f"read off {path} ({forwards:.0f} eager forwards, "
              f"{len(launches)} launches, {len(replays)} graph replays)",
              "kernels_per_layer": _sourced(len(launches) / forwards / layers,
                                            f"{where}: {len(launches)} launches / {forwards:.1f} eager forwards "
                                            f"(attention calls / layers) / {layers} layers"),
              "kernels_fixed": _sourced(0.0, f"{where}: all counted per layer"),
              # the chip's side of the packed SDPA: not the host's, kept from the base profile
              **{k: getattr(base, k) and getattr(base, k).model_dump() for k in CHIP_SIDE}}
    if replays:
        fields.update({k: getattr(base, k).model_dump() for k in GRAPHS_FROM_BASE},
                      **_graph_host(trace, replays, event_us, where))
    else:
        fields.update(_eager_host(trace, ops, launches, event_us, base, forwards, layers, where),
                      graph_launch_us=base.graph_launch_us.model_dump())
    return type(base).model_validate(fields)


def _first_recorded(ops, names) -> list:
    """The calls of the first of `names` the trace records (nested ops record one call several times)."""
    return next((calls for calls in ([op for op in ops if op.name == name] for name in names) if calls), [])


def _eager_host(trace, ops, launches, event_us: float, base, forwards: float, layers: int, where: str) -> dict:
    """An eager burst is host-bound: its host span, less plan builds, the profiler's own time and
    the engine's per-step and per-sequence work, is its host's work, charged per launch. A burst's
    batch barely changes, so it cannot tell per-sequence work from per-launch work: those terms
    (building each sequence's inputs and mask) stay the base profile's and their share of the
    burst comes off its span."""
    calls = _first_recorded(ops, ATTENTION_OPS)
    attn = sorted(op.dur for op in calls)
    median = statistics.median(attn) if attn else 0.0
    builds = [d - median for d in attn if median and d > PLAN_FACTOR * median]
    span = max(op.ts + op.dur for op in ops) - min(op.ts for op in ops)
    recorded = sum(len(trace.marks.get(tid, ())) for tid in {c.tid for c in launches}) + trace.kernels
    profiler = recorded * event_us
    seqs = _sequences(calls) / layers
    per_seq = base.schedule_us_per_seq.value + base.mask_us_per_seq.value
    engine = forwards * base.schedule_us.value + seqs * per_seq
    own = span - sum(builds) - profiler - engine
    if own <= 0:
        raise ConfigError(f"host_trace holds less host time ({span / 1e3:.1f} ms less plan builds and the profiler's "
                          f"own) than the base profile's per-step and per-sequence work for its {seqs:.0f} "
                          f"sequences ({engine / 1e3:.1f} ms): not an eager engine's burst", file=trace.path, key=KEY)
    inside = _sourced(0.0, f"{where}: inside launch_us")
    return {**{k: getattr(base, k).model_dump() for k in PER_SEQUENCE}, "sample_us": inside,
            "launch_us": _sourced(own / len(launches),
                                  f"{where}: host span {span / 1e3:.1f} ms less plan builds ({sum(builds) / 1e3:.1f} "
                                  f"ms), the profiler's own ({recorded} events x {event_us:g} us, hosts/"
                                  f"{PROFILER_HOST}.yaml) and the base profile's per-step and per-sequence work "
                                  f"({forwards:.0f} forwards, {seqs:.0f} sequences: {engine / 1e3:.1f} ms), over "
                                  f"{len(launches)} launches"),
            "plan_ms": _sourced(statistics.mean(builds) / 1e3 if builds else 0.0,
                                f"{where}: {len(builds)} attention calls over {PLAN_FACTOR:g}x the median "
                                f"({median:.0f} us), their mean excess")}


def _sequences(calls) -> int:
    """Sequences the attention calls attended, summed: a call's query tokens (one a sequence in a
    decode step), at most the median call's (a prefill chunk's tokens are not sequences); 0 where
    the trace has no shapes."""
    tokens = [op.dims[0][2] for op in calls if op.dims and len(op.dims[0]) == 4]
    cap = statistics.median(tokens) if tokens else 0
    return sum(min(t, cap) for t in tokens)


def _graph_host(trace, replays, event_us: float, where: str) -> dict:
    """A CUDA-graphs burst's host is off the critical path but for each replay's call: its time,
    less the profiler's record of each kernel the graph ran, is `graph_launch_us`; the eager
    launches (captures, prefills) give kernels per layer; the rest is the base profile's."""
    own = sorted(c.dur - len(trace.device.get(c.correlation, ())) * event_us for c in replays)
    return {"graph_launch_us": _sourced(max(statistics.median(own), 0.1),
                                        f"{where}: median host time of {len(replays)} graph launch calls, less "
                                        f"{event_us:g} us per kernel record the profiler made of each")}
