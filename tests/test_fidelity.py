"""Fidelity levels and reuse agree with each other on whole steps."""

import pytest

from hwsim.config.load import load_scenario
from hwsim.run import run_scenario


def itl(*sets):
    s = run_scenario(load_scenario(None, ["workload.decode_steps=1", *sets])).summary
    return s["itl_ms"]["p50"], s


@pytest.mark.parametrize("extra", [[], ["workload.batch_size=8", "model=qwen3-30b-a3b"],
                                   ["moe.prefetch.enabled=true"]])
def test_kernel_fidelity_and_reuse_match_wave_fidelity(extra):
    wave, sw = itl("runtime.fidelity=wave", *extra)
    kernel, sk = itl("runtime.fidelity=kernel", "runtime.reuse=false", *extra)
    reused, sr = itl("runtime.fidelity=kernel", "runtime.reuse=true", *extra)
    assert kernel == pytest.approx(wave, rel=1e-9)
    assert reused == pytest.approx(wave, rel=1e-9)
    for comp, ms in sw["breakdown_ms"].items():
        assert sr["breakdown_ms"][comp] == pytest.approx(ms, rel=1e-6, abs=1e-9)
    assert sr["bytes"] == pytest.approx(sw["bytes"], rel=1e-9)
    assert sk["sim"]["events"] < sw["sim"]["events"]


def test_tile_fidelity_within_two_percent_of_the_default():
    tile, _ = itl("runtime.fidelity=tile")
    default, _ = itl()
    assert default == pytest.approx(tile, rel=0.02)
