"""Issue 34: sensitivity and goal-seek against analytic answers, and their bad input."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hwsim.whatif.goal import goal
from hwsim.whatif.numbers import evaluate, load_base
from hwsim.whatif.reuse import SharedPlans
from hwsim.whatif.sensitivity import sensitivity

ROOT = Path(__file__).resolve().parents[1]
HWSIM = [sys.executable, "-m", "hwsim.cli"]
NEGLIGIBLE = {"value": 1e-5, "source": "test: negligible"}
HUGE = {"value": 1e6, "source": "test: never the limit"}


@pytest.fixture(scope="module")
def hbm_bound(tmp_path_factory) -> Path:
    """A scenario whose decode step is purely HBM-bound: the H200 profile with every latency,
    launch and fixed cost negligible and every compute and on-chip rate huge (no power block:
    the clock stays at its maximum), decoding a dense 2-layer model at batch 1."""
    d = tmp_path_factory.mktemp("hbm_bound")
    prof = yaml.safe_load((ROOT / "hardware_profiles" / "h200-sxm.yaml").read_text())
    prof["name"] = "hbm-bound"
    prof["launch"] = {"graph_us": NEGLIGIBLE, "eager_us": NEGLIGIBLE}
    prof["kernel"]["fixed_us"] = NEGLIGIBLE
    for block, key in (("hbm", "access_latency_ns"), ("l2", "hit_latency_ns"), ("bus", "latency_ns"),
                       ("hbm", "queueing_factor")):
        prof[block][key] = NEGLIGIBLE
    prof["sm"]["tensor_tflops"] = {dtype: HUGE for dtype in prof["sm"]["tensor_tflops"]}
    for key in ("vector_tflops_fp32", "alu_int_ops_per_clk", "inflight_kib_per_block"):
        prof["sm"][key] = HUGE
    prof["l2"]["bandwidth_gbps"] = prof["bus"]["bandwidth_gbps"] = {"value": 1e7, "source": "test"}
    del prof["power"], prof["interconnect"]
    (d / "hbm-bound.yaml").write_text(yaml.safe_dump(prof))
    (d / "dense.yaml").write_text(yaml.safe_dump({
        "name": "dense-test", "source": "test: a dense 2-layer model", "layers": 2, "hidden": 4096,
        "vocab": 32000, "ffn": 14336, "attention": {"kind": "gqa", "heads": 32, "kv_heads": 8, "head_dim": 128}}))
    scenario = d / "scenario.yaml"
    scenario.write_text(yaml.safe_dump({
        "name": "hbm-bound", "hardware": str(d / "hbm-bound.yaml"), "model": str(d / "dense.yaml"),
        "workload": {"batch_size": 1, "context_tokens": 1024, "decode_steps": 1}}))
    return scenario


def test_hbm_bound_step_elasticities_are_minus_one_and_zero(hbm_bound):
    keys = ["hbm.peak_bandwidth_gbps", "sm.clock_mhz", "launch.graph_us"]
    # with a short prefill (weight-bound too): the same for TTFT
    result, _ = sensitivity(load_base(hbm_bound, ["workload.prompt_tokens=16"]), keys=keys)
    rows = {r["key"]: r for r in result["rows"]}
    assert rows["hbm.peak_bandwidth_gbps"]["itl_elasticity"] == pytest.approx(-1.0, abs=0.02)
    assert rows["hbm.peak_bandwidth_gbps"]["ttft_elasticity"] == pytest.approx(-1.0, abs=0.02)
    # the SM clock and the launch cost never limit it: no effect at all, or an elasticity of 0
    for key in ("sm.clock_mhz", "launch.graph_us"):
        assert key in result["no_effect"] or abs(rows[key]["itl_elasticity"]) < 0.02
    # +10% bandwidth: the token shrinks by 1 - 1/1.1 of itself
    gained = rows["hbm.peak_bandwidth_gbps"]["itl_ms_gained_10pct"]
    assert gained == pytest.approx(result["itl_ms"] * (1 - 1 / 1.1), rel=0.02)


def test_goal_seek_finds_the_closed_form_bandwidth(hbm_bound):
    base = load_base(hbm_bound, [])
    s = evaluate(base, {})
    target = 0.6 * s["itl_ms"]["p50"]
    # the step streams its bytes at the read efficiency: bandwidth = bytes / (time x efficiency)
    moved = s["bytes"]["weights"] + s["bytes"]["kv"] + s["bytes"]["activations"]
    closed_form = moved / (target * 1e-3 * base.profile.hbm.read_efficiency.value) / 1e9
    r = goal(base, "hbm.peak_bandwidth_gbps", "itl_ms.p50", target)
    assert r["value"] == pytest.approx(closed_form, rel=0.01)
    assert r["metric"] == pytest.approx(target, rel=1e-4)
    lo, hi = r["bracket"]
    assert lo <= r["value"] <= hi
    assert r["dominant"] == "weight_read"
    assert [s["phase"] for s in r["steps"]][0] == "start" and r["steps"][-1]["phase"] == "result"


def test_replayed_plans_time_as_a_rebuild_does(scenario_factory):
    """A profile number no plan reads: the base run's kernels replayed give the same run."""
    base = load_base(None, ["workload.decode_steps=2"])
    shared = SharedPlans(base)
    assert shared.enabled and {"sms", "gemm_tile_n"} <= shared.fields
    assert "hbm_peak_bytes_s" not in shared.fields and "launch_graph_s" not in shared.fields
    for key, value in (("hbm.peak_bandwidth_gbps", 5000.0), ("l2.hit_latency_ns", 120.0), ("sm.count", 120)):
        replayed = evaluate(base, {key: value}, shared)
        rebuilt = evaluate(base, {key: value})
        assert replayed["itl_ms"] == rebuilt["itl_ms"], key
    assert shared.for_profile(base.profile) is shared.plans


def run(*args):
    return subprocess.run([*HWSIM, *args], capture_output=True, text=True, timeout=300, cwd=ROOT)


@pytest.mark.parametrize("args, words", [
    (["--vary", "hbm.bogus", "--target", "itl_ms.p50=8"], "not a number of the hardware profile"),
    (["--vary", "workload.nope", "--target", "itl_ms.p50=8"], "not a number of the hardware profile or"),
    (["--vary", "runtime.launch", "--target", "itl_ms.p50=8"], "not numeric"),
    (["--vary", "hbm.generation", "--target", "itl_ms.p50=8"], "not numeric"),
    (["--vary", "hbm.peak_bandwidth_gbps", "--target", "itl_ms.p50=ten"], "METRIC=VALUE"),
    (["--vary", "hbm.peak_bandwidth_gbps", "--target", "itl_ms.p50=2"], "no value of hbm.peak_bandwidth_gbps"),
    (["--vary", "sm.count", "--target", "itl_ms.p50=9", "--bracket", "8,264"], "not monotone"),
    (["--vary", "sm.count", "--target", "ttft_ms.p50=9"], "reports no number 'ttft_ms.p50'"),
    (["--vary", "sm.count", "--vary", "sm.count", "--target", "itl_ms.p50=9"], "two different ones"),
])
def test_goal_bad_input_is_one_line_and_exit_2(args, words):
    p = run("goal", "--set", "workload.decode_steps=1", *args)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in p.stderr


def test_unreachable_target_names_what_dominates():
    p = run("goal", "--set", "workload.decode_steps=1", "--vary", "hbm.peak_bandwidth_gbps",
            "--target", "itl_ms.p50=2", "--json")
    assert p.returncode == 2
    report = json.loads(p.stdout)
    assert report["reachable"] is False and report["dominant"] == "kernel_overhead"
    assert report["best_value"] == report["bounds"][1]
    assert "kernel_overhead takes" in p.stderr


def test_sensitivity_cli_writes_the_sorted_table_and_tornado(hbm_bound, tmp_path):
    out = tmp_path / "sens"
    p = run("sensitivity", str(hbm_bound), "--json", "--out", str(out))
    assert p.returncode == 0, p.stderr
    result = json.loads(p.stdout)
    elasticities = [abs(r["itl_elasticity"]) for r in result["rows"]]
    assert elasticities == sorted(elasticities, reverse=True)
    assert result["rows"][0]["key"] in ("hbm.peak_bandwidth_gbps", "hbm.read_efficiency")
    assert "sm.clock_mhz" in result["no_effect"]
    assert (out / "tornado.png").stat().st_size > 1000
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["sensitivity"]["rows"] == result["rows"] and manifest["summary"]["itl_ms"]
    assert run("report", str(out)).returncode == 0
    page = (out / "index.html").read_text()
    assert 'alt="tornado.png"' in page and "hbm.peak_bandwidth_gbps" in page
    assert run("sensitivity", str(hbm_bound), "--out", str(out)).returncode == 0    # its own folder again


def test_a_what_if_never_writes_over_a_run_bundle_or_a_foreign_folder(tmp_path):
    """Its manifest.json would replace theirs (issue 29's rule for --out): refused before any run."""
    for name, files in (("bundle", {"manifest.json": json.dumps({"hwsim_bundle": 1, "files": {}})}),
                        ("project", {"manifest.json": "{}", "app.py": "print()"})):
        out = tmp_path / name
        out.mkdir()
        for file, text in files.items():
            (out / file).write_text(text)
        p = run("sensitivity", "--out", str(out))
        assert p.returncode == 2 and "refusing" in p.stderr and str(out) in p.stderr, p.stderr
        assert {f.name: f.read_text() for f in out.iterdir()} == files


def test_frontier_of_bandwidth_and_efficiency_keeps_their_product(hbm_bound):
    """An HBM-bound step depends on peak bandwidth x read efficiency alone: the frontier of the
    two at a target is the hyperbola a x b = constant (where the efficiency stays <= 1)."""
    from hwsim.whatif.goal import frontier
    base = load_base(hbm_bound, [])
    target = 0.8 * evaluate(base, {})["itl_ms"]["p50"]
    front = frontier(base, "hbm.peak_bandwidth_gbps", "hbm.read_efficiency", "itl_ms.p50", target, points=4)
    products = [p["hbm.peak_bandwidth_gbps"] * p["hbm.read_efficiency"] for p in front["points"]
                if p["hbm.read_efficiency"] is not None]
    assert len(products) >= 2
    assert max(products) == pytest.approx(min(products), rel=0.01)
    # where the efficiency would have to pass 1, no value can: said, not invented
    assert front["points"][0]["hbm.read_efficiency"] is None
