import pytest

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
