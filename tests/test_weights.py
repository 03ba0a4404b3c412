"""Weight formats and the production MoE schedules: bytes, rates, errors, measured orderings."""

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from hwsim.pipeline import run_config, system
from hwsim import pipeline
from hwsim.config.load import load_model, load_scenario
from hwsim.config.scenario import TensorWeights
from hwsim.errors import ConfigError
from hwsim.model.weight_format import from_config

ROOT = Path(__file__).resolve().parent.parent
STEPS = ROOT / "validation" / "data" / "h200_steps.csv"
MOE_STEPS = ROOT / "validation" / "data" / "h200_moe_steps.csv"


def bits(**kw):
    return from_config(TensorWeights.model_validate(kw)).bits_per_weight


def run(*sets):
    return run_config(load_scenario(None, ["workload.decode_steps=1", *sets])).summary


def measured(path, name):
    with open(path) as f:
        return next(float(r["measured_ms"]) for r in csv.DictReader(f) if r["name"] == name)


def test_bits_per_weight_count_scales_and_zero_points():
    assert bits(format="bf16") == 16
    assert bits(format="fp8") == 8                                    # one scale per tensor
    assert bits(format="fp8", group_size=16384, scale_format="fp32") == pytest.approx(8 + 32 / 16384)
    assert bits(format="int4") == pytest.approx(4 + 2 * 16 / 128)      # bf16 scale + zero per 128
    assert bits(format="int2", group_size=64) == pytest.approx(2 + 32 / 64)
    assert bits(format="int3", scale_format="fp8") == pytest.approx(3 + 16 / 128)
    assert bits(format="mxfp4") == pytest.approx(4 + 8 / 32)          # e8m0 scale per 32
    assert bits(format="nvfp4") == pytest.approx(4 + 8 / 16)          # fp8 scale per 16


def test_run_bytes_are_exact_for_int4_experts():
    s = run("weights.experts.format=int4")
    m = load_model("mixtral-8x7b")
    d, ff, E, L = m.hidden, m.moe.expert_ffn, m.moe.experts, m.layers
    experts = L * E * 3 * ff * d
    a = m.attention
    attn = L * (d * (a.heads + 2 * a.kv_heads) * a.head_dim + a.heads * a.head_dim * d)
    rest = L * (2 * d + d * E) + d + m.vocab * d                       # norms, router, final norm, LM head
    expected = experts * 4.25 / 8 + (attn + rest) * 2
    assert s["weights"]["bytes"] == pytest.approx(expected, rel=1e-9)
    assert s["weights"]["experts"] == {"format": "int4", "bits_per_weight": 4.25, "group_size": 128,
                                       "scale_format": "bf16", "dequant": "software"}
    assert s["weights"]["bits_per_weight"] == pytest.approx(8 * expected / (experts + attn + rest))


def test_bf16_block_is_the_unchanged_default():
    a, b = run(), run("weights.format=bf16")
    for s in (a, b):
        s["sim"].pop("wall_s")
    assert a["itl_ms"] == b["itl_ms"] and a["breakdown_ms"] == b["breakdown_ms"]
    assert a["weights"]["bits_per_weight"] == 16


def test_fp8_is_faster_than_bf16_on_a_weight_bound_step_and_moves_half_the_bytes():
    bf16 = run()
    fp8 = run("weights.experts.format=fp8", "weights.attention.format=fp8")
    assert fp8["itl_ms"]["p50"] < 0.8 * bf16["itl_ms"]["p50"]
    assert fp8["bytes"]["weights"] < 0.55 * bf16["bytes"]["weights"]


def test_fp8_on_a_chip_without_an_fp8_rate_and_native_int4_are_refused():
    # checked above the loader (hwsim/checks.py), by `hwsim run` after loading and by
    # the pipeline's system (load, check, build)
    native_int4 = pipeline.load(None, ["weights.experts.format=int4", "weights.experts.dequant=native"])
    for check, arg in ((pipeline.check, native_int4), (system, native_int4.cfg)):
        with pytest.raises(ConfigError) as e:
            check(arg)
        assert e.value.key == "weights.experts.dequant"
    with pytest.raises(ConfigError) as e:
        pipeline.check(pipeline.load(None, ["weights.experts.format=mxfp4", "weights.experts.dequant=native"]))
    assert "FP4" in e.value.message            # the H200 has no FP4 tensor rate; the B200 does
    pipeline.check(pipeline.load(None, ["hardware=b200", "weights.experts.format=mxfp4",
                                        "weights.experts.dequant=native"]))


def test_decoder_on_a_profile_without_one_exits_2_with_the_key(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("hardware: h200-sxm\nmodel: mixtral-8x7b\nweights:\n  experts:\n    format: int2\n"
                 "    dequant: decoder\n")
    res = subprocess.run([sys.executable, "-m", "hwsim.cli", "run", str(p), "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "weights.experts.dequant" in res.stderr and "no native sub-byte decoder" in res.stderr
    assert f"{p}:6" in res.stderr


def test_a_decoder_beats_software_dequant_at_two_bits():
    sw = run("weights.experts.format=int2", "workload.batch_size=8")
    dec = run("hardware=h200-decoder", "weights.experts.format=int2", "weights.experts.dequant=decoder",
              "workload.batch_size=8")
    assert dec["itl_ms"]["p50"] < 0.7 * sw["itl_ms"]["p50"]
    assert sw["breakdown_ms"]["dequant"] > 0


@pytest.mark.parametrize("model, batch, faster", [
    ("mixtral-8x7b", 1, "per-expert"),      # 8.78 ms per-expert against 13.13 grouped, measured
    ("qwen3-30b-a3b", 32, "grouped"),       # 137.4 ms per-expert against 25.8 grouped, measured
])
def test_grouped_against_per_expert_follows_the_measurements(model, batch, faster):
    per = measured(STEPS, f"{model}-decode-b{batch}-l512-graph")
    grouped = measured(MOE_STEPS, f"{model}-grouped-bf16-decode-b{batch}-l512-graph")
    assert (per < grouped) == (faster == "per-expert")                  # the data says so
    sets = [f"model={model}", f"workload.batch_size={batch}", "workload.context_tokens=512"]
    sim_per = run(*sets)["itl_ms"]["p50"]
    sim_grouped = run(*sets, "runtime.moe_schedule=grouped")["itl_ms"]["p50"]
    assert (sim_per < sim_grouped) == (per < grouped)
    assert sim_grouped / sim_per == pytest.approx(grouped / per, rel=0.15)


def test_fused_is_faster_than_grouped_for_qwen3_at_batch_1_as_measured():
    sets = ["model=qwen3-30b-a3b", "workload.batch_size=1", "workload.context_tokens=512"]
    fused = run(*sets, "runtime.moe_schedule=fused")["itl_ms"]["p50"]
    grouped = run(*sets, "runtime.moe_schedule=grouped")["itl_ms"]["p50"]
    m_fused = measured(MOE_STEPS, "qwen3-30b-a3b-fused-bf16-decode-b1-l512-graph")
    m_grouped = measured(MOE_STEPS, "qwen3-30b-a3b-grouped-bf16-decode-b1-l512-graph")
    assert m_fused < m_grouped and fused < grouped
    assert fused / grouped == pytest.approx(m_fused / m_grouped, rel=0.1)


def test_gpt_oss_windows_cap_the_kv_reads_of_every_other_layer():
    s = run("model=gpt-oss-20b", "workload.batch_size=1", "workload.context_tokens=4096")
    m = load_model("gpt-oss-20b")
    per_token = 2 * m.attention.kv_heads * m.attention.head_dim * 2
    full, windowed = m.layers // 2, m.layers - m.layers // 2
    reads = per_token * (full * (4096 + 1) + windowed * 128)
    writes = per_token * m.layers
    assert s["bytes"]["kv"] == pytest.approx(reads + writes, rel=0.01)
    assert s["weights"]["experts"]["format"] == "mxfp4"


def test_deepseek_v3_defaults_to_its_fp8_checkpoint():
    m = load_model("deepseek-v3")
    assert m.weights["experts"].format == "fp8" and m.weights["attention"].format == "fp8"
    cfg = load_scenario(None, ["model=deepseek-v3"])
    assert cfg.weights.experts.format is None          # the scenario leaves it to the model


def test_scenario_keys_merge_over_the_checkpoint_formats():
    from hwsim.model import weight_format
    model = load_model("gpt-oss-120b")
    cfg = load_scenario(None, ["model=gpt-oss-120b", "hardware=h200-decoder", "weights.experts.dequant=decoder"])
    experts = weight_format.plan(cfg.weights, model.weights).experts
    assert (experts.format, experts.group_size, experts.dequant) == ("mxfp4", 32, "decoder")
    cfg = load_scenario(None, ["model=gpt-oss-120b", "weights.experts.format=int4"])
    experts = weight_format.plan(cfg.weights, model.weights).experts
    assert (experts.format, experts.group_size, experts.scale_format) == ("int4", 128, "bf16")
