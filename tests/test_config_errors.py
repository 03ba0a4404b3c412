"""Bad input: one clear message naming the file, the line and the key path."""

import textwrap

import pytest

from hwsim.config.load import load_profile, load_scenario
from hwsim.config.yaml_lines import load_yaml_text
from hwsim.errors import ConfigError


def write(tmp_path, text, name="s.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def test_scientific_notation_loads_as_number():
    assert load_yaml_text("x: 4.8e12\ny: 1e-3\n", "t").data == {"x": 4.8e12, "y": 1e-3}


def test_unknown_key_names_file_line_and_path(tmp_path):
    p = write(tmp_path, """\
        hardware: h200-sxm
        model: mixtral-8x7b
        workload:
          batch_size: 2
          contxt_tokens: 10
        """)
    with pytest.raises(ConfigError) as e:
        load_scenario(p)
    assert e.value.line == 5 and e.value.key == "workload.contxt_tokens"
    assert str(p) in e.value.render() and "unknown key" in e.value.render()


def test_a_key_with_a_newline_is_reported_on_one_line(tmp_path):
    """Found by tests/test_bad_inputs_property.py: a quoted YAML key may hold a newline, and the
    key path of the error then broke it over two lines."""
    p = write(tmp_path, """\
        hardware: h200-sxm
        model: mixtral-8x7b
        kv_cache: {"\\n": 0}
        """)
    with pytest.raises(ConfigError) as e:
        load_scenario(p)
    assert e.value.key == "kv_cache.\n" and e.value.line == 3
    line = e.value.render()
    assert "\n" not in line and "key 'kv_cache.\\n'" in line and "unknown key" in line


def test_wrong_type_and_non_positive(tmp_path):
    p = write(tmp_path, "hardware: h200-sxm\nmodel: mixtral-8x7b\nworkload:\n  batch_size: lots\n")
    with pytest.raises(ConfigError) as e:
        load_scenario(p)
    assert (e.value.line, e.value.key) == (4, "workload.batch_size")
    p = write(tmp_path, "hardware: h200-sxm\nmodel: mixtral-8x7b\nbudget_ms: 0\n")
    with pytest.raises(ConfigError) as e:
        load_scenario(p)
    assert (e.value.line, e.value.key) == (3, "budget_ms")


def test_duplicate_keys_and_syntax_errors(tmp_path):
    p = write(tmp_path, "hardware: h200-sxm\nmodel: a\nmodel: b\n")
    with pytest.raises(ConfigError, match="duplicate key 'model'") as e:
        load_scenario(p)
    assert e.value.line == 3
    p = write(tmp_path, "hardware: [h200\nmodel: b\n")
    with pytest.raises(ConfigError, match="syntax") as e:
        load_scenario(p)
    assert e.value.line is not None


def test_bad_set_is_reported_like_a_file_error():
    with pytest.raises(ConfigError) as e:
        load_scenario(None, ["workload.batch_size=-3"])
    assert e.value.file == "--set" and e.value.key == "workload.batch_size"
    with pytest.raises(ConfigError, match="dotted.key=value"):
        load_scenario(None, ["workload.batch_size"])
    with pytest.raises(ConfigError, match="unknown key"):
        load_scenario(None, ["workload.nonsense=1"])


def test_unknown_profile_and_model_name_the_scenario_line(tmp_path):
    p = write(tmp_path, "hardware: h900\nmodel: mixtral-8x7b\n")
    with pytest.raises(ConfigError, match="unknown hardware profile 'h900'") as e:
        load_scenario(p)
    assert (e.value.file, e.value.line, e.value.key) == (str(p), 1, "hardware")
    p = write(tmp_path, "hardware: h200-sxm\nmodel: gpt-9\n")
    with pytest.raises(ConfigError, match="unknown model 'gpt-9'") as e:
        load_scenario(p)
    assert (e.value.line, e.value.key) == (2, "model")


def test_profile_rejects_zero_bandwidth_and_missing_source(tmp_path, monkeypatch):
    src = load_yaml_text(open("hardware_profiles/h200-sxm.yaml").read(), "h").data
    import yaml
    bad = dict(src)
    bad["hbm"] = {**src["hbm"], "peak_bandwidth_gbps": {"value": 0, "source": "test"}}
    prof_dir = tmp_path / "hardware_profiles"
    prof_dir.mkdir()
    (prof_dir / "zero.yaml").write_text(yaml.safe_dump({**bad, "name": "zero"}))
    nosrc = dict(src)
    nosrc["bus"] = {**src["bus"], "latency_ns": {"value": 50}}
    (prof_dir / "nosrc.yaml").write_text(yaml.safe_dump({**nosrc, "name": "nosrc"}))
    monkeypatch.setenv("HWSIM_HOME", str(tmp_path))
    with pytest.raises(ConfigError) as e:
        load_profile("zero")
    assert e.value.key == "hbm.peak_bandwidth_gbps.value" and e.value.line is not None
    with pytest.raises(ConfigError, match="required key is missing") as e:
        load_profile("nosrc")
    assert e.value.key == "bus.latency_ns.source"
