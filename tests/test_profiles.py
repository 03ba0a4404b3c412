"""Every shipped profile loads, elaborates and carries a source for each number."""

import pytest

from hwsim.config.files import builtin_profiles, load_profile
from hwsim.config.sourced import _Sourced
from hwsim.hw.chip import ChipSpec

REQUIRED = {"h100-sxm", "h200-sxm", "b200", "mi300x", "hbm4-gpu", "sram-chip"}


def test_required_profiles_ship():
    assert REQUIRED <= set(builtin_profiles())


def _sourced_fields(model):
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, _Sourced):
            yield name, value
        elif hasattr(type(value), "model_fields") and not isinstance(value, (str, int, float)):
            yield from _sourced_fields(value)
        elif isinstance(value, dict):
            for v in value.values():
                if isinstance(v, _Sourced):
                    yield name, v


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_profile_loads_with_sources(name):
    prof = load_profile(name)
    chip = ChipSpec.from_profile(prof)
    assert chip.sms > 0 and chip.hbm_read_bytes_s > 0
    fields = list(_sourced_fields(prof))
    assert len(fields) > 25
    assert all(v.source.strip() for _, v in fields)


def test_calibrated_h200_numbers_name_their_measurement():
    prof = load_profile("h200-sxm")
    for value in (prof.sm.inflight_kib_per_block, prof.launch.graph_us, prof.kernel.fixed_us,
                  prof.hbm.read_efficiency, prof.hbm.access_latency_ns):
        assert "calibrat" in value.source or ".csv" in value.source or ".jsonl" in value.source


def test_a_profile_or_model_is_loaded_once_per_content(tmp_path):
    """Loads are shared (a command reads the same files several times), but an edited file is
    read anew, whatever its size or modification time."""
    from pathlib import Path

    from hwsim.config.load import load_model

    assert load_profile("h200-sxm") is load_profile("h200-sxm")
    text = (Path(__file__).parent / "data" / "tiny-moe.yaml").read_text()
    model = tmp_path / "m.yaml"
    model.write_text(text)
    first = load_model(str(model))
    assert load_model(str(model)) is first
    model.write_text(text.replace("layers: 4", "layers: 5"))       # same size, same second
    assert "layers: 4" in text and load_model(str(model)).layers == 5 == first.layers + 1
