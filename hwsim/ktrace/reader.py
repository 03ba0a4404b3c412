"""Read a Chrome/Kineto trace written by torch.profiler (.json or .json.gz) as a stream.

The trace is parsed event by event (ijson, over yajl2's C parser), so a multi-GB trace costs
memory for the events kept only: each GPU kernel, copy and memset, the CUDA runtime and driver
calls that launch or wait for them, the CPU ops they link to (External id) and the profiler's
step annotations, each as a small record. Past MAX_KEPT records the read stops with one error
line.
"""

from __future__ import annotations

import itertools
import re
from array import array
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import ijson

from hwsim.errors import ConfigError
from hwsim.io.bounded import LIMITS, open_binary

MAX_KEPT = 1_000_000             # records kept from one trace: ~600 B each with the parser's buffers
                                 # (benchmarks/ktrace_stream.py), so 0.6 GB at most; a profiled step
                                 # of the per-expert loop at batch 32 (105,000 kernels) keeps ~320,000
KEY = "workload.kernel_trace.path"
LAUNCHES = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
            "cudaLaunchCooperativeKernel", "cudaLaunchCooperativeKernelMultiDevice"}
GRAPH_LAUNCHES = {"cudaGraphLaunch", "cuGraphLaunch"}
COPIES = {"cudaMemcpyAsync", "cudaMemcpy", "cudaMemcpy2DAsync", "cudaMemsetAsync", "cudaMemset",
          "cuMemcpyAsync", "cuMemcpyDtoHAsync_v2", "cuMemsetD8Async", "cuMemsetD32Async"}
# calls whose host time is a wait for the device (its duration there is the device's, not the host's)
SYNCS = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
         "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize"}
HOST_CALLS = LAUNCHES | GRAPH_LAUNCHES | COPIES | SYNCS
# the caching allocator's calls: part of the host's CPU time as traced (reported, not rescaled)
ALLOCS = {"cudaMalloc", "cudaFree", "cuMemAlloc_v2", "cuMemFree_v2", "cudaMallocAsync", "cudaFreeAsync"}
# host-side events: each one cost the recorded host the profiler's own time (host.profiler_event_us)
HOST_CATS = {"cpu_op", "operator", "cuda_runtime", "cuda_driver", "Runtime", "Driver", "user_annotation",
             "python_function"}
DEVICE_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset",
               "Kernel": "kernel", "Memcpy": "memcpy", "Memset": "memset"}
STEP_NAME = re.compile(r"ProfilerStep#(\d+)")


@dataclass(frozen=True, slots=True)
class CpuOp:
    name: str
    ts: float                     # microseconds, the trace's clock
    dur: float
    dims: tuple                   # "Input Dims": one tuple per input (a tensor list: a tuple of them)
    types: tuple                  # "Input type"


@dataclass(frozen=True, slots=True)
class HostCall:
    name: str
    ts: float
    dur: float
    correlation: int
    ext_id: int
    tid: int


@dataclass(frozen=True, slots=True)
class DeviceEvent:
    kind: str                     # kernel, memcpy, memset
    name: str
    ts: float
    dur: float
    correlation: int
    ext_id: int
    stream: int
    grid: tuple[int, int, int] = (0, 0, 0)
    block: tuple[int, int, int] = (0, 0, 0)
    registers: int = 0
    shared_memory: int = 0
    nbytes: int = 0               # copies and memsets


@dataclass
class Trace:
    path: str
    gpu: str | None                                      # deviceProperties' name, if recorded
    ops: dict[int, CpuOp] = field(default_factory=dict)  # External id -> the op
    calls: list[HostCall] = field(default_factory=list)  # host calls, in time order
    device: dict[int, list[DeviceEvent]] = field(default_factory=dict)   # correlation -> its events
    steps: list[tuple[float, float]] = field(default_factory=list)       # ProfilerStep windows (us)
    annotations: dict[str, list[tuple[float, float]]] = field(default_factory=dict)   # user annotations
    allocs: list[tuple[float, float]] = field(default_factory=list)      # allocator calls (ts, dur, us)
    marks: dict[int, array] = field(default_factory=dict)   # thread -> start of every host event the
    has_shapes: bool = False                                # profiler recorded on it (sorted, us)

    @property
    def kernels(self) -> int:
        return sum(len(v) for v in self.device.values())


def _ints(value, n: int = 3) -> tuple:
    if isinstance(value, (list, tuple)):
        return tuple(int(v) for v in value[:n]) + (1,) * (n - len(value[:n]))
    return (1,) * n


def _nested(value) -> tuple:
    """Input Dims as tuples: [] (a scalar), [d0, d1] (a tensor), [[..], [..]] (a tensor list)."""
    if isinstance(value, list):
        return tuple(_nested(v) for v in value)
    return int(value) if isinstance(value, (int, float)) else value


@contextmanager
def open_trace(path: Path, key: str = KEY):
    """The trace's bytes (.json, or .json.gz told apart by its first bytes, inflated), through
    hwsim's bounded reader: a regular file, its size and what it inflates to bounded
    (LIMITS["kernel trace"])."""
    limit = LIMITS["kernel trace"]
    with open_binary(path, limit, key) as head:
        gzipped = head.read(2) == b"\x1f\x8b"
    with open_binary(path, limit, key, gunzip=gzipped) as stream:
        yield stream


def _gpu_name(path: Path) -> str | None:
    """deviceProperties[0].name, read from the trace's head (Kineto writes it before the events)."""
    try:
        with open_trace(path) as stream:
            for prefix, event, value in itertools.islice(ijson.parse(stream), 20_000):
                if prefix == "deviceProperties.item.name":
                    return str(value)
                if prefix == "traceEvents":
                    return None
    except (ijson.JSONError, ConfigError):      # read_trace has said what is wrong with the file
        return None
    return None


def read_trace(path: Path, key: str = KEY) -> Trace:
    """The trace's kernels, copies, host calls, linked ops and step windows; ConfigError for
    what is not a readable Kineto trace."""
    path = Path(path)
    trace = Trace(str(path), None)
    kept = 0
    try:
        with open_trace(path, key) as stream:
            for ev in ijson.items(stream, "traceEvents.item", use_float=True):
                if not isinstance(ev, dict) or ev.get("ph") != "X":
                    continue
                kept += _keep(trace, ev)
                if kept > MAX_KEPT:
                    raise ConfigError(f"trace holds more than {MAX_KEPT:,} kernels, host calls and ops: "
                                      f"profile one step (torch.profiler.schedule(active=1))",
                                      file=str(path), key=key)
    except ijson.IncompleteJSONError as e:
        raise ConfigError(f"trace is truncated or not JSON ({_first_line(e)})", file=str(path), key=key) from None
    except ijson.JSONError as e:
        raise ConfigError(f"trace is not JSON ({_first_line(e)})", file=str(path), key=key) from None
    trace.gpu = _gpu_name(path)
    trace.calls.sort(key=lambda c: c.ts)
    trace.steps.sort()
    trace.marks = {tid: array("d", sorted(ts)) for tid, ts in trace.marks.items()}
    return trace


def _tid(ev: dict) -> int:
    return int(ev.get("tid", 0)) if str(ev.get("tid", 0)).isdigit() else 0


def _first_line(e: Exception) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:120]


def _keep(trace: Trace, ev: dict) -> int:
    """Keep one complete event ('X') of the trace if it is one hwsim reads; 1 if kept."""
    cat, name = ev.get("cat", ""), str(ev.get("name", ""))
    args = ev.get("args") or {}
    ts, dur = float(ev.get("ts", 0.0)), float(ev.get("dur", 0.0))
    marked = cat in HOST_CATS         # what the profiler spent its own time recording (counted
    if marked:                        # against MAX_KEPT: a mark is kept too)
        trace.marks.setdefault(_tid(ev), array("d")).append(ts)
    ext = int(args.get("External id", args.get("external id", -1)))   # older Kineto: lower case
    if cat in DEVICE_CATS:
        corr = int(args.get("correlation", -1))
        trace.device.setdefault(corr, []).append(DeviceEvent(
            DEVICE_CATS[cat], name, ts, dur, corr, ext, int(args.get("stream", 0)),
            _ints(args.get("grid")), _ints(args.get("block")), int(args.get("registers per thread", 0)),
            int(args.get("shared memory", 0)), int(args.get("bytes", 0))))
        return 1
    if cat in ("cuda_runtime", "cuda_driver", "Runtime", "Driver"):
        if name in HOST_CALLS:
            trace.calls.append(HostCall(name, ts, dur, int(args.get("correlation", -1)), ext, _tid(ev)))
            return 1
        if name in ALLOCS:
            trace.allocs.append((ts, dur))
            return 1
        return int(marked)
    if STEP_NAME.fullmatch(name) and cat in ("user_annotation", "cpu_op", "python_function"):
        trace.steps.append((ts, ts + dur))
        return 1
    if cat == "user_annotation" and dur > 0:      # an engine's own step marks (vLLM, SGLang)
        trace.annotations.setdefault(name, []).append((ts, ts + dur))
        return 1
    if cat in ("cpu_op", "operator") and ext >= 0:
        dims = args.get("Input Dims")
        if dims is not None:
            trace.has_shapes = True
        trace.ops[ext] = CpuOp(name, ts, dur, _nested(dims or []), tuple(args.get("Input type") or ()))
        return 1
    return int(marked)
