"""After `pip install .`, profiles and scenarios are found from any working folder."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import hwsim.config.load as load

REPO = Path(__file__).resolve().parents[1]


def test_profiles_are_found_under_the_install_prefix(tmp_path, monkeypatch):
    prefix = tmp_path / "prefix"
    shutil.copytree(REPO / "hardware_profiles", prefix / "share" / "hwsim" / "hardware_profiles")
    monkeypatch.setattr(load, "REPO_ROOT", tmp_path / "no-source-tree")
    monkeypatch.setattr(sys, "prefix", str(prefix))
    monkeypatch.delenv("HWSIM_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    assert load.load_profile("h200-sxm").name
    assert "h200-sxm" in load.builtin_profiles()
    from hwsim.parallel.topology import load_topology
    assert load_topology("hgx-h200-8").chip == "h200-sxm"        # topologies too (issue 18)
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "empty"))
    monkeypatch.setattr(load.site, "getuserbase", lambda: str(tmp_path / "empty"))
    with pytest.raises(load.ConfigError, match="known: none found"):
        load.load_profile("h200-sxm")


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to list the tracked files")
def test_the_wheel_ships_the_profiles_scenarios_and_models(tmp_path):
    src = tmp_path / "src"
    files = subprocess.run(["git", "-C", str(REPO), "ls-files", "pyproject.toml", "README.md", "hwsim",
                            "hardware_profiles", "scenarios"], capture_output=True, text=True).stdout.split()
    for f in files:
        if (REPO / f).is_file():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO / f, src / f)
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                          "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    names = zipfile.ZipFile(next((tmp_path / "dist").glob("hwsim-*.whl"))).namelist()
    data = [n for n in names if ".data/data/share/hwsim/" in n]
    assert {Path(n).name for n in data if n.split("/")[-2] == "hardware_profiles"} == \
        {p.name for p in (REPO / "hardware_profiles").glob("*.yaml")}
    assert {Path(n).name for n in data if n.split("/")[-2] == "topologies"} == \
        {p.name for p in (REPO / "hardware_profiles" / "topologies").glob("*.yaml")}
    assert any(n.endswith("/scenarios/default.yaml") for n in data)
    assert any(n.endswith("hwsim/data/models/mixtral-8x7b.yaml") for n in names)
