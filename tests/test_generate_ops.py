"""An eager generate() step's launches counted from the library's own code (generate_ops.py)
against the kernels the H100 call measured (validation/data/library_stacks_h100)."""

import pytest

pytest.importorskip("transformers")     # the ops are counted by running the library (the hf-engine extra)

from hwsim.config.load import load_model
from hwsim.serving.engine_host import load_engine_host
from hwsim.serving.engines.generate_ops import step_host_s, step_launches, step_ops

# the default HF host profile's per-launch and plan costs (hardware_profiles/engine_hosts/hf-transformers-h200.yaml)
LAUNCH_S = load_engine_host("hf-transformers-h200").launch_us.value * 1e-6
PLAN_S = load_engine_host("hf-transformers-h200").plan_ms.value * 1e-3


@pytest.fixture(scope="module")
def memo():
    """The op counts (3-10 s each on the CPU) shared by this file's tests."""
    return {}


def test_dynamic_cache_step_is_the_profiles_measured_step(memo):
    model, host = load_model("llama-3.1-8b"), load_engine_host("hf-transformers-h200")
    assert step_ops(model, memo=memo) == (40.0, 23.0)                 # bf16 on the CPU copy
    assert step_launches(host, model, model.layers, memo=memo) == 1498   # 32 x 46 + 26, measured
    issue = 1498 * 20.9e-6                                            # generate_issue_us
    assert step_host_s(host, model, model.layers, memo=memo) == pytest.approx(issue + 38.3e-3)  # a plan
    assert step_host_s(host, model, model.layers, new_shape=False, memo=memo) == pytest.approx(issue)
    fast = load_engine_host("hf-transformers-h200-fast-host")          # cpu_speed 1.5 divides it all
    assert step_host_s(fast, model, model.layers, memo=memo) == pytest.approx((issue + 38.3e-3) / 1.5)


def test_a_profile_without_the_split_spreads_the_plan_over_launch_us(memo):
    model = load_model("llama-3.1-8b")
    host = load_engine_host("hf-transformers-h200").model_copy(update={"generate_plan_ms": None})
    assert step_host_s(host, model, model.layers, memo=memo) == pytest.approx(1498 * LAUNCH_S)


@pytest.mark.parametrize("bits, measured", [(4, 2010), (2, 2394)])
def test_hqq_cache_adds_its_counted_ops(bits, measured, memo):
    pytest.importorskip("hqq")                     # QuantizedCache's HQQ backend (pip install hqq)
    model, host = load_model("llama-3.1-8b"), load_engine_host("hf-transformers-h200")
    assert step_launches(host, model, model.layers, bits, memo) == measured   # kernels of the H100 call's step
