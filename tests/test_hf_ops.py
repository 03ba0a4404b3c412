"""The ATen ops transformers' continuous batching dispatches per decoder layer (hwsim/serving/engines/
hf_ops.py): the count that scales the eager host's kernels per layer from the profiled model to the
served one."""

import pytest

pytest.importorskip("transformers", reason="the hf-engine extra (pip install 'hwsim[hf-engine]') runs the count")

from hwsim.config.files import load_model  # noqa: E402
from hwsim.serving.engine_host import load_engine_host  # noqa: E402
from hwsim.serving.engines import hf_ops  # noqa: E402
from hwsim.serving.engines.run import _layer_scale  # noqa: E402
from hwsim.serving.engine_host import EngineHost  # noqa: E402


def test_the_profiles_reference_count_is_what_the_pinned_engine_dispatches():
    # drifts (and fails) when the pinned transformers changes what a Llama layer dispatches
    profile = load_engine_host("hf-transformers-h200")
    assert hf_ops.ops_per_layer(load_model("llama-3.1-8b")) == profile.ops_per_layer_reference.value


def test_the_grouped_experts_path_dispatches_more_ops_than_a_dense_ffn():
    dense, moe = (hf_ops.ops_per_layer(load_model(n)) for n in ("llama-3.1-8b", "qwen3-30b-a3b"))
    # router (linear, softmax, top-k, renormalise), sort, gathers, histc, cumsum, masks, two grouped
    # GEMMs and the weighted sum, plus Qwen3's Q/K RMSNorms, against a dense gate/up/down
    assert moe - dense >= 25


def test_the_served_models_layer_scales_the_profiles_kernels():
    host = EngineHost(load_engine_host("hf-transformers-h200"), layers=48)
    before = host.kernels()
    said = _layer_scale(host, load_model("qwen3-30b-a3b"))
    assert host.layer_scale > 1.5 and "ATen ops a layer" in said
    assert host.kernels() == pytest.approx(46 * host.layer_scale * 48 + 26) and host.kernels() > before


def test_a_structure_the_engine_cannot_run_keeps_the_profiled_count_and_says_why():
    host = EngineHost(load_engine_host("hf-transformers-h200"), layers=61)
    said = _layer_scale(host, load_model("deepseek-v3"))      # MLA: the paged cache has one head_dim
    assert host.layer_scale == 1.0 and "as profiled" in said and "deepseek_v3" in said


def _profiles_with_a_counted_model():
    from pathlib import Path
    root = Path(__file__).resolve().parents[1] / "hardware_profiles" / "engine_hosts"
    return [p.stem for p in sorted(root.glob("*.yaml")) if load_engine_host(p.stem).ops_per_layer_model]


@pytest.mark.parametrize("name", _profiles_with_a_counted_model())
def test_each_profiles_reference_count_is_its_named_models(name):
    # what lets a run of that model's structure take the profile's count without counting
    profile = load_engine_host(name)
    assert hf_ops.ops_per_layer(load_model(profile.ops_per_layer_model)) == profile.ops_per_layer_reference.value


def test_the_profiles_own_structure_takes_its_count_as_counting_would(monkeypatch):
    from hwsim.serving.engines import run
    model = load_model("llama-3.1-8b")
    counted = EngineHost(load_engine_host("hf-transformers-h200"), layers=32)
    with monkeypatch.context() as m:
        m.setattr(run, "_profiled_count", lambda profile, model: None)
        said_counted = _layer_scale(counted, model)
    monkeypatch.setattr(hf_ops, "ops_per_layer", lambda model: pytest.fail("counted a known structure"))
    taken = EngineHost(load_engine_host("hf-transformers-h200"), layers=32)
    assert _layer_scale(taken, model) == said_counted and taken.layer_scale == counted.layer_scale == 1.0


def test_another_structure_is_still_counted(monkeypatch):
    monkeypatch.setattr(hf_ops, "ops_per_layer", lambda model: 84.0)
    host = EngineHost(load_engine_host("hf-transformers-h200"), layers=48)
    assert "84 ATen ops" in _layer_scale(host, load_model("qwen3-30b-a3b")) and host.layer_scale == 2.0


def test_the_count_frees_the_engine_without_collecting_the_whole_heap(monkeypatch):
    import gc
    collected = []
    monkeypatch.setattr(gc, "collect", lambda *args: collected.append(args) or 0)
    arch = tuple(sorted(hf_ops.architecture(load_model("llama-3.1-8b")).items()))
    assert hf_ops._count.__wrapped__(arch) == 42 and collected == []


def test_a_profile_naming_an_unknown_counted_model_says_so_in_one_line():
    from hwsim.errors import ConfigError
    from hwsim.serving.engines.run import _profiled_count
    profile = load_engine_host("hf-transformers-h200").model_copy(update={"ops_per_layer_model": "no-such-model"})
    with pytest.raises(ConfigError) as err:
        _profiled_count(profile, load_model("llama-3.1-8b"))
    assert err.value.key == "workload.engine.host" and "ops_per_layer_model" in str(err.value)
    assert "no-such-model" in str(err.value) and "\n" not in str(err.value)
