"""Read a Chrome/Kineto trace written by torch.profiler (.json or .json.gz) as a stream.

The trace is parsed event by event (ijson, over yajl2's C parser), so a multi-GB trace costs
memory for the events kept only: each GPU kernel, copy and memset, the CUDA runtime and driver
calls that launch or wait for them, the CPU ops they link to (External id) and the profiler's
step annotations, each as a small record. Past MAX_KEPT records the read stops with one error
line.
"""

from __future__ import annotations

import itertools
import math
import re
from array import array
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import ijson

from hwsim.config.limits import MAX_ABS
from hwsim.errors import ConfigError
from hwsim.io.bounded import JSON_SHAPE, LIMITS, open_binary

MAX_KEPT = 1_000_000             # records kept from one trace: ~600 B each with the parser's buffers
                                 # (benchmarks/ktrace_stream.py), so 0.6 GB at most; a profiled step
                                 # of the per-expert loop at batch 32 (105,000 kernels) keeps ~320,000
MAX_READ = 5 * MAX_KEPT          # events read, kept or not: a real trace has ~1.4 events a kept one
                                 # (flow and metadata events: 19,039 for 13,851 in the harness traces);
                                 # 10^8 empty events in a 3 MB .gz would otherwise take minutes
MAX_EVENT_US = 1e9               # a traced duration (us): 1,000 s, no profiled step's kernel or call
MAX_TS_US = 1e17                 # a timestamp (us): Kineto's are since boot or since the epoch (1.7e15)
MAX_GRID = (2**31 - 1, 65535, 65535)   # CUDA's grid limits
# CTAs a launch and a trace: the engine times a reduction or an Inductor kernel on its traced grid
# (~75 ns of wall a CTA: 2^24 take 1.25 s), so a grid of [10^12, 10^6, 1] ran for hours. The
# largest real launch (gpt-oss-20b at batch 32, validation/data) has 526,080, its trace 3.0e7 in all
MAX_CTAS = 2**24
MAX_TRACE_CTAS = 2**28
MAX_BLOCK = (1024, 1024, 64)     # CUDA's block limits (and 1,024 threads a block)
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
    ctas: int = 0                                           # the device events' CTAs, all together
    synthetic: str | None = None                            # hwsim.ktrace.synthetic's mark, if written by it

    @property
    def kernels(self) -> int:
        return sum(len(v) for v in self.device.values())


class BadEvent(Exception):
    """A field of one trace event that is of the wrong type or out of range (read_trace names
    the trace and the event)."""


def _event_name(ev: dict) -> str:
    name = ev.get("name")
    return f"'{name[:80]}'" if isinstance(name, str) else "unnamed"


def _number(value, what: str, lo: float, hi: float, default: float | None = 0.0) -> float:
    """A finite number in [lo, hi]; `default` when the field is absent (None), unless it is
    None too (a field that must be a number where it is given: ts, dur)."""
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadEvent(f"'{what}' is {type(value).__name__} {str(value)[:40]!r}, not a number")
    if not (lo <= value <= hi):        # NaN fails both
        raise BadEvent(f"'{what}' is {value!r}, outside [{lo:g}, {hi:g}]")
    return float(value)


def _int(value, what: str, lo: float = -1, hi: float = MAX_ABS, default: int = -1) -> int:
    number = _number(value, what, lo, hi, default)
    if number != int(number):
        raise BadEvent(f"'{what}' is {value!r}, not a whole number")
    return int(number)


def _ints(value, what: str, limits: tuple) -> tuple:
    """A grid or block: up to three whole numbers, each within CUDA's limit; absent: 1s."""
    n = len(limits)
    if value is None:
        return (1,) * n
    if not isinstance(value, list) or len(value) > n:
        raise BadEvent(f"'{what}' is {str(value)[:40]!r}, not a list of at most {n} whole numbers")
    dims = tuple(_int(v, what, 0, hi) for v, hi in zip(value, limits))
    return dims + (1,) * (n - len(dims))


def _nested(value, depth: int = 0) -> tuple:
    """Input Dims as tuples: [] (a scalar), [d0, d1] (a tensor), [[..], [..]] (a tensor list).
    Sizes are whole numbers of at most MAX_ABS (a size of -1 marks no tensor)."""
    if isinstance(value, list):
        if depth > 3:
            raise BadEvent("'Input Dims' nests more than 3 lists deep")
        return tuple(_nested(v, depth + 1) for v in value)
    if value is None or isinstance(value, str):       # a non-tensor argument: kept as recorded
        return value
    return _int(value, "Input Dims", -1, MAX_ABS)


def _strings(value, what: str) -> tuple:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadEvent(f"'{what}' is {str(value)[:40]!r}, not a list of strings")
    return tuple(value)


@contextmanager
def open_trace(path: Path, key: str = KEY):
    """The trace's bytes (.json, or .json.gz told apart by its first bytes, inflated), through
    hwsim's bounded reader: a regular file, its size and what it inflates to bounded
    (LIMITS["kernel trace"])."""
    limit = LIMITS["kernel trace"]
    with open_binary(path, limit, key) as head:
        gzipped = head.read(2) == b"\x1f\x8b"
    with open_binary(path, limit, key, gunzip=gzipped, shape=JSON_SHAPE) as stream:
        yield stream


def _head(path: Path) -> tuple[str | None, str | None]:
    """deviceProperties[0].name and hwsim's own mark of a synthetic trace (hwsim.ktrace.synthetic),
    read from the trace's head (both are written before the events)."""
    gpu = synthetic = None
    try:
        with open_trace(path) as stream:
            for prefix, event, value in itertools.islice(ijson.parse(stream), 20_000):
                if prefix == "deviceProperties.item.name" and gpu is None:
                    gpu = str(value)
                elif prefix == "hwsim_synthetic" and event == "string":
                    synthetic = value[:200]
                elif prefix == "traceEvents":
                    break
    except (ijson.JSONError, ConfigError):      # read_trace has said what is wrong with the file
        pass
    return gpu, synthetic


def read_trace(path: Path, key: str = KEY, simulated: bool = True) -> Trace:
    """The trace's kernels, copies, host calls, linked ops and step windows; ConfigError for
    what is not a readable Kineto trace. A `simulated` trace's kernels are timed one by one (the
    kernel-trace path), so their CTAs are bounded; a reader that only counts them (the engine
    host's: a whole burst) is not."""
    path = Path(path)
    trace = Trace(str(path), None)
    kept = 0
    try:
        with open_trace(path, key) as stream:
            for i, ev in enumerate(ijson.items(stream, "traceEvents.item", use_float=True)):
                if i >= MAX_READ:
                    raise ConfigError(f"trace holds more than {MAX_READ:,} events: profile one step "
                                      f"(torch.profiler.schedule(active=1))", file=str(path), key=key)
                if not isinstance(ev, dict) or ev.get("ph") != "X":
                    continue
                try:
                    kept += _keep(trace, ev, simulated)
                except BadEvent as bad:
                    raise ConfigError(f"traceEvents[{i}] ({_event_name(ev)}): {bad}", file=str(path),
                                      key=key) from None
                if kept > MAX_KEPT:
                    raise ConfigError(f"trace holds more than {MAX_KEPT:,} kernels, host calls and ops: "
                                      f"profile one step (torch.profiler.schedule(active=1))",
                                      file=str(path), key=key)
    except ijson.IncompleteJSONError as e:
        raise ConfigError(f"trace is truncated or not JSON ({_first_line(e)})", file=str(path), key=key) from None
    except ijson.JSONError as e:
        raise ConfigError(f"trace is not JSON ({_first_line(e)})", file=str(path), key=key) from None
    trace.gpu, trace.synthetic = _head(path)
    trace.calls.sort(key=lambda c: c.ts)
    trace.steps.sort()
    trace.marks = {tid: array("d", sorted(ts)) for tid, ts in trace.marks.items()}
    return trace


def _tid(ev: dict) -> int:
    return int(ev.get("tid", 0)) if str(ev.get("tid", 0)).isdigit() else 0


def _first_line(e: Exception) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:120]


def _keep(trace: Trace, ev: dict, simulated: bool = True) -> int:
    """Keep one complete event ('X') of the trace if it is one hwsim reads; 1 if kept. BadEvent
    for a field of the wrong type or out of range."""
    cat, name = ev.get("cat", ""), str(ev.get("name", ""))
    args = ev.get("args") or {}
    if not isinstance(cat, str):
        raise BadEvent(f"'cat' is {str(cat)[:40]!r}, not a string")
    if not isinstance(args, dict):
        raise BadEvent(f"'args' is {str(args)[:40]!r}, not a mapping")
    ts = _number(ev.get("ts", 0.0), "ts", -MAX_TS_US, MAX_TS_US, None)
    dur = _number(ev.get("dur", 0.0), "dur", 0.0, MAX_EVENT_US, None)
    marked = cat in HOST_CATS         # what the profiler spent its own time recording (counted
    if marked:                        # against MAX_KEPT: a mark is kept too)
        trace.marks.setdefault(_tid(ev), array("d")).append(ts)
    ext = _int(args.get("External id", args.get("external id")), "External id")   # older Kineto: lower case
    if cat in DEVICE_CATS:
        corr = _int(args.get("correlation"), "correlation")
        event = _device_event(DEVICE_CATS[cat], name, ts, dur, corr, ext, args)
        trace.ctas += math.prod(event.grid)
        if simulated and trace.ctas > MAX_TRACE_CTAS:
            raise BadEvent(f"the trace's kernels launch more than {MAX_TRACE_CTAS:,} CTAs in all (the "
                           f"simulation times each): profile one step")
        trace.device.setdefault(corr, []).append(event)
        return 1
    if cat in ("cuda_runtime", "cuda_driver", "Runtime", "Driver"):
        if name in HOST_CALLS:
            trace.calls.append(HostCall(name, ts, dur, _int(args.get("correlation"), "correlation"), ext, _tid(ev)))
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
        trace.ops[ext] = CpuOp(name, ts, dur, _nested(dims or []), _strings(args.get("Input type"), "Input type"))
        return 1
    return int(marked)


def _device_event(kind: str, name: str, ts: float, dur: float, corr: int, ext: int, args: dict) -> DeviceEvent:
    grid = _ints(args.get("grid"), "grid", MAX_GRID)
    if math.prod(grid) > MAX_CTAS:
        raise BadEvent(f"'grid' {list(grid)} launches {math.prod(grid):,} CTAs (at most {MAX_CTAS:,} a "
                       f"launch: the simulation times each)")
    block = _ints(args.get("block"), "block", MAX_BLOCK)
    if math.prod(block) > 1024:
        raise BadEvent(f"'block' {list(block)} has more than 1,024 threads")
    return DeviceEvent(kind, name, ts, dur, corr, ext, _int(args.get("stream"), "stream", -1, 2**63, 0), grid, block,
                       _int(args.get("registers per thread"), "registers per thread", 0, 65536, 0),
                       _int(args.get("shared memory"), "shared memory", 0, 2**31, 0),
                       _int(args.get("bytes"), "bytes", 0, MAX_ABS, 0))
