"""Dequant kernel families as presets (issue 31): kv_cache.kernel and weights.<class>.kernel name
naive (the measured fits), fast (calibration/fast_*.py, counts fitted to an H100, issue 44) and
native-decoder (the what-if decoder). The presets are held to their data here."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hwsim.config.load import load_profile, load_scenario
from hwsim.config.scenario import IntKv, kv_cache
from hwsim.hw.chip import ChipSpec
from hwsim.metrics import Component
from hwsim.model import dequant_kernels, fast_kv_occupancy, weight_format
from hwsim.model.fast_gemm import fast_weight_only_gemm
from hwsim.operators import device_time_s
from hwsim.pipeline import run_config
from hwsim.workload.kv_format import from_config

ROOT = Path(__file__).resolve().parents[1]
SASS = (ROOT / "calibration" / "data" / "fast_kernels_sass.txt").read_text()
KV_BASE = ROOT / "scenarios" / "kv-quant-sweep-base.yaml"
ONE_STEP = ["workload.decode_steps=1"]


def sass_lane_ops(kernel: str) -> float:
    """The 'lane ops' column of one row of calibration/fast_sass.py's table."""
    row = next(line for line in SASS.splitlines() if re.match(rf"{re.escape(kernel)}\s+\d", line))
    return float(row[len(kernel):].split()[4])


def families(name="h200-sxm"):
    return dequant_kernels.from_profile(load_profile(name))


def fitted_counts(name: str = "fit_fast_kernels_h100.txt") -> dict:
    """calibration/data/fit_fast_kernels_h100*.txt: calibration/fit_fast_kernels.py's output on the
    H100 rows (session 18's; `_occupancy`: the KV refit under occupancy of session 20)."""
    out = {}
    for line in (ROOT / "calibration" / "data" / name).read_text().splitlines()[1:]:
        if line.startswith(("portable ", "asm ")):
            variant, part, body = line.split(" ", 2)
            out[(variant, part)] = json.loads(body)
    return out


@pytest.mark.parametrize("profile", ["h100-sxm", "h200-sxm", "h200-decoder"])
def test_the_fast_family_is_the_h100_fit_of_the_inline_ptx_kernels(profile):
    """Issue 44: the counts fitted to the H100's rows, measured, the same on every Hopper profile
    (machine-code counts); the 8-bit count, not fixed by the rows, is the 4-bit one; KV refit under
    occupancy (session 20) and again under the kernel's own combine and split plan (session 21:
    the same counts), where the 16-bit count, at or below the loop's SASS lanes, is charged
    the lanes (any such count costs alike), W4A16 refit in session 21 as a chain under occupancy."""
    f = families(profile)
    kv = fitted_counts("fit_fast_kernels_h100_s21.txt")[("asm", "KV")]["ops_per_element"]
    lanes16 = fast_kv_occupancy.LANE_OPS[16]
    assert kv["16"] <= lanes16
    assert dict(f.kv["fast"].ops_by_bits) == {2.0: kv["2"], 4.0: kv["4"], 8.0: kv["4"], 16.0: lanes16}
    w = f.weights["fast"]
    lo, hi = fitted_counts("fit_fast_kernels_h100_w4a16_s21.txt")[("asm", "W4A16")]["ops_per_weight_16_64"]
    assert w.ops(16) == pytest.approx(lo) and w.ops(64) == pytest.approx(hi)
    assert f.kv["fast"].measured and w.measured
    # the fitted counts sit well above the SASS counts the predictions were written with
    assert kv["2"] > 2.5 * sass_lane_ops("kv 2-bit block 128 asm")


def test_the_naive_family_is_todays_fit():
    f = families()
    fit = (ROOT / "calibration" / "data" / "fit_kv_dequant.txt").read_text().splitlines()[0]
    assert fit == (f"relayout_ops_byte = {f.kv['naive'].relayout_ops_byte}, "
                   f"relayout_ops_subbyte = {f.kv['naive'].relayout_ops_subbyte}")
    # the scenario keys' defaults, which override the family where set, are the same fit
    assert (IntKv.model_fields["relayout_ops_subbyte"].default,
            IntKv.model_fields["relayout_ops_byte"].default) == (15.5, 8.0)
    w = f.weights["naive"]
    assert (w.ops_per_weight, w.ops_per_weight_row) == (weight_format.DEQUANT_OPS_PER_WEIGHT,
                                                       weight_format.DEQUANT_OPS_PER_WEIGHT_ROW)
    assert f.kv["naive"].measured and w.measured
    # a profile without a dequant_kernels block keeps the same fit, and only it
    b200 = families("b200")
    assert b200.kv == {"naive": dequant_kernels.NAIVE_KV} and b200.weights == {"naive": dequant_kernels.NAIVE_WEIGHTS}


def test_the_default_is_the_fastest_measured_family():
    f = families()
    assert f.default("kv") == "fast"                                          # measured since issue 44
    # weights compare at one row (MoE decode), where tinygemm is measured faster; fast from 16 rows
    assert f.default("weights") == "naive" and f.weights["fast"].ops(16) < f.weights["naive"].ops(16)
    # were the fast kernel unmeasured, the naive fit would stay the default
    unmeasured = dequant_kernels.Families({**f.kv, "fast": f.kv["fast"].__class__(
        "fast", False, ops_by_bits=f.kv["fast"].ops_by_bits)}, f.weights, f.decoder)
    assert unmeasured.default("kv") == "naive"


def test_fast_kv_costs_each_width_at_its_count_or_the_next_wider():
    fast = families().kv["fast"]

    def ops(**kv):
        return from_config(kv_cache(kv), fast).dequant_ops_per_element(1 << 20)
    assert ops(bits=2, group_size=128) == 10.02
    assert ops(bits=1.5, group_size=128) == 10.02
    assert ops(bits=3, group_size=128) == 9.64
    assert ops(bits=8, group_size=128) == 9.64
    assert ops(bits=8, element="fp8") == 2.0           # fp8 / vq conversions are not a family's
    # the naive family charges kv_format's terms: 2 + 4 + 0.5 + 4 + 15.5
    assert from_config(kv_cache({"bits": 2}), families().kv["naive"]).dequant_ops_per_element(1 << 20) == 26.0


def test_fast_weights_run_the_predicted_kernel():
    """The fast family's GEMM as a run costs it (the profile's fitted chain at the row's padded
    rows) is the one calibration/fast_predictions.py --fitted-jsonl wrote its s21b rows with."""
    profile = load_profile("h200-sxm")
    chip, families = ChipSpec.from_profile(profile), dequant_kernels.from_profile(profile)
    rows = [json.loads(line) for line in (ROOT / "calibration" / "data" / "h200_fast_kernels_predicted_s21b.jsonl")
            .read_text().splitlines()]
    checked = 0
    for r in rows:
        if r.get("impl") == "fast_w4a16_asm" and r["m"] in (1, 16, 32, 64):
            ks = fast_weight_only_gemm("w4a16", 0, r["m"], r["k"], r["n"], chip, weight_addr=1 << 40,
                                       weight_bytes=weight_format.WeightFormat("int4", 128, "fp16").bytes_per_weight,
                                       data=Component.WEIGHT_READ, ops_per_weight=families.weights["fast"].ops(r["m"]))
            assert device_time_s(chip, ks) * 1e6 == pytest.approx(r["us"], rel=1e-3), r
            checked += 1
    assert checked >= 12


def test_fast_weights_fewer_programs_an_sm_past_16_rows():
    """More rows, more registers a program (as compiled), fewer programs an SM: a grid that fits one
    round at 16 rows takes two at 64 (DeepSeek-V3's dense gate/up, 288 programs: 87 -> 187 µs on
    the H100), where the 64-row chain alone is only 13.2 / 11.83 of the 16-row one."""
    chip = ChipSpec.from_profile(load_profile("h100-sxm"))
    fam = dequant_kernels.from_profile(load_profile("h100-sxm")).weights["fast"]
    wb = weight_format.WeightFormat("int4", 128, "fp16").bytes_per_weight

    def us(m):
        return device_time_s(chip, fast_weight_only_gemm("g", 0, m, 7168, 36864, chip, weight_addr=1 << 40,
                                                           weight_bytes=wb, data=Component.WEIGHT_READ,
                                                           ops_per_weight=fam.ops(m))) * 1e6
    assert us(64) / us(16) > 1.5


def run(*sets, path=KV_BASE):
    return run_config(load_scenario(path, [*ONE_STEP, *sets]), intervals=False).summary


def test_fast_is_the_default_and_changes_nothing_when_named():
    default, named, naive = run(), run("kv_cache.kernel=fast"), run("kv_cache.kernel=naive")
    assert default["itl_ms"] == named["itl_ms"] and default["kv"]["kernel"] == "fast"
    assert naive["kv"]["kernel"] == "naive" and naive["itl_ms"]["p50"] > default["itl_ms"]["p50"]
    assert not [w for w in named["warnings"] if "PREDICTED" in w]


def test_the_spread_is_in_the_summary_and_both_software_families_are_measured():
    s = run("kv_cache.kernel=fast")
    k = s["kv"]
    by = k["attention_speedup_by_kernel"]
    assert k["kernel"] == "fast" and by["fast"] == k["attention_speedup"]
    assert by["naive"] < by["fast"] and by["native-decoder"] is None     # the H200 has no decoder
    assert k["kernel_basis"] == {"naive": "measured", "fast": "measured"}
    line = dequant_kernels.spread_line("2.29-bit KV attention", by, k["kernel_basis"])
    assert line.startswith("2.29-bit KV attention over bf16: naive kernel 0.29x (measured); "
                           f"best measured {by['fast']:.2f}x (the fast kernel); native decoder: none on this chip")


def test_the_decoder_what_if_still_runs_and_kernel_native_decoder_is_it():
    whatif = ROOT / "scenarios" / "subbyte-decoder-whatif.yaml"
    by_dequant = run(path=whatif)
    by_kernel = run("kv_cache.kernel=native-decoder", path=whatif)
    assert by_kernel["itl_ms"] == by_dequant["itl_ms"] and by_kernel["kv"]["kernel"] == "native-decoder"
    assert by_kernel["kv"]["attention_speedup"] > 4
    cfg = load_scenario(KV_BASE, ["hardware=h200-decoder", "kv_cache.kernel=native-decoder",
                                  "kv_cache.dequant=decoder"])
    assert cfg.kv_cache.dequant == "decoder"


def test_fast_weights_beat_tinygemm_at_batch_32():
    sets = ["workload.batch_size=32", "weights.experts.format=int4"]
    naive = run(*sets, "weights.experts.kernel=naive", path=ROOT / "scenarios" / "weights-base.yaml")
    fast = run(*sets, "weights.experts.kernel=fast", path=ROOT / "scenarios" / "weights-base.yaml")
    assert fast["itl_ms"]["p50"] < 0.8 * naive["itl_ms"]["p50"]     # 8 rows an expert: measured 1.8x tinygemm at 16
    assert naive["weights"]["kernel"]["experts"] == "naive" and fast["weights"]["kernel"]["experts"] == "fast"
    assert not [w for w in fast["warnings"] if "PREDICTED" in w]


@pytest.mark.parametrize("sets, key", [
    (["kv_cache.bits=4", "kv_cache.kernel=native-decoder", "kv_cache.dequant=software"], "kv_cache"),
    (["kv_cache.bits=4", "kv_cache.kernel=fast", "kv_cache.dequant=unfused"], "kv_cache"),
    (["kv_cache.bits=4", "kv_cache.kernel=naive", "kv_cache.dequant=decoder"], "kv_cache"),
    (["kv_cache.kernel=naive"], "kv_cache.kernel"),      # a bf16 cache has no dequant kernel (issue 42)
    (["weights.experts.format=int4", "weights.experts.kernel=fast", "weights.experts.dequant=decoder"], "weights"),
    (["hardware=b200", "kv_cache.bits=2", "kv_cache.kernel=fast"], "kv_cache.kernel"),
])
def test_contradictions_and_missing_families_exit_2_with_one_line(sets, key, tmp_path):
    args = [a for s in sets for a in ("--set", s)]
    p = subprocess.run([sys.executable, "-m", "hwsim.cli", "run", "--dry-run", *args, "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 2, p.stderr
    assert f"key '{key}'" in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_the_expert_gemm_spread_is_in_the_summary():
    weights = ROOT / "scenarios" / "weights-base.yaml"
    sets = ["workload.batch_size=32", "weights.format=int4", "weights.attention.format=bf16", "weights.kernel=fast"]
    s = run(*sets, path=weights)["weights"]
    by = s["expert_gemm_speedup_by_kernel"]
    assert by["rows"] == 8                       # 32 tokens x top-2 over the 8 experts all of them pick
    assert by["naive"] < 1 < by["fast"] and by["native-decoder"] is None
    assert s["kernel_basis"] == {"naive": "measured", "fast": "measured"}
    # weights.kernel spreads to every class, and acts on codes only: bf16 attention stays native
    assert s["kernel"] == {"experts": "fast", "attention": None, "embeddings": "fast"}
    decoder = run(*sets[:3], "hardware=h200-decoder", path=weights)["weights"]
    assert decoder["expert_gemm_speedup_by_kernel"]["native-decoder"] > 1
    assert run(path=weights)["weights"]["expert_gemm_speedup_by_kernel"] is None      # bf16 experts


def test_a_what_if_chip_can_change_the_naive_family_and_the_scenario_key_overrides_it():
    sets = ["kv_cache.bits=2", "kv_cache.kernel=naive"]
    base = load_scenario(None, sets)
    profile = load_profile("h200-sxm")
    block = profile.dequant_kernels.kv.naive
    cheap = profile.model_copy(update={"dequant_kernels": profile.dequant_kernels.model_copy(update={
        "kv": profile.dequant_kernels.kv.model_copy(update={"naive": block.model_copy(update={
            "relayout_ops_subbyte": block.relayout_ops_subbyte.model_copy(update={"value": 1.5})})})})})
    f = dequant_kernels.from_profile(cheap)
    assert from_config(base.kv_cache, dequant_kernels.kv_kernel(base.kv_cache, f)).dequant_ops_per_element(4096) == 12.0
    own = load_scenario(None, [*sets, "kv_cache.relayout_ops_subbyte=5.5"]).kv_cache
    assert from_config(own, dequant_kernels.kv_kernel(own, f)).dequant_ops_per_element(4096) == 16.0
