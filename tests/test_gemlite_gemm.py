"""Issue 44 item 2: gemlite's kernels as hwsim builds them (hwsim/model/gemlite_gemm.py): the kernel
gemlite 0.6 picks by rows and bits, the grid its launch config gives, and a few measured H100 rows
(calibration/data/h100_gemlite.jsonl) predicted from the fitted costs within tolerance."""

import json
import sys
from pathlib import Path

import pytest

from hwsim import operators as mb
from hwsim.config.load import load_profile
from hwsim.hw.chip import ChipSpec
from hwsim.metrics import Component
from hwsim.model.gemlite_gemm import H100_COSTS, LaunchConfig, gemlite_gemm, matmul_type

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "calibration"))
import library_grid  # noqa: E402

ROWS = ROOT / "calibration" / "data" / "h100_gemlite.jsonl"


@pytest.fixture(scope="module")
def chip():
    return ChipSpec.from_profile(load_profile("h100-sxm"))


def measured(impl, shape, model, m):
    for line in ROWS.read_text().splitlines():
        r = json.loads(line)
        if (r.get("part"), r.get("impl"), r.get("shape"), r.get("model"), r.get("m")) == ("gemm", impl, shape, model, m):
            return r
    raise AssertionError(f"no row {impl} {shape} {model} m={m}")


def build(chip, r):
    return gemlite_gemm("g", 0, r["m"], r["k"], r["n"], r["bits"], r["group"], LaunchConfig.from_gemlite(r["config"]),
                        H100_COSTS, chip, weight_addr=mb.GEMM_WEIGHT_ADDR, data=Component.WEIGHT_READ)


def test_the_kernel_by_rows_is_gemlites_rule_and_what_the_rows_ran():
    assert [matmul_type(m, 4) for m in (1, 4, 5, 63, 64)] == [
        "GEMV_REVSPLITK", "GEMV_REVSPLITK", "GEMM_SPLITK", "GEMM_SPLITK", "GEMM"]
    assert [matmul_type(m, 8) for m in (1, 2, 3, 64)] == ["GEMV_SPLITK", "GEMV_SPLITK", "GEMM_SPLITK", "GEMM"]
    for line in ROWS.read_text().splitlines():
        r = json.loads(line)
        if r.get("part") == "gemm" and r["impl"] != "bf16":
            assert matmul_type(r["m"], r["bits"]) == r["matmul_type"] == library_grid.matmul_type(r["m"], r["bits"])


def test_revsplitk_grid_reexpands_the_codes_per_row(chip):
    """GEMV_REVSPLITK: M x N/BN x K/(2 BK) programs after a zero fill; every row streams the codes
    again (from L2 past the first), so the grid and the ALU work grow with m."""
    cfg = LaunchConfig(block_m=1, block_n=256, block_k=8, num_warps=2, num_stages=2)
    one = gemlite_gemm("g", 0, 1, 4096, 28672, 4, 64, cfg, H100_COSTS, chip, weight_addr=0, data=Component.WEIGHT_READ)
    four = gemlite_gemm("g", 0, 4, 4096, 28672, 4, 64, cfg, H100_COSTS, chip, weight_addr=0, data=Component.WEIGHT_READ)
    assert [k.name for k in one] == ["g.zero", "g"]
    assert one[1].tiles == 28672 / 256 * 4096 / 16 and four[1].tiles == 4 * one[1].tiles
    assert one[1].tensor_flops == 0 and one[1].int_ops == four[1].int_ops
    assert four[1].hbm_read == pytest.approx(one[1].hbm_read / 4)


def test_gemm_without_split_writes_directly(chip):
    cfg = LaunchConfig(block_m=128, block_n=128, block_k=32, num_warps=8, num_stages=1)
    ks = gemlite_gemm("g", 0, 64, 4096, 28672, 4, 64, cfg, H100_COSTS, chip, weight_addr=0, data=Component.WEIGHT_READ)
    assert len(ks) == 1 and ks[0].tiles == 224 and not ks[0].mma_sync
    assert ks[0].round_trips == pytest.approx(H100_COSTS.trips("GEMM") * 4096 / 32)


@pytest.mark.parametrize("impl,shape,model,m,tol", [
    ("gemlite_a16w4", "expert_gate_up", "mixtral-8x7b", 1, 0.08),     # fit rows
    ("gemlite_a16w4", "expert_gate_up", "mixtral-8x7b", 4, 0.08),
    ("gemlite_a16w4", "expert_down", "mixtral-8x7b", 64, 0.12),
    ("gemlite_a16w2", "attn_qkv", "qwen3-30b-a3b", 1, 0.10),          # held out
    ("gemlite_a16w4", "expert_down", "qwen3-30b-a3b", 16, 0.15),
    ("gemlite_a16w8", "expert_gate_up", "qwen3-30b-a3b", 16, 0.15),
])
def test_measured_rows_within_tolerance(chip, impl, shape, model, m, tol):
    r = measured(impl, shape, model, m)
    us = mb.device_time_s(chip, build(chip, r)) * 1e6
    assert us == pytest.approx(r["ms"] * 1e3, rel=tol)


def test_the_row_rule_shows_in_time(chip):
    """gemlite's m=4 REVSPLITK re-expands the codes four times: slower than its m=8 GEMM_SPLITK, as
    measured (152 vs 64 µs at Mixtral's gate_up)."""
    t4 = mb.device_time_s(chip, build(chip, measured("gemlite_a16w4", "expert_gate_up", "mixtral-8x7b", 4)))
    t8 = mb.device_time_s(chip, build(chip, measured("gemlite_a16w4", "expert_gate_up", "mixtral-8x7b", 8)))
    assert t4 > 2 * t8


def test_the_shipped_configs_give_every_row_the_config_it_ran():
    from hwsim.model.gemlite_configs import load_configs, pick_config
    configs = load_configs("h100")
    n = 0
    for line in ROWS.read_text().splitlines():
        r = json.loads(line)
        if r.get("part") != "gemm" or r["impl"] == "bf16":
            continue
        cfg, _ = pick_config(configs, r["m"], r["n"], r["k"], r["group"], r["bits"])
        assert cfg == LaunchConfig.from_gemlite(r["config"]), (r["impl"], r["shape"], r["m"])
        n += 1
    assert n == 146


def test_gemlite_takes_no_three_bit_codes(chip):
    with pytest.raises(ValueError, match="not 3-bit"):
        gemlite_gemm("g", 0, 1, 4096, 4096, 3, 64, LaunchConfig(1, 128, 8), H100_COSTS, chip,
                     weight_addr=0, data=Component.WEIGHT_READ)


@pytest.mark.parametrize("m,k,n,quicker", [
    (1, 768, 2048, "gemlite"),       # measured 3.5 vs 7.4 µs (Qwen3 expert_down)
    (16, 768, 2048, "gemlite"),      # 4.1 vs 7.9
    (4, 4096, 28672, "fast"),        # 152.4 vs 37.4 (Mixtral gate_up: REVSPLITK re-expands per row)
    (64, 14336, 4096, "fast"),       # 166.7 vs 45.7
])
def test_the_quicker_four_bit_kernel_is_the_measured_one(chip, m, k, n, quicker):
    from hwsim.model.dequant_kernels import from_profile
    from hwsim.model.gemlite_configs import load_configs
    from hwsim.speedups.gemlite_choice import w4_times_us
    got = w4_times_us(chip, from_profile(load_profile("h100-sxm")), load_configs("h100"), m, k, n)
    assert got["quicker"] == quicker


def test_the_fit_file_is_the_modules_costs_and_the_compare_file_is_current(chip):
    """calibration/data/fit_gemlite_h100_s22.txt's numbers are H100_COSTS, and the compare file's
    tables are what calibration/fit_gemlite.py --compare writes at them today."""
    import fit_gemlite
    line = (ROOT / "calibration" / "data" / "fit_gemlite_h100_s22.txt").read_text().splitlines()[1]
    words = line.replace(",", "").split()
    assert float(words[1]) == H100_COSTS.gemv_ops_per_weight and float(words[3]) == H100_COSTS.gemm_ops_per_weight
    assert {words[i]: float(words[i + 1]) for i in range(5, len(words), 2)} == dict(H100_COSTS.step_trips)
    sys.path.insert(0, str(ROOT / "validation"))
    text = (ROOT / "calibration" / "data" / "h100_gemlite_compare_s22.md").read_text()
    assert fit_gemlite.compare_markdown(chip, H100_COSTS) in text
