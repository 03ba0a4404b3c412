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
