from pathlib import Path

import pytest
import yaml

from hwsim.config.load import load_profile, load_scenario
from hwsim.hw.chip import ChipSpec


@pytest.fixture(scope="session")
def h200() -> ChipSpec:
    return ChipSpec.from_profile(load_profile("h200-sxm"))


@pytest.fixture
def scenario_factory():
    """Load the default scenario with --set style overrides (few steps, to stay fast)."""
    def make(*sets: str):
        return load_scenario(None, ["workload.decode_steps=2", *sets])
    return make


@pytest.fixture
def small_hbm(tmp_path, monkeypatch):
    """The H200 profile as `small-hbm`, with 0.56 GB of HBM (found through HWSIM_HOME): a
    serving run soon has no room for more KV."""
    h200_yaml = Path(__file__).resolve().parents[1] / "hardware_profiles" / "h200-sxm.yaml"
    prof = yaml.safe_load(h200_yaml.read_text())
    prof["name"] = "small-hbm"
    prof["hbm"]["capacity_gb"] = {"value": 0.56, "source": "test"}
    (tmp_path / "hardware_profiles").mkdir()
    (tmp_path / "hardware_profiles" / "small-hbm.yaml").write_text(yaml.safe_dump(prof))
    monkeypatch.setenv("HWSIM_HOME", str(tmp_path))
