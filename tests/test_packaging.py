"""After `pip install .`, profiles and scenarios are found from any working folder."""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import hwsim.config.load as load

REPO = Path(__file__).resolve().parents[1]


def test_profiles_are_found_in_the_package_data(tmp_path, monkeypatch):
    data = tmp_path / "site" / "hwsim" / "data"
    shutil.copytree(REPO / "hardware_profiles", data / "hardware_profiles")
    monkeypatch.setattr(load, "REPO_ROOT", tmp_path / "no-source-tree")
    monkeypatch.setattr(load, "PACKAGE_DATA", data)
    monkeypatch.delenv("HWSIM_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    assert load.load_profile("h200-sxm").name
    assert "h200-sxm" in load.builtin_profiles()
    from hwsim.parallel.topology import load_topology
    assert load_topology("hgx-h200-8").chip == "h200-sxm"        # topologies too (issue 18)
    monkeypatch.setattr(load, "PACKAGE_DATA", tmp_path / "empty")
    with pytest.raises(load.ConfigError, match="known: none found"):
        load.load_profile("h200-sxm")


def test_a_scenario_is_found_by_name_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("HWSIM_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    assert load.scenario_path("voice-agent") == REPO / "scenarios" / "voice-agent.yaml"
    assert load.scenario_path("voice-agent.yaml") == REPO / "scenarios" / "voice-agent.yaml"
    assert load.load_scenario("voice-agent").name == "voice-agent"
    with pytest.raises(load.ConfigError, match="no scenario of that name"):
        load.scenario_path("no-such-scenario")
    with pytest.raises(load.ConfigError, match="file not found"):
        load.load_scenario("sub/voice-agent.yaml")      # a path is never looked up by name


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to list the tracked files")
def test_the_wheel_ships_the_profiles_scenarios_and_models(tmp_path):
    src = tmp_path / "src"
    files = subprocess.run(["git", "-C", str(REPO), "ls-files", "pyproject.toml", "setup.py", "MANIFEST.in",
                            "README.md", "hwsim", "hardware_profiles", "scenarios"],
                           capture_output=True, text=True).stdout.split()
    assert "setup.py" in files
    for f in files:
        if (REPO / f).is_file():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO / f, src / f)
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                          "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    wheel = zipfile.ZipFile(next((tmp_path / "dist").glob("hwsim-*.whl")))
    names = wheel.namelist()
    for folder in ("hardware_profiles", "hardware_profiles/topologies", "scenarios"):
        shipped = {Path(n).name for n in names if n.startswith(f"hwsim/data/{folder}/") and n.count("/") ==
                   folder.count("/") + 3}
        assert shipped >= {p.name for p in (REPO / folder).glob("*.yaml")}, folder
    assert "hwsim/data/models/mixtral-8x7b.yaml" in names
    assert not (src / "hwsim" / "data" / "scenarios").exists()     # copied into the build, not the source
    # installed (a pure-python wheel unpacked on the path) and run from a folder without
    # scenarios/: a scenario is found by name (issue 28)
    site = tmp_path / "site"
    wheel.extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "HWSIM_HOME"} | {"PYTHONPATH": str(site)}
    res = subprocess.run([sys.executable, "-m", "hwsim.cli", "run", "voice-agent", "--dry-run", "--json"],
                         cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    assert plan["scenario_file"] == str(site / "hwsim" / "data" / "scenarios" / "voice-agent.yaml")
    assert plan["resolved_config"]["name"] == "voice-agent"
    assert not any(elsewhere.iterdir())                             # a dry run writes nothing
