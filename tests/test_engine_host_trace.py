"""An engine host profile read off a profiled burst: plan builds, launches per step and per
launch host time, from a small synthetic Kineto trace whose answers are known."""

import json

import pytest

from hwsim.errors import ConfigError
from hwsim.ktrace.host import load_host
from hwsim.serving.engine_host import load_engine_host
from hwsim.serving.engine_host_trace import profile_from_trace


def _burst(path, steps=4, layers=2, kernels_per_layer=5, plan_every=2, plan_us=40_000.0, call_us=100.0,
           nested=False, queries=None):
    """`steps` steps of `layers` layers; each layer one attention call (a plan build every
    `plan_every` steps) and `kernels_per_layer` launches; the host busy without gaps. `nested`: the
    call recorded as torch records it, SDPA's op around the cuDNN backend's around its forward.
    `queries`: each step's query tokens, recorded as the call's shapes (record_shapes)."""
    ev, t, ext, corr = [], 0.0, 0, 0
    for s in range(steps):
        for layer in range(layers):
            for k in range(kernels_per_layer):
                ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": t, "dur": 40.0,
                           "args": {"External id": ext}})
                ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": t + 30, "dur": 5.0,
                           "args": {"correlation": corr, "External id": ext}})
                t, ext, corr = t + 40.0, ext + 1, corr + 1
            dur = call_us + (plan_us if s % plan_every == 0 and layer == 0 else 0.0)
            names = ["aten::scaled_dot_product_attention", "aten::_scaled_dot_product_cudnn_attention",
                     "aten::_cudnn_attention_forward"] if nested else ["aten::_cudnn_attention_forward"]
            shapes = {"Input Dims": [[1, 4, queries[s], 128]] * 3} if queries else {}
            for name in names:
                ev.append({"ph": "X", "cat": "cpu_op", "name": name, "ts": t, "dur": dur,
                           "args": {"External id": ext, **shapes}})
                ext += 1
            t += dur
    path.write_text(json.dumps({"traceEvents": ev}))
    return t


def test_profile_from_a_burst(tmp_path):
    p = tmp_path / "burst.json"
    span = _burst(p)
    base = load_engine_host("hf-transformers-h200")
    prof = profile_from_trace(str(p), base, layers=2)
    assert prof.plan_ms.value == pytest.approx(40.0)                  # 2 builds of 40 ms over the 100 us call
    assert prof.kernels_per_layer.value == pytest.approx(5)           # 40 launches / 4 steps / 2 layers
    # the profiler's own time: every host event recorded on the launching thread (4 steps x 2 layers x
    # (5 ops + 5 launch calls + 1 attention call)), at the kernel-trace path's per-event cost
    event_us = load_host("as-traced").profiler_event_us.value
    assert event_us > 0
    # and the base profile's per-step work (no shapes recorded: no sequences counted)
    assert prof.launch_us.value == pytest.approx((span - 2 * 40_000 - 88 * event_us - 4 * base.schedule_us.value) / 40)
    assert prof.mask_us_per_seq == base.mask_us_per_seq and prof.graph_launch_us == base.graph_launch_us


def test_the_bursts_sequences_keep_the_base_per_sequence_cost(tmp_path):
    """A prefill chunk of 900 query tokens then three decode steps of 6 sequences: 6 x 4 sequences
    (the chunk's tokens counted as the median step's), their mask and input building taken off."""
    p = tmp_path / "shaped.json"
    span = _burst(p, queries=[900, 6, 6, 6], kernels_per_layer=200)
    base = load_engine_host("hf-transformers-h200")
    prof = profile_from_trace(str(p), base, layers=2)
    event_us = load_host("as-traced").profiler_event_us.value
    engine = 4 * base.schedule_us.value + 24 * (base.schedule_us_per_seq.value + base.mask_us_per_seq.value)
    recorded = 4 * 2 * (2 * 200 + 1)
    assert prof.launch_us.value == pytest.approx((span - 2 * 40_000 - recorded * event_us - engine) / 1600)


def test_a_burst_shorter_than_its_engine_work_is_refused(tmp_path):
    p = tmp_path / "short.json"
    _burst(p, queries=[900, 6, 6, 6])           # 2.4 ms of host beside 19 ms of per-sequence work
    with pytest.raises(ConfigError, match="less host time"):
        profile_from_trace(str(p), load_engine_host("hf-transformers-h200"), layers=2)


def test_a_trace_without_launches_is_refused(tmp_path):
    p = tmp_path / "cpu.json"
    p.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 1,
                                              "args": {"External id": 1}}]}))
    with pytest.raises(ConfigError, match="no kernel launches"):
        profile_from_trace(str(p), load_engine_host("hf-transformers-h200"), layers=2)


def test_nested_sdpa_ops_count_one_forward(tmp_path):
    """A traced SDPA call records its op, the backend's and cuDNN's inner one, nested: one forward."""
    p = tmp_path / "nested.json"
    _burst(p, nested=True)
    prof = profile_from_trace(str(p), load_engine_host("hf-transformers-h200"), layers=2)
    assert prof.kernels_per_layer.value == pytest.approx(5)           # 4 forwards, not 12
    assert prof.plan_ms.value == pytest.approx(40.0)


def test_a_graphs_burst_gives_its_replay_call(tmp_path):
    """Graph replays: each call's host time less the profiler's record of the kernels it ran."""
    p = tmp_path / "graphs.json"
    _burst(p, steps=1, plan_every=99)                 # one eager forward: the capture
    ev = json.loads(p.read_text())["traceEvents"]
    t0 = max(e["ts"] + e["dur"] for e in ev)
    for r in range(3):
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": t0 + 1000 * r, "dur": 500.0,
                   "args": {"correlation": 10_000 + r}})
        ev += [{"ph": "X", "cat": "kernel", "name": "k", "ts": t0 + 1000 * r + 10 * k, "dur": 5.0,
                "args": {"correlation": 10_000 + r, "grid": [1, 1, 1], "block": [128, 1, 1]}} for k in range(100)]
    p.write_text(json.dumps({"traceEvents": ev}))
    base = load_engine_host("hf-transformers-h200")
    prof = profile_from_trace(str(p), base, layers=2)
    event_us = load_host("as-traced").profiler_event_us.value
    assert prof.graph_launch_us.value == pytest.approx(500.0 - 100 * event_us)
    assert prof.kernels_per_layer.value == pytest.approx(5)
    assert prof.launch_us == base.launch_us and prof.plan_ms == base.plan_ms
