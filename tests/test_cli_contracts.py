"""The command line's contracts (issue 28): which figures a run draws, one output folder per
scenario variant with a `latest` link, `hwsim list`, `run --dry-run`, flags shown as flags."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ONE_STEP = ["--set", "workload.decode_steps=1"]


def hwsim(*args, cwd):
    env = {**os.environ, "PYTHONPATH": str(REPO)}           # this tree's hwsim, from any folder
    return subprocess.run([sys.executable, "-m", "hwsim.cli", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=300)


def test_no_plots_writes_no_figure(tmp_path):
    res = hwsim("run", *ONE_STEP, "--no-plots", "--out", tmp_path / "b", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert sorted(json.loads((tmp_path / "b" / "manifest.json").read_text())["files"]) == \
        ["breakdown.csv", "events.parquet"]
    assert not list((tmp_path / "b").glob("*.png"))


def test_each_variant_of_a_scenario_gets_its_own_folder_and_latest_links_the_last(tmp_path):
    res = hwsim("run", "--no-plots", cwd=tmp_path)                 # no override: the scenario's name
    assert res.returncode == 0, res.stderr
    plain = tmp_path / "reports" / "mixtral-h200-decode"
    assert (plain / "manifest.json").is_file()
    assert os.readlink(tmp_path / "reports" / "latest") == "mixtral-h200-decode"
    before = (plain / "manifest.json").read_bytes()
    # another override: another folder; the first run's bundle is left as it was
    res = hwsim("run", "--set", "workload.batch_size=2", *ONE_STEP, "--no-plots", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    folders = sorted(p.name for p in (tmp_path / "reports").iterdir() if not p.is_symlink())
    assert len(folders) == 2 and folders[0] == "mixtral-h200-decode"
    assert folders[1].startswith("mixtral-h200-decode-") and len(folders[1]) == len(folders[0]) + 9
    assert (plain / "manifest.json").read_bytes() == before
    latest = (tmp_path / "reports" / "latest").resolve()
    assert json.loads((latest / "manifest.json").read_text())["resolved_config"]["workload"]["batch_size"] == 2
    # the same overrides in another order: the same folder (stable names)
    res = hwsim("run", *ONE_STEP, "--set", "workload.batch_size=2", "--no-plots", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in (tmp_path / "reports").iterdir() if not p.is_symlink()) == folders
    # --out still wins, and leaves reports/latest alone
    res = hwsim("run", *ONE_STEP, "--no-plots", "--out", tmp_path / "mine", cwd=tmp_path)
    assert res.returncode == 0 and (tmp_path / "mine" / "manifest.json").is_file()
    assert (tmp_path / "reports" / "latest").resolve() == latest
    # --out naming the link itself is refused: the link and the bundle it names are left as they were
    res = hwsim("run", *ONE_STEP, "--no-plots", "--out", Path("reports") / "latest", cwd=tmp_path)
    assert res.returncode == 2 and "symbolic link" in res.stderr
    assert (tmp_path / "reports" / "latest").is_symlink() and (tmp_path / "reports" / "latest").resolve() == latest
    assert len(list((tmp_path / "reports").iterdir())) == 3


def test_latest_that_is_a_real_folder_is_left_alone(tmp_path):
    own = tmp_path / "reports" / "latest"
    own.mkdir(parents=True)
    (own / "notes.txt").write_text("mine")
    res = hwsim("run", *ONE_STEP, "--no-plots", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert not own.is_symlink() and (own / "notes.txt").read_text() == "mine"


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path):
    res = hwsim("run", "voice-agent", "--set", "hardware=b200", "--dry-run", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    assert plan["scenario_file"].endswith("voice-agent.yaml") and plan["overrides"] == ["hardware=b200"]
    assert plan["resolved_config"]["hardware"] == "b200"
    assert plan["out"].startswith(str(Path("reports") / "voice-agent-")) and not plan["replaces_bundle"]
    assert plan["estimate"]["wall_s"] > 0 and plan["estimate"]["memory_gb"] > 0
    text = hwsim("run", "voice-agent", "--dry-run", cwd=tmp_path)
    assert text.returncode == 0 and "estimated cost: about" in text.stdout
    assert "bundle would go to: reports/voice-agent/" in text.stdout and "hardware: h200-sxm" in text.stdout
    assert not list(tmp_path.iterdir())
    bad = hwsim("run", "voice-agent", "--set", "workload.batch_size=0", "--dry-run", cwd=tmp_path)
    assert bad.returncode == 2 and "workload.batch_size" in bad.stderr
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    refused = hwsim("run", "--dry-run", "--out", theirs, cwd=tmp_path)      # as the run would be
    assert refused.returncode == 2 and "--out" in refused.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["theirs"] and (theirs / "notes.txt").read_text() == "mine"


def test_list_names_what_can_be_run(tmp_path):
    res = hwsim("list", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    found = json.loads(res.stdout)
    assert set(found) == {"profiles", "topologies", "models", "scenarios", "sweeps", "presets"}
    assert "h200-sxm" in found["profiles"] and "hgx-h200-8" in found["topologies"]
    assert "mixtral-8x7b" in found["models"] and "adaptive-2" in found["presets"]
    assert "voice-agent" in found["scenarios"] and "sweep-frontier" in found["sweeps"]
    assert not set(found["scenarios"]) & set(found["sweeps"])
    text = hwsim("list", cwd=tmp_path)
    assert text.returncode == 0 and "voice-agent" in text.stdout


@pytest.mark.parametrize("command", [[], ["run"], ["sweep"], ["list"], ["report"]])
def test_help_shows_flags_as_flags(tmp_path, command):
    res = hwsim(*command, "--help", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "<bool>" not in res.stdout
    if command == ["run"]:
        assert "--no-plots" in res.stdout and "--dry-run" in res.stdout
    if command == ["sweep"]:
        assert "default: 1" in res.stdout


def test_sweep_prints_the_dask_dashboard(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("name: tiny\nbase: {hardware: h200-sxm, model: mixtral-8x7b, workload: {decode_steps: 1}}\n"
                    "factors:\n  - key: workload.batch_size\n    values: [1]\n")
    res = hwsim("sweep", spec, "--out", tmp_path / "o", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "Dask dashboard: http" in res.stderr
    # the sweep's report embeds the figures its manifest lists, each a PNG of the folder
    drawn = json.loads((tmp_path / "o" / "manifest.json").read_text())["plots"]
    res = hwsim("report", tmp_path / "o", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    page = (tmp_path / "o" / "index.html").read_text()
    assert page.count("data:image/png;base64,") == len(drawn) and "not in this bundle" not in page


def test_sm_lanes_are_labelled_slot_lanes_in_the_trace_and_the_gantt_chart():
    from matplotlib.figure import Figure

    from hwsim.metrics import Component
    from hwsim.plots.gantt import plot_gantt
    from hwsim.plots.gantt_view import Item, lane_label

    assert lane_label("SMs 128-131") == "slot lane 8 (4 SMs' slots, fill order)"
    assert lane_label("GPU3 SMs 16-31") == "GPU3 slot lane 1 (16 SMs' slots, fill order)"
    assert lane_label("HBM stack 0") == "HBM stack 0"
    lanes = {"SMs 0-15": [(0.0, 1e-3, "gemm", 1.0)], "HBM stack 0": [(0.0, 1e-3, "gemm", 0.5)]}
    ax = Figure().subplots()
    plot_gantt(ax, lanes, [Item("gemm", Component.GEMM_COMPUTE, 0.0, 1e-3)])
    assert [t.get_text() for t in ax.get_yticklabels()] == [lane_label("SMs 0-15"), "HBM stack 0"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the plotting helper is forked")
@pytest.mark.parametrize("idle", [0.0, 4.0])
def test_default_breakdown_is_the_same_drawn_here_or_by_the_plotting_helper(tmp_path, monkeypatch, idle):
    """With a CPU idle, the helper forked at the start draws breakdown.png; with none, this
    process does: the same file either way, and nothing else drawn."""
    from typer.testing import CliRunner

    import hwsim.io.plotter as plotter
    from hwsim.cli import app

    monkeypatch.setattr(plotter, "idle_cpus", lambda: idle)
    started = []
    real_start = plotter.Plotter.start.__func__
    monkeypatch.setattr(plotter.Plotter, "start", classmethod(lambda cls, *a: started.append(real_start(cls, *a)) or started[-1]))
    res = CliRunner().invoke(app, ["run", *ONE_STEP, "--out", str(tmp_path / "b"), "--json"])
    assert res.exit_code == 0, res.output
    assert (started[0] is not None) == (idle > 0)
    files = json.loads((tmp_path / "b" / "manifest.json").read_text())["files"]
    assert sorted(files) == ["breakdown.csv", "breakdown.png", "events.parquet"]
    drawn = hwsim("run", *ONE_STEP, "--plots", "--out", tmp_path / "all", cwd=tmp_path)
    assert drawn.returncode == 0, drawn.stderr
    assert (tmp_path / "b" / "breakdown.png").read_bytes() == (tmp_path / "all" / "breakdown.png").read_bytes()
