"""The command line: bundle contents, the --json contract, and clean failures (exit 2)."""

import json
import subprocess
import sys

import pandas as pd
import pytest

HWSIM = [sys.executable, "-m", "hwsim.cli"]
CONTRACT = {"scenario", "hardware", "model", "seed", "budget_ms", "itl_ms", "ttft_ms",
            "breakdown_ms", "bytes", "sim"}


def run(*args, cwd=None):
    return subprocess.run([*HWSIM, *args], capture_output=True, text=True, cwd=cwd, timeout=300)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle") / "run"
    res = run("run", "--set", "workload.decode_steps=2", "--out", str(out), "--json")
    assert res.returncode == 0, res.stderr
    return out, res


def test_json_is_one_object_with_the_contract_keys(bundle):
    out, res = bundle
    lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1
    summary = json.loads(lines[0])
    assert CONTRACT <= set(summary)
    assert set(summary["itl_ms"]) >= {"p50", "p99", "mean"}
    assert {"weights", "kv"} <= set(summary["bytes"])
    assert {"events", "wall_s", "simulated_tokens"} <= set(summary["sim"])
    assert summary["ttft_ms"] is None


def test_bundle_files(bundle):
    out, _ = bundle
    manifest = json.loads((out / "manifest.json").read_text())
    cfg = manifest["resolved_config"]
    assert cfg["runtime"]["launch"] == "graph" and cfg["workload"]["decode_steps"] == 2
    assert manifest["seed"] == 0 and manifest["error"] is None
    assert manifest["provenance"]["hwsim_version"]
    events = pd.read_parquet(out / "events.parquet")
    assert len(events) == 2 * manifest["summary"]["kernels_per_step"]
    breakdown = pd.read_csv(out / "breakdown.csv")
    assert len(breakdown) == 2
    # the breakdown plot by default; the slower figures on request (issue 28)
    assert sorted(manifest["files"]) == ["breakdown.csv", "breakdown.png", "events.parquet"]
    assert [p.name for p in out.glob("*.png")] == ["breakdown.png"]
    assert (out / "breakdown.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plots_draws_the_figures_into_the_same_bundle(bundle, tmp_path):
    out, res = bundle
    plotted = tmp_path / "plotted"
    again = run("run", "--set", "workload.decode_steps=2", "--out", str(plotted), "--plots", "--json")
    assert again.returncode == 0, again.stderr
    files = json.loads((plotted / "manifest.json").read_text())["files"]
    assert sorted(files) == ["breakdown.csv", "breakdown.png", "channels.png", "events.parquet", "gantt.png"]
    for png in ("breakdown.png", "channels.png", "gantt.png"):
        assert (plotted / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    tables = json.loads((out / "manifest.json").read_text())["files"]
    assert {name: files[name] for name in tables} == tables         # the same files, byte for byte


def test_bad_input_exits_2_without_traceback_and_keeps_old_bundle(bundle, tmp_path):
    out, _ = bundle
    before = (out / "manifest.json").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text("hardware: h200-sxm\nmodel: mixtral-8x7b\nworkload:\n  batch_size: 0\n")
    res = run("run", str(bad), "--out", str(out))
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert "bad.yaml:4" in res.stderr and "workload.batch_size" in res.stderr
    assert (out / "manifest.json").read_text() == before
    res = run("run", "--set", "runtime.launch=warp", "--out", str(out))
    assert res.returncode == 2 and "--set" in res.stderr and "runtime.launch" in res.stderr


def test_missing_scenario_file_exits_2(tmp_path):
    res = run("run", str(tmp_path / "nope.yaml"))
    assert res.returncode == 2 and "file not found" in res.stderr


def test_trace_export_has_a_slice_per_kernel_and_named_tracks(tmp_path):
    out = tmp_path / "t"
    res = run("run", "--set", "workload.decode_steps=1", "--set", "moe.prefetch.enabled=true",
              "--trace", "--out", str(out), "--json")
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    trace = json.loads((out / "trace.json").read_text())
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"kernels", "bus", "copy engine 0", "HBM stack 0"} <= names
    # SM lanes hold block slots in fill order, and say so; none claims to be physical SMs (issue 28)
    assert "slot lane 0 (16 SMs' slots, fill order)" in names
    assert not any(n.startswith("SMs ") for n in names)
    assert "decoder" not in names and "NVLink out" not in names     # the H200 has no decoder; no link used
    tid = {e["args"]["name"]: e["tid"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    kernel_slices = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["tid"] == tid["kernels"]]
    assert len(kernel_slices) == summary["kernels_per_step"]
    copies = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["tid"] == tid["copy engine 0"]]
    assert copies and all(e["dur"] > 0 for e in copies)
    # a unit's slices are its own: no HBM stack is busy longer than the step, shares within (0, 1]
    for lane in ("HBM stack 0", "bus", "copy engine 0"):
        slices = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["tid"] == tid[lane]]
        assert all(0 < e["args"]["share"] <= 1.0 + 1e-9 for e in slices)
        assert sum(e["dur"] * e["args"]["share"] for e in slices) <= summary["itl_ms"]["p50"] * 1e3 * 1.001


@pytest.mark.parametrize("manifest", ["[]", "{}", '{"summary": null}', "{not json"])
def test_report_of_a_corrupt_manifest_exits_2(tmp_path, manifest):
    (tmp_path / "manifest.json").write_text(manifest)
    res = run("report", str(tmp_path))
    assert res.returncode == 2 and "Traceback" not in res.stderr and "manifest.json" in res.stderr


def test_out_naming_a_file_and_a_bad_request_trace_exit_2(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    res = run("run", "--set", "workload.decode_steps=1", "--out", str(afile))
    assert res.returncode == 2 and "--out" in res.stderr and afile.read_text() == "x"
    trace = tmp_path / "log.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,abc,3\n")
    res = run("run", "--set", "workload.arrivals.kind=trace",     # (voice-agent's gamma keys are not a trace's)
              "--set", f"workload.arrivals.trace={trace}", "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and f"{trace}:2" in res.stderr and "Traceback" not in res.stderr


def test_non_scalar_yaml_key_exits_2(tmp_path):
    bad = tmp_path / "s.yaml"
    bad.write_text("hardware: h200-sxm\n? [a, b]\n: 1\n")
    res = run("run", str(bad))
    assert res.returncode == 2 and "s.yaml:2" in res.stderr and "Traceback" not in res.stderr
