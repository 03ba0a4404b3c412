"""An eager generate() step's launches counted from the library's own code (generate_ops.py)
against the kernels the H100 call measured (validation/data/library_stacks_h100)."""

import pytest

from hwsim.config.load import load_model
from hwsim.serving.engine_host import load_engine_host
from hwsim.serving.engines.generate_ops import step_host_s, step_launches


def test_dynamic_cache_step_is_the_profiles_measured_step():
    model, host = load_model("llama-3.1-8b"), load_engine_host("hf-transformers-h200")
    assert step_launches(host, model, model.layers) == 1498          # 32 x 46 + 26, measured
    assert step_host_s(host, model, model.layers) == pytest.approx(1498 * 45.6e-6)


@pytest.mark.parametrize("bits, measured", [(4, 2010), (2, 2394)])
def test_hqq_cache_adds_its_counted_ops(bits, measured):
    pytest.importorskip("hqq")                     # QuantizedCache's HQQ backend (pip install hqq)
    model, host = load_model("llama-3.1-8b"), load_engine_host("hf-transformers-h200")
    assert step_launches(host, model, model.layers, bits) == measured   # kernels of the H100 call's step
