"""Issue 47, kernel traces: a small file costs bounded time and memory, and a field of the wrong
type or a nonsense number is one line naming the trace and the event (exit 2), never an
internal error, a quadratic run or a silently wrong answer."""

from __future__ import annotations

import copy
import gzip
import json
import subprocess
import sys
import time

import pytest

from hwsim.config.load import load_scenario
from hwsim.errors import ConfigError
from hwsim.ktrace import reader, synthetic
from hwsim.pipeline import run_config

LAUNCH = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "tid": 1, "ts": 10.0, "dur": 5.0,
          "args": {"External id": 1, "correlation": 7}}
KERNEL = {"ph": "X", "cat": "kernel", "name": "void vectorized_elementwise_kernel<4>()", "ts": 20.0,
          "dur": 3.0, "args": {"External id": 1, "correlation": 7, "stream": 7, "grid": [128, 1, 1],
                               "block": [128, 1, 1], "registers per thread": 32, "shared memory": 0}}
OP = {"ph": "X", "cat": "cpu_op", "name": "aten::add", "tid": 1, "ts": 8.0, "dur": 20.0,
      "args": {"External id": 1, "Input Dims": [[1, 4096], [1, 4096]], "Input type": ["float", "float"]}}
COPY = {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 30.0, "dur": 1.0,
        "args": {"correlation": 7, "bytes": 64}}


def _write(tmp_path, events, name="t.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _with(event, path, value):
    ev = copy.deepcopy(event)
    node = ev
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return ev


WRONG_TYPES = [  # item 7: each field of the wrong type
    (KERNEL, ("args",), [1, 2]), (KERNEL, ("args",), "x"), (KERNEL, ("ts",), "12"), (KERNEL, ("ts",), None),
    (KERNEL, ("dur",), [1]), (KERNEL, ("args", "grid"), ["a", "b", "c"]), (KERNEL, ("args", "correlation"), "x"),
    (LAUNCH, ("args", "External id"), {"a": 1}), (KERNEL, ("args", "registers per thread"), "many"),
    (OP, ("args", "Input Dims"), [["a", {}]]), (OP, ("args", "Input type"), "float"), (KERNEL, ("cat",), ["kernel"]),
]
NONSENSE = [  # item 6: numbers no trace holds
    (KERNEL, ("dur",), -993.8), (KERNEL, ("dur",), 1e300), (LAUNCH, ("ts",), 1e300),
    (OP, ("args", "Input Dims"), [[-5, 4096], [1, 4096]]), (OP, ("args", "Input Dims"), [[10**16, 1]]),
    (COPY, ("args", "bytes"), 1e18), (COPY, ("args", "bytes"), -1e18), (KERNEL, ("args", "grid"), [10**12, 10**6, 1]),
    (KERNEL, ("args", "grid"), [2**31, 65535, 65535]), (KERNEL, ("args", "block"), [2048, 1, 1]),
    (KERNEL, ("args", "grid"), [2**24 + 1, 1, 1]),        # item 5: a legal grid the engine takes minutes on
    (KERNEL, ("args", "grid"), [1.5, 1, 1]),
]


@pytest.mark.parametrize("event, path, value", WRONG_TYPES + NONSENSE)
def test_a_bad_field_names_the_trace_and_the_event(tmp_path, event, path, value):
    events = [OP, LAUNCH, KERNEL, COPY]
    i = events.index(event)
    events[i] = _with(event, path, value)
    trace = _write(tmp_path, events)
    with pytest.raises(ConfigError) as info:
        reader.read_trace(trace)
    message = str(info.value)
    assert str(trace) in message and f"traceEvents[{i}]" in message and path[-1] in message
    assert len(message.splitlines()) == 1


def test_a_bad_field_exits_2_on_one_line(tmp_path):
    trace = _write(tmp_path, [OP, LAUNCH, _with(KERNEL, ("args",), [1, 2])], "bad.json")
    p = subprocess.run([sys.executable, "-m", "hwsim.cli", "run", "--out", str(tmp_path / "out"), "--set",
                        "workload.decode_steps=1", "--set", f"workload.kernel_trace.path={trace}", "--set",
                        "workload.kernel_trace.batch_size=1", "--set", "workload.kernel_trace.context_tokens=64"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "bad.json" in p.stderr and "traceEvents[2]" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_events_read_are_bounded_not_only_those_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "MAX_READ", 1000)
    path = tmp_path / "empty.json.gz"
    path.write_bytes(gzip.compress(b'{"traceEvents": [' + b",".join([b"{}"] * 5000) + b"]}"))
    with pytest.raises(ConfigError, match="more than 1,000 events"):
        reader.read_trace(path)


def _strip_correlations(doc: dict, shared: int | None) -> dict:
    out = copy.deepcopy(doc)
    for e in out["traceEvents"]:
        args = e.get("args") or {}
        if "correlation" in args:
            if shared is None:
                del args["correlation"]
            else:
                args["correlation"] = shared
    return out


def _run(path, batch=1, context=128, model="llama-3.1-8b"):
    cfg = load_scenario(None, ["workload.decode_steps=1", f"model={model}", "runtime.launch=eager",
                               f"workload.kernel_trace.path={path}",
                               f"workload.kernel_trace.batch_size={batch}",
                               f"workload.kernel_trace.context_tokens={context}",
                               f"workload.batch_size={batch}", f"workload.context_tokens={context}"])
    return run_config(cfg, intervals=False).summary


@pytest.mark.parametrize("shared", [None, 12345])
def test_a_trace_without_distinct_correlation_ids_issues_each_kernel_once(tmp_path, shared):
    doc = synthetic.decode_step("llama-3.1-8b", 1, 128, layers=2)
    kernels = sum(e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") for e in doc["traceEvents"])
    synthetic.write(tmp_path / "ok.json.gz", doc)
    synthetic.write(tmp_path / "bad.json.gz", _strip_correlations(doc, shared))
    good, t0 = _run(tmp_path / "ok.json.gz"), time.monotonic()
    bad = _run(tmp_path / "bad.json.gz")
    assert bad["trace"]["kernels"] == good["trace"]["kernels"] == kernels
    assert bad["itl_ms"]["p50"] < 2 * good["itl_ms"]["p50"] and time.monotonic() - t0 < 30


@pytest.mark.parametrize("body, words", [
    (b"[" * 100_000 + b"]" * 100_000, "nests deeper than 64"),             # item 4: 8 KB a level in ijson
    (b'"' + b"a" * 3_000_000 + b'"', "string longer than"),                # yajl re-scans a long string
    (b'"' + b'\\"' * 1_500_000 + b'"', "string longer than"),              # one of escaped quotes
], ids=["deep", "long string", "escaped quotes"])
def test_deep_nesting_and_huge_strings_are_refused_while_streaming(tmp_path, body, words):
    path = tmp_path / "bomb.json.gz"
    path.write_bytes(gzip.compress(b'{"x": ' + body + b', "traceEvents": []}'))
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match=words) as info:
        reader.read_trace(path)
    assert str(path) in str(info.value) and time.monotonic() - t0 < 5


class _Chunks:
    """A raw stream handing out `data` a few bytes a read (strings and escapes split anywhere)."""

    def __init__(self, data: bytes, size: int):
        self.data, self.size = data, size

    def readinto(self, buffer) -> int:
        n = min(self.size, len(buffer), len(self.data))
        buffer[:n], self.data = self.data[:n], self.data[n:]
        return n

    def close(self):
        pass


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 4096])
def test_the_json_shape_guard_reads_brackets_and_escapes_in_strings_as_text(tmp_path, size):
    import io

    from hwsim.io.bounded import LIMITS, JsonShape, _JsonShapeRaw
    doc = {"traceEvents": [{"name": 'void k<[[{{"\\\\"}}]]>(' * 20 + "\\", "args": {"a": [[[1]]]}}] * 50}
    data = json.dumps(doc).encode()
    for depth, ok in ((7, True), (6, False)):   # {traceEvents: [{args: {a: [[[: 7 deep
        raw = _JsonShapeRaw(_Chunks(data, size), tmp_path, LIMITS["kernel trace"], None,
                            JsonShape(max_depth=depth, max_string=10_000))
        reader_ = io.BufferedReader(raw, buffer_size=size)
        if ok:
            assert json.loads(reader_.read()) == doc
        else:
            with pytest.raises(ConfigError, match="nests deeper"):
                reader_.read()


def test_the_ctas_of_a_whole_trace_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "MAX_TRACE_CTAS", 200)
    with pytest.raises(ConfigError, match="more than 200 CTAs in all"):
        reader.read_trace(_write(tmp_path, [OP, LAUNCH, KERNEL, _with(KERNEL, ("ts",), 40.0)]))


def test_a_reader_that_only_counts_kernels_reads_a_whole_burst(tmp_path, monkeypatch):
    """The engine host's reader (a real 16-request burst of Qwen3 launches 2.7e8+ CTAs) counts
    launches and times no kernel: the bound of the kernel-trace path is not its."""
    monkeypatch.setattr(reader, "MAX_TRACE_CTAS", 200)
    trace = reader.read_trace(_write(tmp_path, [OP, LAUNCH, KERNEL, _with(KERNEL, ("ts",), 40.0)]), simulated=False)
    assert trace.ctas > 200 and sum(len(v) for v in trace.device.values()) == 2


@pytest.mark.parametrize("op, dims", [
    ("aten::mm", [[10**12, 4096], [4096, 6144]]),           # item 6: 10^12 rows at batch 1
    ("aten::mul", [[1, 1, 10**13], [1, 1, 10**13]]),         # 4 x 10^13 bytes an element-wise kernel
])
def test_a_kernel_larger_than_the_declared_point_is_refused(tmp_path, op, dims):
    doc = synthetic.decode_step("llama-3.1-8b", 1, 128, layers=2)
    for e in doc["traceEvents"]:
        if e.get("cat") == "cpu_op" and e["name"] == op:
            e["args"]["Input Dims"] = dims
    synthetic.write(tmp_path / "huge.json.gz", doc)
    with pytest.raises(ConfigError, match="is workload.kernel_trace's point the traced one") as info:
        _run(tmp_path / "huge.json.gz")
    assert "huge.json.gz" in str(info.value) and "batch 1" in str(info.value)


def test_a_synthetic_trace_says_so():
    path = "scenarios/traces/kernels/synthetic-llama-3.1-8b-b1-l1024.json.gz"
    s = _run(path, batch=1, context=1024)
    assert any("SYNTHETIC" in w and path in w for w in s["warnings"])


def _grids(tmp_path, n, grid):
    """n kernels of `grid`, each launched by its own call."""
    events = [OP]
    for i in range(n):
        events += [_with(_with(LAUNCH, ("args", "correlation"), 100 + i), ("ts",), 10.0 + 10 * i),
                   _with(_with(_with(KERNEL, ("args", "correlation"), 100 + i), ("ts",), 12.0 + 10 * i),
                         ("args", "grid"), grid)]
    return _write(tmp_path, events, "grids.json")


def test_the_cost_estimate_prices_a_kernel_trace_by_its_kernels_and_grids(tmp_path):
    """Item 5: a trace of 15 legal launches of 2^24 CTAs (2.5e8: ~19 s of wall a pass) over 100
    steps is refused before it runs, naming the trace's key; it was priced as the model's 2
    tiny passes and ran."""
    from hwsim.config.files import load_model
    from hwsim.cost import S_PER_CTA, check_cost, estimate

    path = _grids(tmp_path, 15, [2**24, 1, 1])
    cfg = load_scenario(None, [f"workload.kernel_trace.path={path}", "workload.kernel_trace.batch_size=1",
                               "workload.kernel_trace.context_tokens=64", "workload.decode_steps=100"])
    model = load_model(cfg.model)
    cost = estimate(cfg, model)
    assert cost.kernels_per_pass == 15 and cost.ctas_per_pass == 15 * 2**24
    assert cost.wall_s >= 100 * 15 * 2**24 * S_PER_CTA
    with pytest.raises(ConfigError, match="launching 2.52e[+]08 CTAs") as info:
        check_cost(cfg, model)
    assert "workload.kernel_trace.path" in str(info.value)
    small = load_scenario(None, [f"workload.kernel_trace.path={_grids(tmp_path, 3, [128, 1, 1])}",
                                 "workload.kernel_trace.batch_size=1", "workload.kernel_trace.context_tokens=64"])
    assert estimate(small, model).wall_s < 1.0                   # a small trace stays cheap
