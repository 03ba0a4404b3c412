"""Issue 44 item 2: transformers' generate() with QuantizedCache(backend="hqq") as a scenario
(workload.engine.kind hf-generate, scenarios/engines/hf-generate-quantized-cache.yaml) and HQQ's
dequant as the chain of PyTorch kernels the H100 traces show (kv_cache.expansion hqq,
hwsim/model/hqq_dequant.py). Runs without transformers (CI): the host's launches then fall back
to the profile's bf16 step plus the chain's."""

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from hwsim import operators
from hwsim.config.engine_install import problems
from hwsim.config.kv_cache import kv_cache
from hwsim.config.load import load_scenario
from hwsim.model.schedule import StepShape
from hwsim.pipeline import system

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "engines" / "hf-generate-quantized-cache.yaml"
H100 = ["hardware=h100-sxm", "parallel.allow_overcommit=true"]


def kv_path(sets, batch=1, context=32768):
    cfg = load_scenario(SCENARIO, [*H100, *sets])
    b = system(cfg)
    return b, b.schedule.kv_path(0, StepShape("decode", batch, batch, context))


def kind(name):
    label = name.split(".")[-1]
    return label.rstrip("0123456789").removeprefix("k_").removeprefix("v_")


def test_the_engine_config_is_the_kv_cache_and_the_run_is_eager_on_cudnn():
    cfg = load_scenario(SCENARIO)
    kv = cfg.kv_cache
    assert (kv.bits, kv.group_size, kv.recent.tokens, kv.recent.bits) == (2, 64, 128, 16)
    assert kv.expansion == "hqq" and kv.dequant == "unfused"
    assert (cfg.runtime.launch, cfg.runtime.attention_kernel) == ("eager", "cudnn")
    assert list(problems(cfg)) == []
    dynamic = load_scenario(SCENARIO, ["workload.engine.config.cache_implementation=dynamic",
                                       "workload.engine.config.cache_config=null"])
    assert not dynamic.kv_cache.quantized


@pytest.mark.parametrize("bits, per_tensor", [(2, 13), (4, 7)])
def test_a_layer_runs_hqqs_chain_as_the_traces_count_it(bits, per_tensor):
    """The H100 traces: a 2-bit layer 4 and, 3 shifts, 4 casts, a sub, a mul per K and V (4-bit:
    2, 1, 2), then the K and V cats with the residual, the residual's 2 appends, cuDNN's SDPA."""
    _, ks = kv_path([f"workload.engine.config.cache_config.nbits={bits}"])
    counts = Counter(kind(k.name) for k in ks)
    slices = 8 // bits
    assert counts["and"] == 2 * slices and counts["shift"] == 2 * (slices - 1) and counts["cast"] == 2 * slices
    assert counts["sub_zero"] == counts["mul_scale"] == counts["cat"] == 2
    assert sum(counts[c] for c in ("and", "shift", "cast", "sub_zero", "mul_scale")) == 2 * per_tensor
    assert counts["k_write"] + counts["v_write"] == 0 and counts["write"] == 2      # the residual's appends


def test_the_chain_times_match_the_h100_trace_per_kernel():
    """Per kernel, against the medians of qc-llama-3.1-8b-hqq2-b1-l32768 (validation/data/
    library_stacks_h100/traces; validation/compare_hqq_kernels.py): sub 89.5 us, mul 88.5, the cat
    with the residual 46.4, a slice's cast 17.9; the layer's dequant and cats 684 us (the
    one-pass expansion charged 62)."""
    b, ks = kv_path([])
    us = {}
    for k in ks:
        us.setdefault(kind(k.name), []).append(operators.device_time_s(b.chip, [k]) * 1e6)
    for cls, traced in (("sub_zero", 89.5), ("mul_scale", 88.5), ("cat", 46.4), ("cast", 17.9)):
        assert us[cls][0] == pytest.approx(traced, rel=0.20), cls
    chain = sum(sum(v) for c, v in us.items() if c in ("and", "shift", "cast", "sub_zero", "mul_scale", "cat"))
    assert chain == pytest.approx(684.2, rel=0.10)
    b1, one = kv_path(["kv_cache.expansion=one-pass"])
    [dequant] = [k for k in one if "kv_dequant" in k.name]
    assert operators.device_time_s(b1.chip, [dequant]) * 1e6 < chain / 5      # what the one-pass family missed


def test_the_dynamic_cache_grows_by_a_cat_of_the_whole_cache():
    b, ks = kv_path(["workload.engine.config.cache_implementation=dynamic", "workload.engine.config.cache_config=null"])
    cats = [k for k in ks if k.name.endswith("_write_cat")]
    assert len(cats) == 2
    whole = 32769 * 8 * 128 * 2                         # Llama-3.1-8B's K of a layer at 32k, bf16
    assert cats[0].hbm_read * cats[0].tiles == pytest.approx(whole)
    assert 35 < operators.device_time_s(b.chip, cats[:1]) * 1e6 < 55     # the traces: 41.3 and 47.9 us


def test_without_the_library_the_launches_are_the_profiles_step_plus_the_chain(monkeypatch):
    from hwsim.serving.engines import generate_ops
    def missing(*a, **k):
        raise ImportError("no transformers")
    monkeypatch.setattr(generate_ops, "step_launches", missing)
    b = system(load_scenario(SCENARIO, H100))
    [note] = [w for w in b.warnings if w.startswith("engine hf-generate")]
    assert "issues 2394 ops a step (not counted" in note          # 1,498 + 32 x 28: the H100 trace's 2,394
    four = system(load_scenario(SCENARIO, [*H100, "workload.engine.config.cache_config.nbits=4"]))
    assert any("issues 2010 ops" in w for w in four.warnings)      # measured: 2,010
    assert b.stream.launch_s == pytest.approx((2394 * 20.9e-6 + 38.3e-3) / 1410)


def test_the_step_waits_on_the_host_and_the_device():
    from hwsim.pipeline import run_config
    cfg = load_scenario(SCENARIO, [*H100, "workload.decode_steps=1"])
    s = run_config(cfg, system(cfg), intervals=False).summary
    assert s["itl_ms"]["p50"] > 2394 * 20.9e-3 and s["itl_ms"]["p50"] > s["device_busy_ms"] > 25


def cli(*sets):
    return subprocess.run([sys.executable, "-m", "hwsim.cli", "run", str(SCENARIO), "--out", "/dev/null",
                           *[a for s in sets for a in ("--set", s)]], capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)


@pytest.mark.parametrize("bad, said", [
    ("workload.engine.config.cache_config.nbits=3", "workload.engine.config.cache_config.nbits"),
    ("workload.engine.config.cache_config.group=64", "workload.engine.config.cache_config.group"),
    ("workload.engine.config.cache_config.backend=quanto", "'hqq'"),
    ("kv_cache.bits=4", "only expansion may be set beside it"),
    ("workload.engine.config.cache_implementation=static", "workload.engine.config.cache_implementation"),
])
def test_bad_fields_are_one_line_and_exit_2(bad, said):
    res = cli(bad)
    assert res.returncode == 2, res.stderr[-500:]
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and said in lines[0]


def test_expansion_hqq_is_unfused_and_needs_hqqs_packings():
    assert kv_cache({"bits": 4, "expansion": "hqq"}).dequant == "unfused"
    for bad, said in (({"bits": 2, "expansion": "hqq", "dequant": "software"}, "unfused expansion pass"),
                      ({"bits": 3, "expansion": "hqq"}, "unpacks 1/2/4/8-bit codes"),
                      ({"bits": 4, "expansion": "one-pass", "dequant": "software"}, "set it with dequant unfused")):
        with pytest.raises(ValueError, match=said):
            kv_cache(bad)


@pytest.mark.parametrize("change", [
    "workload.engine.attention_plans=built", "workload.engine.config.cache_config.nbits=4",
    "workload.engine.config.cache_config.q_group_size=128", "workload.engine.config.cache_config.residual_length=1024",
])
def test_each_generate_field_changes_the_step(change):
    base = system(load_scenario(SCENARIO, H100))
    other = system(load_scenario(SCENARIO, [*H100, change]))
    shape = StepShape("decode", 1, 1, 32768)
    times = [(b.stream.launch_s, operators.device_time_s(b.chip, b.schedule.kv_path(0, shape)),
              b.schedule.kv_token_bytes(32768)) for b in (base, other)]      # the group: the cache's bytes
    assert times[0] != times[1]


def test_cache_implementation_changes_the_step():
    dyn = system(load_scenario(SCENARIO, [*H100, "workload.engine.config.cache_implementation=dynamic",
                                          "workload.engine.config.cache_config=null"]))
    assert dyn.stream.launch_s != system(load_scenario(SCENARIO, H100)).stream.launch_s
