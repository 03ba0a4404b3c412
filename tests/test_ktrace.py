"""Imported kernel traces (hwsim/ktrace, docs/traces.md): the device side is timed from shapes,
the host is simulated, points are retargeted, bad traces are refused in one line. The traces
here are SYNTHETIC (hwsim.ktrace.synthetic): they test the mechanism, never accuracy."""

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from hwsim.config.load import load_scenario
from hwsim.errors import ConfigError
from hwsim.ktrace import reader, synthetic
from hwsim.model import ir
from hwsim.pipeline import run_config

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validation"))
from trace_store import trace_path  # noqa: E402  (the measured traces are archived)

LAYERS = 2


def wipe_durations(trace: dict) -> dict:
    """The same trace with every device event's duration 0 (what the simulation must not read)."""
    out = dict(trace)
    out["traceEvents"] = [{**e, "dur": 0.0} if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") else e
                          for e in trace["traceEvents"]]
    return out


def _trace(tmp_path, name="t.json.gz", batch=8, context=4096, model="mixtral-8x7b", **kw):
    path = tmp_path / name
    synthetic.write(path, synthetic.decode_step(model, batch, context, layers=LAYERS, **kw))
    return path


def _run(path, *sets, batch=8, context=4096, model="mixtral-8x7b"):
    """The default scenario (which sets its own batch, context and launch mode: the trace's point
    and its own host here, unless `sets` move them) with the trace as its schedule."""
    cfg = load_scenario(None, ["workload.decode_steps=1", f"model={model}", "runtime.launch=eager",
                               f"workload.kernel_trace.path={path}",
                               f"workload.kernel_trace.batch_size={batch}",
                               f"workload.kernel_trace.context_tokens={context}",
                               f"workload.batch_size={batch}", f"workload.context_tokens={context}", *sets])
    return run_config(cfg, intervals=False).summary


def test_wiped_kernel_durations_predict_the_same(tmp_path):
    doc = synthetic.decode_step("mixtral-8x7b", 8, 4096, layers=LAYERS)
    synthetic.write(tmp_path / "a.json.gz", doc)
    synthetic.write(tmp_path / "wiped.json.gz", wipe_durations(doc))
    a, w = _run(tmp_path / "a.json.gz"), _run(tmp_path / "wiped.json.gz")
    assert w["trace"]["traced_device_busy_ms"] == 0 < a["trace"]["traced_device_busy_ms"]
    assert w["itl_ms"]["mean"] == pytest.approx(a["itl_ms"]["mean"], rel=0.01)
    assert w["device_busy_ms"] == pytest.approx(a["device_busy_ms"], rel=0.01)


def test_a_trace_retargeted_matches_one_recorded_at_that_point(tmp_path):
    """Batch 8, context 4096 predicted at batch 32, context 2048 times the same device work as a
    trace recorded at batch 32, context 2048 (the rules rescale rows, attention and cat bytes)."""
    moved = _run(_trace(tmp_path, "b8.json.gz"), "workload.batch_size=32", "workload.context_tokens=2048")
    native = _run(_trace(tmp_path, "b32.json.gz", batch=32, context=2048), batch=32, context=2048)
    same = _run(_trace(tmp_path, "b8b.json.gz"))
    assert moved["trace"]["not_rescaled"] <= 1          # the .item() copy: bytes fixed
    assert moved["device_busy_ms"] == pytest.approx(native["device_busy_ms"], rel=0.01)
    # the KV cache's torch.cat copies twice the bytes at 32 x 2048 as at 8 x 4096
    assert moved["breakdown_ms"]["activation_io"] > 1.5 * same["breakdown_ms"]["activation_io"]


def test_the_host_is_on_the_critical_path_unless_graph_replays(tmp_path):
    path = _trace(tmp_path, batch=1, context=128, model="llama-3.1-8b")
    eager = _run(path, batch=1, context=128, model="llama-3.1-8b")
    graph = _run(path, "runtime.launch=graph", batch=1, context=128, model="llama-3.1-8b")
    assert eager["launch"] == "eager" and graph["launch"] == "graph"
    h = eager["host"]
    assert h["syncs"] == 1 and h["launches"] == eager["trace"]["kernels"]
    # host-bound: the step is at least the host's work, and the device idles on it
    assert eager["itl_ms"]["mean"] >= h["busy_ms"] > eager["device_busy_ms"]
    assert eager["breakdown_ms"]["host"] > 0 and h["critical_share"] > 0.3
    assert graph["host"]["busy_ms"] == 0 and graph["breakdown_ms"]["host"] == 0
    assert graph["itl_ms"]["mean"] < eager["itl_ms"]["mean"]
    assert graph["device_busy_ms"] == pytest.approx(eager["device_busy_ms"], rel=1e-9)


def test_a_faster_host_profile_shortens_a_host_bound_step(tmp_path):
    path = _trace(tmp_path, batch=1, context=128, model="llama-3.1-8b")
    slow = _run(path, batch=1, context=128, model="llama-3.1-8b")
    fast = _run(path, "workload.kernel_trace.host=fast-host", batch=1, context=128, model="llama-3.1-8b")
    assert fast["host"]["busy_ms"] < slow["host"]["busy_ms"]
    assert fast["itl_ms"]["mean"] < slow["itl_ms"]["mean"]


def test_kv_and_weight_formats_retime_the_imported_items(tmp_path):
    path = _trace(tmp_path)
    base = _run(path, "runtime.launch=graph")
    kv = _run(path, "runtime.launch=graph", "kv_cache.preset=kivi-2")
    w = _run(path, "runtime.launch=graph", "weights.experts.format=fp8")
    assert kv["breakdown_ms"]["attention_compute"] + kv["breakdown_ms"]["kv_read"] + kv["breakdown_ms"]["dequant"] \
        != pytest.approx(base["breakdown_ms"]["attention_compute"] + base["breakdown_ms"]["kv_read"], rel=0.01)
    assert w["breakdown_ms"]["expert_weight_read"] < 0.8 * base["breakdown_ms"]["expert_weight_read"]


def test_classification_counts_and_the_fallback(tmp_path):
    s = _run(_trace(tmp_path, unknown=3))
    t = s["trace"]
    assert t["fallback_kernels"] == 3 and t["classified"] == t["kernels"] - 3
    assert 0 < t["fallback_share"] < 0.5
    assert any("unclassified" in w for w in s["warnings"])
    assert t["items"]["Attention"] == LAYERS and t["items"]["GroupedGemm"] == 2 * LAYERS
    assert t["items"]["Absorbed"] == LAYERS          # the split-KV combine kernels


def test_a_trace_without_shapes_is_classified_from_names_with_a_warning(tmp_path):
    s = _run(_trace(tmp_path, shapes=False))
    t = s["trace"]
    assert t["classified_by"].get("op-shapes", 0) == 0 and t["classified_by"]["name+grid+model"] > 0
    assert t["fallback_kernels"] == 0 and t["items"]["Gemm"] >= 3 * LAYERS + 1
    assert any("record_shapes" in w for w in s["warnings"])


def test_a_gemm_without_shapes_is_found_among_the_models_weights(tmp_path):
    from hwsim.config.load import load_model
    from hwsim.ktrace.classify import Point, from_name
    ev = reader.DeviceEvent("kernel", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x128x64_warpgroup"
                            "size1x1x1_execute_segment_k_off_kernel__5x_cublas", 0, 0, 1, 1, 7,
                            grid=(250, 1, 1))
    g = from_name(ev, load_model("mixtral-8x7b"), Point(8, 4096, 2))
    assert isinstance(g, ir.Gemm) and (g.m, g.k, g.n) == (8, 4096, 32000)    # the LM head


def test_a_trace_of_another_gpu_warns_and_runs(tmp_path):
    s = _run(_trace(tmp_path, gpu="NVIDIA H100 80GB HBM3"))
    assert any("NVIDIA H100" in w and "re-timed" in w for w in s["warnings"])


def test_built_in_schedules_report_device_busy_and_host():
    s = run_config(load_scenario(None, ["workload.decode_steps=1", "runtime.launch=eager"]),
                     intervals=False).summary
    assert 0 < s["device_busy_ms"] < s["itl_ms"]["mean"]
    assert s["host"]["launches"] == s["kernels_per_step"] and s["host"]["syncs"] == 0
    assert "trace" not in s and s["breakdown_ms"]["host"] == 0


@pytest.mark.parametrize("content, words", [
    (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name"', "truncated"),
    (b"not json at all", "not JSON"),
    (gzip.compress(b'{"traceEvents": [')[:-6], "truncated"),
    (json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2,
                                  "args": {"External id": 1}}]}).encode(), "no GPU kernels"),
])
def test_bad_traces_exit_2_with_one_line(tmp_path, content, words):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    p = subprocess.run([sys.executable, "-m", "hwsim.cli", "run", "--out", str(tmp_path / "out"), "--set",
                        "workload.decode_steps=1", "--set", f"workload.kernel_trace.path={path}", "--set",
                        "workload.kernel_trace.batch_size=1", "--set", "workload.kernel_trace.context_tokens=64"],
                       capture_output=True, text=True)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "bad.json" in lines[0] and "Traceback" not in p.stderr
    assert not (tmp_path / "out").exists()


def test_an_oversized_trace_is_refused_while_streaming(tmp_path, monkeypatch):
    path = _trace(tmp_path)
    monkeypatch.setattr(reader, "MAX_KEPT", 20)
    with pytest.raises(ConfigError, match="profile one step"):
        reader.read_trace(path)


def test_validate_takes_a_kernel_trace_column(tmp_path):
    from hwsim.validate import load_dataset, validate_rows
    path = _trace(tmp_path, batch=1, context=128, model="llama-3.1-8b")
    csv = tmp_path / "rows.csv"
    csv.write_text("name,hardware,model,phase,batch,context_tokens,prompt_tokens,kv_bits,launch,measured_ms,"
                   "kernel_trace,trace_batch,trace_context_tokens\n"
                   f"own,h200-sxm,llama-3.1-8b,decode,1,128,0,16,graph,1.0,{path},1,128\n"
                   f"moved,h200-sxm,llama-3.1-8b,decode,4,512,0,16,graph,1.0,{path},1,128\n")
    rows = validate_rows(load_dataset(csv), workers=1)["rows"]     # graph: the device's time shows
    own = _run(path, "runtime.sm_clock=max", "runtime.launch=graph", batch=1, context=128, model="llama-3.1-8b")
    assert rows[0]["predicted_ms"] == pytest.approx(own["itl_ms"]["mean"], rel=0.01)
    assert rows[1]["predicted_ms"] > rows[0]["predicted_ms"]


REAL_CPU_TRACE = "tests/data/ktrace/hf-tiny-llama-cpu-b2-l64.json.gz"   # tests/data/ktrace/README.md


def test_a_real_profiler_trace_is_read_with_its_shapes():
    """torch.profiler's own output (HF Llama at tiny shapes on the CPU): the ops and their
    shapes as the schema really writes them, the step window, every projection a GEMM."""
    from hwsim.ktrace.classify import Point, from_op
    t = reader.read_trace(REAL_CPU_TRACE)
    assert t.has_shapes and len(t.steps) == 1 and t.kernels == 0
    gemms = [from_op(op, Point(2, 64)) for op in t.ops.values() if op.name == "aten::mm"]
    assert len(gemms) == 2 * 7 + 1                       # q, k, v, o, gate, up, down a layer; LM head
    assert {(g.m, g.k, g.n) for g in gemms} == {(2, 256, 256), (2, 256, 512), (2, 512, 256), (2, 256, 1024)}
    attn = [from_op(op, Point(2, 64)) for op in t.ops.values()
            if op.name == "aten::_scaled_dot_product_flash_attention_for_cpu"]
    assert {(a.phase, a.batch, a.heads, a.kv_heads, a.head_dim, a.kv_len) for a in attn} == \
        {("decode", 2, 4, 4, 64, 65)}


def test_a_trace_without_gpu_kernels_exits_2(tmp_path):
    p = subprocess.run([sys.executable, "-m", "hwsim.cli", "run", "--out", str(tmp_path / "out"), "--set",
                        "workload.decode_steps=1", "--set", f"workload.kernel_trace.path={REAL_CPU_TRACE}",
                        "--set", "workload.kernel_trace.batch_size=2", "--set",
                        "workload.kernel_trace.context_tokens=64"], capture_output=True, text=True)
    assert p.returncode == 2 and "no GPU kernels" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_a_compiled_graph_trace_is_classified_from_names_and_launched_once(tmp_path):
    path = _trace(tmp_path, batch=1, context=128, model="llama-3.1-8b", compiled=True)
    s = _run(path, batch=1, context=128, model="llama-3.1-8b")
    t = s["trace"]
    assert t["fallback_kernels"] == 0 and t["classified_by"].get("op-shapes", 0) == 0
    assert t["items"]["Gemm"] == 4 * LAYERS + 1 and t["items"]["Attention"] == LAYERS
    assert s["host"]["launches"] == 2 and s["host"]["syncs"] == 1     # the graph and the .item() copy
    eager = _run(_trace(tmp_path, "eager.json.gz", batch=1, context=128, model="llama-3.1-8b"),
                 batch=1, context=128, model="llama-3.1-8b")
    assert s["itl_ms"]["mean"] < eager["itl_ms"]["mean"]              # no host between the kernels


@pytest.mark.parametrize("model, batch, context", [("llama-3.1-8b", 1, 128), ("mixtral-8x7b", 8, 4096)])
def test_gemms_without_shapes_are_the_ones_with_shapes(tmp_path, model, batch, context):
    """From names, grids, the model and the stream order alone, a compiled trace's GEMMs and
    grouped GEMMs come out as the eager trace's op shapes say (an o_proj and a down projection
    share N: the down projection is the one after the gate+up)."""
    from hwsim.config.load import load_model
    from hwsim.ktrace.classify import Point
    from hwsim.ktrace.timeline import assemble
    m = load_model(model)
    point = Point(batch, context, m.moe.top_k if m.moe else 1)

    def gemms(**kw):
        path = _trace(tmp_path, f"{kw}.json.gz", batch=batch, context=context, model=model, **kw)
        return [k.item for k in assemble(reader.read_trace(path), m, point, 1.15).kernels
                if isinstance(k.item, (ir.Gemm, ir.GroupedGemm))]
    eager, compiled = gemms(), gemms(compiled=True)
    assert [(g.k, g.n) for g in compiled] == [(g.k, g.n) for g in eager] and len(eager) >= 4 * LAYERS


def test_a_trace_of_another_model_is_flagged(tmp_path):
    s = _run(_trace(tmp_path, model="llama-3.1-8b", batch=1, context=128), batch=1, context=128,
             model="qwen3-30b-a3b")
    assert any("is `model:` the traced model" in w for w in s["warnings"])
    same = _run(_trace(tmp_path, "own.json.gz", model="llama-3.1-8b", batch=1, context=128), batch=1,
                context=128, model="llama-3.1-8b")
    assert not any("traced model" in w for w in same["warnings"])


def test_a_gzip_trace_that_inflates_past_the_bound_is_refused(tmp_path, monkeypatch):
    from hwsim.io import bounded
    path = _trace(tmp_path)
    monkeypatch.setitem(bounded.LIMITS, "kernel trace", bounded.Limit("kernel trace", 2**30, max_inflated_bytes=5_000))
    with pytest.raises(ConfigError, match="inflates past"):
        reader.read_trace(path)


def test_another_threads_launch_adds_its_kernel_not_host_time(tmp_path):
    doc = synthetic.decode_step("llama-3.1-8b", 1, 128, layers=LAYERS)
    synthetic.write(tmp_path / "one.json.gz", doc)
    launch = next(e for e in doc["traceEvents"] if e["name"] == "cudaLaunchKernel")
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    extra = [dict(launch, tid=9, ts=launch["ts"] + 1, args={"correlation": 1}),
             dict(kernel, ts=kernel["ts"] + 1, args={**kernel["args"], "correlation": 1})]
    synthetic.write(tmp_path / "two.json.gz", {**doc, "traceEvents": doc["traceEvents"] + extra})
    one = _run(tmp_path / "one.json.gz", batch=1, context=128, model="llama-3.1-8b")
    two = _run(tmp_path / "two.json.gz", batch=1, context=128, model="llama-3.1-8b")
    assert two["trace"]["kernels"] == one["trace"]["kernels"] + 1
    assert two["host"]["launches"] == one["host"]["launches"]
    assert two["host"]["busy_ms"] == pytest.approx(one["host"]["busy_ms"], rel=1e-9)


H100_LLAMA = "tests/data/ktrace/h100-hf-llama-3.1-8b-eager-b1-l1024.json.gz"   # README.md there
H100_OLMOE = "tests/data/ktrace/h100-hf-olmoe-1b-7b-eager-b8-l4096.json.gz"


def _real(trace, model, batch, context, *sets):
    cfg = load_scenario("scenarios/kernel-trace.yaml", [
        f"model={model}", "hardware=h100-sxm", f"workload.kernel_trace.path={trace}",
        f"workload.kernel_trace.batch_size={batch}", f"workload.kernel_trace.context_tokens={context}",
        f"workload.batch_size={batch}", f"workload.context_tokens={context}", "workload.decode_steps=1", *sets])
    return run_config(cfg, intervals=False).summary


@pytest.mark.parametrize("trace, model, batch, context", [(H100_LLAMA, "llama-3.1-8b", 1, 1024),
                                                          (H100_OLMOE, "olmoe-1b-7b", 8, 4096)])
def test_a_real_gpu_trace_is_classified_from_its_op_shapes(trace, model, batch, context):
    """HF transformers 5.17 on an H100 (torch 2.11): every kernel has a rule, nearly all from
    the op that launched it; cuDNN attention (aten::_cudnn_attention_forward) is attention and
    the grouped_mm experts a grouped GEMM."""
    t = _real(trace, model, batch, context)["trace"]
    assert t["fallback_kernels"] == 0 and t["kernels"] > 1000
    assert t["classified_by"]["op-shapes"] > 0.9 * t["kernels"]
    layers = 32 if model == "llama-3.1-8b" else 16
    assert t["items"]["Attention"] == layers
    assert t["items"].get("GroupedGemm", 0) == (2 * layers if model == "olmoe-1b-7b" else 0)
    # the caching allocator: the growing cache's new blocks at batch 8 x 4k, none at batch 1 x 1k
    assert (t["host_allocs"] > 0 and t["host_alloc_ms"] > 1.0) == (batch == 8)
    # the profiler's own time, taken out of the host's: 1.97 us for each of some 6,000 events
    assert 10 < t["profiler_removed_ms"] < t["traced_step_ms"] / 2


def test_dynamic_cache_cat_is_latency_bound_and_grows_with_the_context():
    """DynamicCache's torch.cat of the whole cache (CatArrayBatchedCopy, one element in flight
    per thread) runs far below the HBM bandwidth a vectorised copy of the same bytes gets, and
    the step's device time grows with the context the trace is retargeted to."""
    from hwsim import operators
    from hwsim.pipeline import system
    cfg = load_scenario("scenarios/kernel-trace.yaml", [
        "model=llama-3.1-8b", "hardware=h100-sxm", f"workload.kernel_trace.path={H100_LLAMA}",
        "workload.kernel_trace.batch_size=1", "workload.kernel_trace.context_tokens=1024"])
    b = system(cfg)
    cats = [k for k in b.schedule.traced.kernels if isinstance(k.item, ir.Memory) and k.item.kind == "cat"
            and not k.item.vectorized and k.item.per_context]
    assert len(cats) == 64                               # K and V of 32 layers
    low, chip = b.schedule.lowering, b.chip
    cat_s = operators.device_time_s(chip, low.kernels("cat", ir.Memory("cat", 256e6, 256e6, vectorized=False), 0))
    copy_s = operators.device_time_s(chip, low.kernels("copy", ir.Memory("copy", 256e6, 256e6), 0))
    assert cat_s > 1.8 * copy_s
    short = _real(H100_LLAMA, "llama-3.1-8b", 1, 1024)["device_busy_ms"]
    longer = _real(H100_LLAMA, "llama-3.1-8b", 1, 1024, "workload.context_tokens=8192")["device_busy_ms"]
    assert longer > short * 1.15        # 1 GB more cache read by attention, read and written by the cat


def test_a_reduction_on_few_blocks_is_slower_than_on_many():
    """ATen's reduce_kernel sizes its grid by the output's rows: an argmax over a 128k vocabulary
    at batch 1 is one block, which streams its 256 KB far slower than a grid filling the chip."""
    from hwsim import operators
    from hwsim.pipeline import system
    chip = system(load_scenario(None, ["model=llama-3.1-8b", "hardware=h100-sxm"])).chip
    one = operators.device_time_s(chip, [ops_grid(chip, 1)])
    many = operators.device_time_s(chip, [ops_grid(chip, 128)])
    assert one > 4 * many


def ops_grid(chip, ctas):
    from hwsim.model import ops
    return ops.grid_limited("argmax", -1, 256e3, 8, ctas, 512, chip, from_hbm=False)


H100_COMPILED = "tests/data/ktrace/h100-hf-llama-3.1-8b-compiled-b8-l4096.json.gz"   # README.md there


def test_a_real_compiled_trace_takes_its_gemms_from_their_place_in_the_layer():
    """A CUDA-graph replay has no op shapes, and its nvjet GEMMs run on persistent grids (one
    block per SM whatever N is): each GEMM's weight comes from its place in the layer's order
    (q, k, v, o, gate, up, down in HF's modules), the one after the last layer is the LM head;
    Inductor kernels that fused `_scaled_dot_product_cudnn_attention` into their names are
    element-wise, and the attention reads K and V expanded to every query head."""
    from hwsim.config.load import load_model
    from hwsim.ktrace.classify import Point
    from hwsim.ktrace.timeline import assemble
    m = load_model("llama-3.1-8b")
    ks = assemble(reader.read_trace(H100_COMPILED), m, Point(8, 4096), 1.15).kernels
    gemms = [k for k in ks if isinstance(k.item, ir.Gemm) and k.how == "name+sequence+model"]
    assert len(gemms) == 7 * m.layers + 1
    h, f, kv = m.hidden, m.ffn, m.attention.kv_heads * m.attention.head_dim
    assert [(g.item.k, g.item.n) for g in gemms[:7]] == [(h, h), (h, kv), (h, kv), (h, h), (h, f), (h, f), (f, h)]
    assert (gemms[-1].item.k, gemms[-1].item.n) == (h, m.vocab)
    attention = [k.item for k in ks if isinstance(k.item, ir.Attention)]
    assert len(attention) == m.layers and all(a.kv_heads == m.attention.heads for a in attention)
    assert not any(isinstance(k.item, ir.Attention) for k in ks if k.name.startswith("triton_"))


def test_the_gemm_sequence_needs_the_layers_period():
    from hwsim.config.load import load_model
    from hwsim.ktrace import gemm_sequence
    m = load_model("llama-3.1-8b")
    fused = [("qkv", 1), ("o", 1), ("gate_up", 1), ("down", 1)]
    shapes = gemm_sequence.assign(fused * m.layers + [("lm_head", 2)], m)
    h, f = m.hidden, m.ffn
    assert shapes[2] == (h, 2 * f) and shapes[3] == (f, h) and shapes[4 * m.layers] == (h, m.vocab)
    assert gemm_sequence.assign(fused * (m.layers - 1), m) == {}           # a layer short: no period
    broken = fused * m.layers
    broken[10] = ("other", 3)
    assert gemm_sequence.assign(broken, m) == {}


LOOP_TRACE = "validation/data/hf_traces_h100/call_3/traces/hf-olmoe-1b-7b-eager-loop-b1-l1024.json.gz"


def test_a_per_expert_loop_moves_its_iterations_with_the_batch():
    """HF's eager experts loop runs a GEMM pair per expert reached, rows of its tokens: no dim
    is the batch, so the iterations themselves move. From batch 1 (8 experts a layer) to 8, a
    layer runs the 42 distinct experts uniform top-8 routing reaches, with the host's CPU time
    and syncs of each, and no warning; the grouped_mm trace of the same model has no loop."""
    from hwsim.config.load import load_model
    from hwsim.ktrace import expert_loop
    from hwsim.ktrace.classify import Point
    from hwsim.ktrace.timeline import assemble
    m = load_model("olmoe-1b-7b")
    steps = assemble(reader.read_trace(trace_path(LOOP_TRACE)), m, Point(1, 1024, 8), 1.0).steps
    loops = expert_loop.find(steps, m)
    assert len(loops) == m.layers and {len(lp.iterations) for lp in loops} == {8}
    assert {r for lp in loops for r in lp.rows} == {1}
    moved = expert_loop.moved(steps, loops, m, Point(8, 1024, 8))
    iterations = sum(1 for st, in_loop in moved
                     if in_loop and any(k.op == expert_loop.END_OP for k in st.kernels))
    assert iterations == m.layers * expert_loop.reached(m, 8) == m.layers * 42
    at1, at8 = (_real(trace_path(LOOP_TRACE), "olmoe-1b-7b", 1, 1024, f"workload.batch_size={b}") for b in (1, 8))
    assert not [w for w in at8["warnings"] if "loop" in w]
    assert at8["host"]["busy_ms"] > 3 * at1["host"]["busy_ms"] and at8["device_busy_ms"] > 2 * at1["device_busy_ms"]
    grouped = assemble(reader.read_trace(H100_OLMOE), m, Point(8, 4096, 8), 1.0).steps
    assert expert_loop.find(grouped, m) == []


def test_a_radix_select_waits_on_a_round_trip_per_digit():
    """top-k's sbtopk::gatherTopK reads its row once per 2-bit digit of its key (16 passes for
    float, 8 for bf16) and once more to gather: each pass a dependent round trip, so it takes
    longer than one pass over the same bytes; a many-block reduce_kernel with fewer outputs than
    blocks reads its partials back."""
    from hwsim import operators
    from hwsim.pipeline import system
    from hwsim.ktrace.classify import passes_of
    from hwsim.model import ops
    assert passes_of("void at::native::sbtopk::gatherTopK<float, unsigned int, 1, false>(...)", 1, 96) == 17
    assert passes_of("void at::native::sbtopk::gatherTopK<c10::BFloat16, unsigned int, 1, false>(...)", 1, 96) == 9
    assert passes_of("void at::native::reduce_kernel<128, 4, ...>", 4, 16) == 3
    assert passes_of("void at::native::reduce_kernel<512, 1, ...>", 2, 128) == 1
    chip = system(load_scenario(None, ["model=llama-3.1-8b", "hardware=h100-sxm"])).chip
    one, radix = (operators.device_time_s(chip, [ops.grid_limited("topk", -1, 512, 96, 1, 128, chip, from_hbm=False,
                                                                  passes=p)]) for p in (1, 17))
    assert radix > one + 16 * 0.1e-6      # at least 0.1 us a further round trip


@pytest.mark.parametrize("name, kind", [
    ("void vllm::rms_norm_kernel<c10::BFloat16, 8, 2>(c10::BFloat16*, ...)", "reduction"),
    ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>(...)",
     "index"),
    ("void vllm::rotary_embedding_kernel<c10::BFloat16, true>(...)", "elementwise"),
    ("void vllm::act_and_mul_kernel<c10::BFloat16, &(vllm::silu_kernel<c10::BFloat16>), true>(...)", "elementwise"),
    ("void vllm::moe::moe_sum_kernel<c10::BFloat16, 8>(...)", "reduction"),
    ("void vllm::moe::moe_align_block_size_kernel<int>(...)", "reduction"),
    ("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>, false>(flash::Flash_fwd_params)",
     "Attention"),
    ("void flash::flash_fwd_splitkv_combine_kernel<...>(flash::Flash_fwd_params)", "Absorbed"),
    ("fused_moe_kernel", "GroupedGemm"),
    # a split attention's second pass is its item's (counted once): vLLM, FlashInfer, SGLang
    ("void vllm::paged_attention_v2_kernel<__nv_bfloat16, __nv_bfloat16, 128, 16, 128>(...)", "Attention"),
    ("void vllm::paged_attention_v2_reduce_kernel<__nv_bfloat16, 128, 128, 512>(...)", "Absorbed"),
    ("void flashinfer::MergeStatesKernel<8u, 16u, 8u, 1u, __nv_bfloat16, __nv_bfloat16>(...)", "Absorbed"),
    ("_fwd_grouped_kernel_stage1", "Attention"),         # SGLang's Triton GQA decode: not a grouped GEMM
    ("_fwd_kernel_stage2", "Absorbed"),
    ("void vllm::scaled_fp8_quant_kernel<c10::BFloat16, c10::Float8_e4m3fn>(...)", "elementwise"),
    ("void marlin::Marlin<(vllm::ScalarType::Id)4, 256, 1, 8, 8, 4, 8, -1, true>(...)", "Gemm"),
])
def test_vllm_kernels_without_shapes_have_a_rule(name, kind):
    """A vLLM CUDA-graph step records no op shapes: its own kernels are classified from their
    names (none falls back to its traced duration)."""
    from hwsim.config.load import load_model
    from hwsim.ktrace.classify import Point, from_name
    m = load_model("qwen3-30b-a3b")
    ev = reader.DeviceEvent("kernel", name, 0.0, 1.0, 1, -1, 7, (8, 1, 1), (512, 1, 1), 0, 0, 0)
    assert ir.kind_of(from_name(ev, m, Point(8, 4096, m.moe.top_k))) == kind


def test_a_custom_all_reduce_is_a_collective():
    """vLLM's and SGLang's own all-reduce over NVLink (outside NCCL) is a collective, held as
    traced where its bytes are not recorded, not a fallback kernel."""
    from hwsim.config.load import load_model
    from hwsim.ktrace.classify import Point, classify
    m = load_model("llama-3.1-8b")
    ev = reader.DeviceEvent("kernel", "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 2>(...)", 0.0, 1.0, 1,
                            -1, 7, (36, 1, 1), (512, 1, 1), 0, 0, 0)
    item, how = classify(ev, None, m, Point(8, 4096))
    assert item == ir.Collective("all_reduce", 0.0) and how == "name"


H200_MIXTRAL_COMPILED = "validation/data/hf_traces_h200/call_3/traces/hf-mixtral-8x7b-compiled-b8-l4096.json.gz"


def test_a_compiled_moe_trace_finds_its_grouped_gemms_by_their_cutlass_kernel():
    """torch.compile of Mixtral on an H200: the experts run as ATen's CUTLASS grouped GEMM
    (GroupProblemShape in its mangled name) after a one-block setup kernel
    (prepare_grouped_gemm_data), and Inductor's kernels around them list `_grouped_mm` among
    the ops they fused. The grouped GEMM is the CUTLASS kernel, gate+up then down in each
    layer; the setup and the Triton kernels are memory kernels; the dense GEMMs keep their
    place in the layer (q, k, v, o, router) and the LM head."""
    from hwsim.config.load import load_model
    from hwsim.ktrace.classify import Point
    from hwsim.ktrace.timeline import assemble
    m = load_model("mixtral-8x7b")
    ks = assemble(reader.read_trace(trace_path(H200_MIXTRAL_COMPILED)), m, Point(8, 4096), 1.0).kernels
    grouped = [k for k in ks if isinstance(k.item, ir.GroupedGemm)]
    assert len(grouped) == 2 * m.layers and all("GroupProblemShape" in k.name for k in grouped)
    h, f = m.hidden, m.moe.expert_ffn
    assert {(g.item.k, g.item.n) for g in grouped[0::2]} == {(h, 2 * f)}
    assert {(g.item.k, g.item.n) for g in grouped[1::2]} == {(f, h)}
    setup = [k for k in ks if "prepare_grouped_gemm_data" in k.name]
    assert len(setup) == 2 * m.layers and all(isinstance(k.item, ir.Memory) for k in setup)
    assert all(isinstance(k.item, ir.Memory) for k in ks if k.name.startswith("triton_"))
    dense = [k for k in ks if isinstance(k.item, ir.Gemm) and k.how == "name+sequence+model"]
    assert len(dense) == 5 * m.layers + 1 and (dense[-1].item.k, dense[-1].item.n) == (h, m.vocab)


def test_an_inductor_kernel_of_many_small_blocks_waits_on_latency_per_wave():
    """An Inductor pointwise program loads its whole share at once: with thousands of blocks of
    a few hundred bytes (Llama's compiled KV expand at batch 1: 8,704 blocks, 8.7 us on the
    H200 for 10 MB) the kernel is waves of round trips, far slower than the bytes at the HBM
    rate, while the same bytes in fewer, larger blocks stream faster."""
    from hwsim import operators
    from hwsim.pipeline import system
    from hwsim.model import ops
    chip = system(load_scenario("scenarios/default.yaml")).chip
    many = operators.device_time_s(chip, [ops.pointwise_blocks("x", -1, 2.2e6, 8.9e6, 8704, 256, chip, from_hbm=True)])
    few = operators.device_time_s(chip, [ops.pointwise_blocks("x", -1, 2.2e6, 8.9e6, 1088, 256, chip, from_hbm=True)])
    at_rate = 2.2e6 / chip.hbm_read_bytes_s + 8.9e6 / (chip.hbm_read_bytes_s * 0.711 / 0.9325)
    assert many > 1.6 * (at_rate + chip.kernel_fixed_s) and few < many


def test_a_block_sort_counts_its_barrier_steps():
    """ATen's block-wide sorts: a bitonic network over 32 items is 15 compare-exchange stages; a
    radix sort of 64-bit keys is 16 digits, each longer with more items a thread."""
    from hwsim.ktrace.classify import passes_of
    bitonic = passes_of("void at::native::bitonicSortKVInPlace<-2, -1, 16, 16, float, long, GTOp>(", 1, 64)
    radix = [passes_of(f"void at::native::radixSortKVInPlace<-2, -1, 32, {i}, long, long, unsigned int>(", 1, 64)
             for i in (2, 4, 32)]
    assert bitonic == 15 * 4 / 3 + 2
    assert radix[0] < radix[1] < radix[2] and radix[2] > 3 * radix[1]


def test_an_engines_own_step_annotation_marks_the_step(tmp_path):
    """vLLM and SGLang profile a few steps with no ProfilerStep#: a user annotation that repeats
    once a step and covers the launches marks it, and the last one is imported; with no mark at
    all the whole trace is one step, and a warning says so."""
    doc = synthetic.decode_step("mixtral-8x7b", 8, 4096, layers=LAYERS)
    events = doc["traceEvents"]
    step = next(e for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    span = step["dur"] + 10.0
    later = [dict(e, ts=e["ts"] + span) for e in events if "ts" in e]
    for e in later:                  # a second step: its correlations and op ids distinct
        args = dict(e.get("args") or {})
        for key in ("correlation", "External id"):
            if key in args:
                args[key] = args[key] + 10 ** 6
        e["args"] = args
    two = dict(doc, traceEvents=[e for e in events if "ts" not in e] + events + later)
    for e in two["traceEvents"]:
        if str(e.get("name", "")).startswith("ProfilerStep#"):
            e["name"] = "execute_model"
    marked, bare = tmp_path / "marked.json.gz", tmp_path / "bare.json.gz"
    synthetic.write(marked, two)
    synthetic.write(bare, dict(two, traceEvents=[e for e in two["traceEvents"] if e.get("name") != "execute_model"]))
    one = _run(_trace(tmp_path))["trace"]
    by_mark, whole = _run(marked), _run(bare)
    assert by_mark["trace"]["step_window"] == "annotation 'execute_model'"
    assert by_mark["trace"]["kernels"] == one["kernels"]
    assert not [w for w in by_mark["warnings"] if "marks no step" in w]
    assert whole["trace"]["step_window"] == "whole trace" and whole["trace"]["kernels"] == 2 * one["kernels"]
    assert [w for w in whole["warnings"] if "marks no step" in w]


def test_a_small_index_kernel_chains_a_load_per_index_row():
    """ATen's index_select / index_add_ for at most 16 indices loop over the rows in one block,
    a chain of dependent loads a row (the built-in schedule's constants): the trace's index
    count says which kernel runs and how long it waits; past 16 the large-index kernel does
    not wait per row. The per-expert loop's gathers in a real trace carry their rows."""
    from hwsim import operators
    from hwsim.pipeline import system
    from hwsim.config.load import load_model
    from hwsim.ktrace.classify import Point
    from hwsim.ktrace.timeline import assemble
    from hwsim.ktrace.lower import Lowering
    b = system(load_scenario(None, ["model=olmoe-1b-7b", "hardware=h100-sxm"]))
    low, chip = Lowering(b.schedule), b.chip

    def time_us(rows, kind="scatter"):
        return operators.device_time_s(chip, low.kernels("x", ir.Memory(kind, 16e3, 8e3, index_rows=rows), 0)) * 1e6

    assert time_us(8) > time_us(2) + 6 * 0.2         # each row a few dependent L2 trips
    assert time_us(8, "index") < time_us(8)          # index_add_ also reads its destination
    assert time_us(17) < time_us(16) / 3             # the large-index kernel: no chain
    steps = assemble(reader.read_trace(trace_path(LOOP_TRACE)), load_model("olmoe-1b-7b"), Point(1, 1024, 8), 1.0).steps
    rows = {k.item.index_rows for st in steps for k in st.kernels
            if isinstance(k.item, ir.Memory) and k.op in ("aten::index_add_", "aten::index_select")}
    assert rows == {1}                                # batch 1: one token an expert


def test_a_kernel_after_a_gemm_that_swept_the_l2_reads_from_hbm():
    """An imported trace's kernels go through the built-in schedule's L2 walk: an element-wise
    kernel right after a GEMM streaming more than the L2 reads its input from HBM (it is slower),
    after a small GEMM from L2; in an experts loop the gather reads rows of the hidden states an
    iteration (an expert's weights) ago."""
    from hwsim import operators
    from hwsim.pipeline import system
    from hwsim.ktrace.lower import Lowering
    from hwsim.ktrace.schedule import l2_walked, named
    b = system(load_scenario(None, ["model=mixtral-8x7b", "hardware=h200-sxm"]))
    base, chip = b.schedule, b.chip
    low = Lowering(base)
    def gemm(n):                                                   # 4096 x n bf16 weights
        return [named(k, ir.Gemm(8, n, 4096), False) for k in low.kernels("mm", ir.Gemm(8, n, 4096), 0)]

    def last_us(before, item, in_iteration=False):
        """The time of the item's kernels after the named kernels `before`, in a fresh walk."""
        ks = before + [named(k, item, in_iteration) for k in low.kernels("x", item, 0)]
        return operators.device_time_s(chip, l2_walked(ks, base)[len(before):]) * 1e6

    add = ir.Memory("elementwise", 3 * 8 * 4096 * 2, 8 * 4096 * 2)
    gather = ir.Memory("index", 2 * 8 * 4096 * 2, 8 * 4096 * 2, index_rows=8)
    big, small = gemm(14336 * 2), gemm(1024)                        # 235 MB and 8 MB of weights
    assert 4096 * 14336 * 4 > chip.l2_bytes > 4096 * 1024 * 2
    assert last_us(big, add) > last_us(small, add) * 1.2
    first = [named(k, gather, True) for k in low.kernels("g", gather, 0)]   # the previous iteration's gather
    assert last_us(first + big, gather, True) > last_us(first + small, gather, True) + 0.5


def test_an_eager_attentions_batched_gemms_move_with_the_batch_and_context():
    """gpt-oss's eager attention (sinks) runs QK and PV as bmm over batch x heads matrices: the
    count moves with the batch and the key length with the context (the b32 trace predicted b1
    at +64% before, its 13 ms of bmm held as traced)."""
    from hwsim.ktrace.classify import Point
    from hwsim.ktrace.retarget import retarget
    pv = ir.Gemm(m=1, n=64, k=2055, batch=32 * 64, weight=False)
    old, new = Point(32, 2048, 4, (8, 64)), Point(1, 1024, 4, (8, 64))
    moved, scaled = retarget(pv, old, new)
    assert scaled and (moved.batch, moved.k, moved.n) == (64, 1031, 64)
    assert retarget(ir.Gemm(m=1, n=64, k=2055, batch=32 * 8, weight=False), old, new)[0].batch == 8
    assert retarget(pv, Point(32, 2048, 4), Point(1, 1024, 4)) == (pv, False)    # heads unknown


def test_a_reduction_of_a_tensor_streamed_from_hbm_spreads_over_the_chip():
    """A reduction too large for the L2 (gpt-oss's scores max at batch 64: 34 MB in, 8 KB out)
    streams its input from HBM over a grid sized by the bytes it reads, not by the few it
    writes: its tiles were counted from its L2 bytes only, one tile for the whole read, 712 us
    a call (the batch-8 trace predicted (64, 1024) at +23%)."""
    from hwsim import operators
    from hwsim.pipeline import system
    b = system(load_scenario("scenarios/kernel-trace.yaml", []))
    low, chip = b.schedule.lowering, b.chip
    nbytes = 64 * 64 * 4104 * 2
    assert low._in_hbm(nbytes)
    kernels = low.kernels("max", ir.Memory("reduction", nbytes, 8192, ctas=256, threads=512), 0)
    assert kernels[0].tiles >= chip.sms
    assert operators.device_time_s(chip, kernels) < 2 * nbytes / chip.hbm_read_bytes_s


def test_an_eager_attentions_scores_move_with_the_context_in_their_last_dim():
    """gpt-oss's eager attention (sinks) takes the max, sub, softmax and cat of its scores,
    batch x heads x 1 x keys: the keys are the context though they are the last dim, which for
    other tensors is a feature dim (Mixtral's hidden 4096 at context 4096 stays put). They
    grew with the batch only: 8x from (8, 4096) to (64, 1024), not 2x."""
    from hwsim.ktrace.classify import Point, from_op
    from hwsim.ktrace.reader import CpuOp
    from hwsim.ktrace.retarget import retarget
    bf16 = "c10::BFloat16"
    old, new = Point(8, 4096, 4, (8, 64)), Point(64, 1024, 4, (8, 64))
    scores = from_op(CpuOp("aten::max", 0, 1, ((8, 64, 1, 4104), (), ()), (bf16, "Scalar", "Scalar")), old)
    assert scores.per_batch and scores.per_context and not scores.reads_cache
    assert retarget(scores, old, new)[0].read_bytes == pytest.approx(scores.read_bytes * 8 * 1024 / 4096)
    cat = (f"GenericList[{bf16}]", "Scalar")
    sinks = from_op(CpuOp("aten::cat", 0, 1, (((8, 64, 1, 4103), (8, 64, 1, 1)), ()), cat), old)
    kv = from_op(CpuOp("aten::cat", 0, 1, (((8, 8, 4102, 64), (8, 8, 1, 64)), ()), cat), old)
    assert sinks.per_context and not sinks.reads_cache     # the scores just written, not the KV cache
    assert kv.per_context and kv.reads_cache
    hidden = from_op(CpuOp("aten::add", 0, 1, ((8, 1, 4096), (8, 1, 4096), ()), (bf16, bf16, "Scalar")), old)
    assert hidden.per_batch and not hidden.per_context
    op = CpuOp("aten::max", 0, 1, ((8, 64, 1, 4104), (), ()), (bf16, "Scalar", "Scalar"))
    assert not from_op(op, Point(8, 4096, 4)).per_context     # heads not declared: not read as scores
