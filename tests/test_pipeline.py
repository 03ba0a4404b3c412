"""The one pipeline (hwsim/pipeline.py, issue 42 item 4): a LoadedScenario carries its own YAML
line map, so errors found after loading name its file, line and key however many scenarios a
process has loaded since; every caller goes through it; one manifest writer."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from hwsim import pipeline
from hwsim.errors import ConfigError
from hwsim.io.bundle import write_manifest

TINY = Path(__file__).resolve().parent / "data" / "tiny-moe.yaml"
SPEC = importlib.util.spec_from_file_location(
    "architecture", Path(__file__).resolve().parents[1] / "benchmarks" / "architecture.py")


def _scenario(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_each_loaded_scenario_locates_its_own_errors(tmp_path):
    first = _scenario(tmp_path, "a.yaml", f"hardware: h200-sxm\nmodel: {TINY}\nworkload:\n  batch_size: 2\n")
    second = _scenario(tmp_path, "b.yaml", f"hardware: h200-sxm\nmodel: {TINY}\n\nworkload:\n  context_tokens: 64\n"
                                           "  batch_size: 4\n")
    a, b = pipeline.load(first), pipeline.load(second)      # b loaded last: a's map is still a's
    found = ConfigError("too large", key="workload.batch_size")
    assert (a.locate(found).file, a.locate(found).line) == (str(first), 4)
    assert (b.locate(found).file, b.locate(found).line) == (str(second), 6)
    with pytest.raises(ConfigError) as info, a.located():
        raise found
    assert info.value.render() == a.locate(found).render() and info.value.line == 4


def test_a_key_given_by_set_is_said_of_set_and_code_made_scenarios_name_the_key(tmp_path):
    path = _scenario(tmp_path, "a.yaml", f"hardware: h200-sxm\nmodel: {TINY}\n")
    loaded = pipeline.load(path, ["workload.batch_size=3"])
    assert loaded.sets == ("workload.batch_size=3",) and loaded.file == str(path)
    assert loaded.locate(ConfigError("no", key="workload.batch_size")).file == "--set"
    made = pipeline.from_config(loaded.cfg)                 # a sweep point's, a row's: no line map
    assert made.source is None and made.locate(ConfigError("no", key="workload.batch_size")).file is None


def test_the_system_check_names_the_scenario_line(tmp_path):
    path = _scenario(tmp_path, "s.yaml", f"hardware: h200-sxm\nmodel: {TINY}\nweights:\n  experts:\n"
                                         "    format: int4\n    dequant: native\n")
    with pytest.raises(ConfigError) as info:
        pipeline.check(pipeline.load(path))
    assert (info.value.file, info.value.line, info.value.key) == (str(path), 6, "weights.experts.dequant")


def test_the_stages_run_a_loaded_scenario_as_the_run_command_does():
    loaded = pipeline.load(None, [f"model={TINY}", "workload.decode_steps=1"])
    assert pipeline.cost(loaded).wall_s > 0
    ran, summarized = pipeline.run(loaded).summary, pipeline.summary(loaded)
    ran.pop("sim"), summarized.pop("sim")                   # the simulator's own wall clock
    assert summarized == ran and ran["itl_ms"]["p50"] > 0   # the same seed, the same numbers


def test_build_constructs_only_the_check_stage_checks_once(monkeypatch):
    """Session 21 (issue 42): the system checks run in the pipeline's check stage, once, and
    build() opens no file by name: it is handed the loaded profile and model."""
    from hwsim import checks
    from hwsim.build import build
    from hwsim.config import files
    loaded = pipeline.load(None, [f"model={TINY}", "workload.decode_steps=1"])
    calls, real = [], checks.problems
    monkeypatch.setattr(checks, "problems", lambda *a: calls.append(a) or real(*a))
    for name in ("load_model", "load_profile"):
        monkeypatch.setattr(files, name, lambda *a, **k: pytest.fail("build read a file by name"))
    built = build(loaded.cfg, loaded.profile, loaded.model)
    assert calls == [] and built.model is loaded.model and built.profile is loaded.profile
    pipeline.run(loaded, intervals=False)          # no system given: checked, then built
    assert len(calls) == 1


def test_a_scenario_made_in_code_is_refused_by_the_check_stage_not_by_build(tmp_path):
    path = _scenario(tmp_path, "s.yaml", f"hardware: h200-sxm\nmodel: {TINY}\n")
    loaded = pipeline.load(path, ["weights.experts.format=int4"])
    bad = loaded.cfg.model_copy(update={"weights": loaded.cfg.weights.model_copy(update={
        "experts": loaded.cfg.weights.experts.model_copy(update={"dequant": "native"})})})
    with pytest.raises(ConfigError) as info:
        pipeline.system(bad)
    assert info.value.key == "weights.experts.dequant" and info.value.file is None
    from hwsim.build import build
    build(bad, loaded.profile, loaded.model)       # construction alone: no check re-run


def test_the_draft_model_is_read_once_at_load_and_a_bad_name_said_at_its_line(tmp_path):
    """Session 21: a speculative draft's model is read by the load stage (LoadedScenario.draft)
    and handed to build; a bad name is the loader's error at the key's file and line."""
    text = f"hardware: h200-sxm\nmodel: {TINY}\nworkload:\n  speculative:\n    method: draft\n    tokens: 1\n"
    good = pipeline.load(_scenario(tmp_path, "g.yaml", text + f"    draft: {TINY}\n"))
    assert good.draft is not None and good.draft.name == good.model.name
    assert pipeline.build(good).draft is good.draft
    bad = _scenario(tmp_path, "b.yaml", text + "    draft: no-such-model\n")
    with pytest.raises(ConfigError) as info:
        pipeline.load(bad)
    assert (info.value.file, info.value.line, info.value.key) == (str(bad), 7, "workload.speculative.draft")
    assert "unknown model 'no-such-model'" in info.value.message


def test_one_manifest_writer_replaces_the_file_whole(tmp_path):
    write_manifest(tmp_path, {"a": 1})
    path = write_manifest(tmp_path, {"b": [1, 2]})
    assert json.loads(path.read_text()) == {"b": [1, 2]}
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]     # no temporary left


def test_the_pipeline_is_written_once():
    architecture = importlib.util.module_from_spec(SPEC)
    sys.modules["architecture"] = architecture
    SPEC.loader.exec_module(architecture)
    found = architecture.pipeline_copies(architecture.load_modules())
    # the serving rehearsal runs on a system the pipeline's cost stage builds (session 21)
    assert found["stage_callers_list"] == []
    assert found["manifest_writers_list"] == ["hwsim/io/bundle.py:write_manifest"]
