"""An engine host profile read off a torch.profiler trace of a short burst of the engine itself
(`workload.engine.host_trace`; captured as docs/traces.md says, with the engine serving a few
requests).

What the trace gives (hwsim/ktrace/reader.py reads it, bounded):
- plans: the attention calls that built a plan, those of `aten::_cudnn_attention_forward` (or
  `aten::_scaled_dot_product_cudnn_attention`) over PLAN_FACTOR x the median call; `plan_ms` is
  their mean excess over the median call;
- steps: attention calls / decoder layers (each layer attends once a step), else ProfilerStep
  windows;
- kernels: launch calls / steps, all counted per layer (`kernels_per_layer`, no fixed part);
- `launch_us`: the burst's host span (first op to last op's end) less the plans' time, over
  the launches: every other host microsecond (Python scheduling, dispatch, sampling) is charged
  per launched kernel, so `schedule_us`, `schedule_us_per_seq` and `sample_us` are 0. An eager
  engine is host-bound, so its span is its host's; a device-bound burst would overstate it.
Graph launches and the profile's own overhead are left to the base profile (graph_launch_us,
cpu_speed).
"""

from __future__ import annotations

import statistics

from hwsim.errors import ConfigError
from hwsim.ktrace.reader import LAUNCHES, read_trace

KEY = "workload.engine.host_trace"
ATTENTION_OPS = ("aten::_cudnn_attention_forward", "aten::_scaled_dot_product_cudnn_attention")
PLAN_FACTOR = 10.0            # a plan build takes tens of ms; a planned call tens to hundreds of us


def _sourced(value: float, source: str) -> dict:
    return {"value": value, "source": source}


def profile_from_trace(path: str, base, layers: int):
    """An EngineHostProfile from the trace at `path`; `base` gives what the trace cannot."""
    trace = read_trace(path, key=KEY, simulated=False)   # launches counted, no kernel timed
    ops = list(trace.ops.values())
    if not ops:
        raise ConfigError("host_trace records no CPU ops: profile with record_shapes or the default activities",
                          file=path, key=KEY)
    launches = sum(1 for c in trace.calls if c.name in LAUNCHES)
    if not launches:
        raise ConfigError("host_trace records no kernel launches: profile the CUDA activity too", file=path, key=KEY)
    attn = sorted(op.dur for op in ops if op.name in ATTENTION_OPS)
    median = statistics.median(attn) if attn else 0.0
    builds = [d - median for d in attn if median and d > PLAN_FACTOR * median]
    steps = len(attn) / layers if attn else len(trace.steps)
    if steps < 1:
        raise ConfigError("host_trace holds no whole step (no attention calls of every layer, no ProfilerStep)",
                          file=path, key=KEY)
    span = max(op.ts + op.dur for op in ops) - min(op.ts for op in ops)
    where = f"host_trace {path}"
    fields = {
        "name": f"host_trace:{path}", "description": f"read off {path} ({steps:.0f} steps, {launches} launches)",
        "schedule_us": _sourced(0.0, f"{where}: inside launch_us"),
        "schedule_us_per_seq": _sourced(0.0, f"{where}: inside launch_us"),
        "launch_us": _sourced((span - sum(builds)) / launches,
                              f"{where}: host span {span / 1e3:.1f} ms less plan builds, over {launches} launches"),
        "kernels_per_layer": _sourced(launches / steps / layers, f"{where}: {launches} launches / {steps:.1f} steps "
                                      f"/ {layers} layers"),
        "kernels_fixed": _sourced(0.0, f"{where}: all counted per layer"),
        "plan_ms": _sourced(statistics.mean(builds) / 1e3 if builds else 0.0,
                            f"{where}: {len(builds)} attention calls over {PLAN_FACTOR:g}x the median "
                            f"({median:.0f} us), their mean excess"),
        "sample_us": _sourced(0.0, f"{where}: inside launch_us"),
        "mask_us_per_seq": _sourced(0.0, f"{where}: inside launch_us"),
        "h2d_GBps": base.h2d_GBps.model_dump(),
        "graph_capture_forwards": base.graph_capture_forwards.model_dump(),
        "graph_launch_us": base.graph_launch_us.model_dump(),
        "cpu_speed": base.cpu_speed.model_dump(),
        # the chip's side of the packed SDPA: not the host's, kept from the base profile
        "packed_sdpa_efficiency": base.packed_sdpa_efficiency and base.packed_sdpa_efficiency.model_dump(),
        "packed_sdpa_efficiency_graphs": (base.packed_sdpa_efficiency_graphs
                                          and base.packed_sdpa_efficiency_graphs.model_dump()),
        "packed_sdpa_lone_graphs": base.packed_sdpa_lone_graphs and base.packed_sdpa_lone_graphs.model_dump(),
    }
    return type(base).model_validate(fields)
