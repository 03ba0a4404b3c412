"""The step clock times a batch of (query tokens, cached tokens) through the serving loop's own
passes, by shape bucket; the engine host adds its launches, plans and scheduling as the engine
overlaps them."""

import pytest

from hwsim.build import build
from hwsim.config.load import load_scenario
from hwsim.serving.engine_host import EngineHost, load_engine_host
from hwsim.serving.loop import StepOracle
from hwsim.serving.step_clock import StepBatch, StepClock


@pytest.fixture(scope="module")
def built():
    return build(load_scenario(None, ["model=llama-3.1-8b", "workload.arrivals.kind=poisson"]))


def test_batch_reduces_to_decodes_and_prompt_chunks():
    sb = StepBatch.of([(1, 999), (1, 1999), (300, 0), (200, 512)])
    assert (sb.decodes, sb.mean_context, sb.prefill_tokens, sb.prefill_sequences) == (2, 1500.0, 500, 2)
    assert (sb.query_tokens, sb.kv_tokens) == (502, 1000 + 2000 + 300 + 712)


def test_clock_on_the_grid_is_the_serving_loops_pass(built):
    oracle = StepOracle(built)
    clock = StepClock(built, oracle=oracle)
    t = clock.time([(1, 1023)] * 8 + [(256, 0)])          # context 1024, 256 prompt tokens: grid points
    step = oracle.simulate((8, 1024, 256, 1))              # the loop's own pass of that shape
    assert t.device_s == pytest.approx(step.host.device_busy_s)
    assert t.total_s == t.device_s and t.host_s == 0.0


def test_off_the_grid_is_interpolated_between_its_passes(built):
    clock = StepClock(built)
    lo = clock.time([(1, 1023)] * 4 + [(128, 0)]).device_s
    hi = clock.time([(1, 1023)] * 4 + [(256, 0)]).device_s
    mid = clock.time([(1, 1023)] * 4 + [(160, 0)]).device_s          # a quarter of the way
    assert mid == pytest.approx(lo + 0.25 * (hi - lo))
    assert clock.shapes_simulated == 2                                 # no new pass for it
    both = clock.time([(1, 767)] * 4 + [(160, 0)]).device_s            # context 768: half way to 1024
    assert clock.shapes_simulated == 4
    c512 = 0.75 * clock.corner(4, 512, 128, 1).host.device_busy_s + 0.25 * clock.corner(4, 512, 256, 1).host.device_busy_s
    assert both == pytest.approx(0.5 * c512 + 0.5 * mid)


def test_eager_host_bounds_the_step_and_plans_once_per_shape(built):
    p = load_engine_host("hf-transformers-h200")
    host = EngineHost(p, layers=32)
    clock = StepClock(built, host=host)
    batch = [(1, 1000)] * 4
    first, again = clock.time(batch), clock.time(batch)
    issue = (46 * 32 + 26) * 45.6e-6
    sched = (85.0 + 4 * (47.3 + 747.0)) * 1e-6                            # scheduling and masks
    assert again.total_s == pytest.approx(sched + max(issue, again.device_s))
    assert first.total_s - again.total_s == pytest.approx(11.04e-3)         # the cuDNN plan, once
    assert host.plans_built == 1


def test_graphs_replay_after_capturing_each_padded_shape(built):
    p = load_engine_host("hf-transformers-h200")
    batch = [(1, 1000)] * 4
    clock = StepClock(built, host=EngineHost(p, 32, cuda_graph=True))
    first, graphs = clock.time(batch), clock.time(batch)
    sched = (85.0 + 4 * (47.3 + 747.0)) * 1e-6
    assert graphs.total_s == pytest.approx(sched + 9.85e-6 + graphs.device_s)
    eager = (46 * 32 + 26) * 45.6e-6    # the capture (ModelRunner._capture_graph): an eager forward, run,
    assert first.total_s == pytest.approx(sched + max(eager, first.device_s) + eager)   # then recorded only
    both = StepClock(built, host=EngineHost(p, 32, cuda_graph=True, async_batching=True))
    both.time(batch), both.time(batch)                # a capture on each of the two IO pairs
    t = both.time(batch)
    assert t.total_s == pytest.approx(max(sched, 9.85e-6 + t.device_s))   # no copy given: the host hides


def test_async_copy_of_the_host_io_stays_on_the_critical_path(built):
    """Measured (validation/data/hf_serving/h100_call_s18, graphs + async): ~111 ms a step at 1 to 72
    sequences, the whole static attention mask copied to the device each step; hwsim had 7 ms."""
    from hwsim.serving.engines.hf import io_copy_bytes
    p = load_engine_host("hf-transformers-h200")
    host = EngineHost(p, 32, cuda_graph=True, async_batching=True)
    host.h2d_bytes = io_copy_bytes(8192, 1345 * 256)
    clock = StepClock(built, host=host)
    walls = []
    for n in (1, 48):
        batch = [(1, 1000)] * n
        clock.time(batch), clock.time(batch)          # capture on both IO pairs
        t = clock.time(batch)
        walls.append(t.total_s)
        assert t.breakdown_s["host_h2d"] == pytest.approx(5.779e9 / 59.5e9, rel=1e-3)
        assert t.total_s == pytest.approx(t.breakdown_s["host_h2d"] + 9.85e-6 + t.device_s)
    assert 0.100 < walls[0] <= walls[1] < 0.125       # flat in the batch, as measured (110-118 ms)


def test_host_what_if_leaves_the_chip(built):
    p = load_engine_host("hf-transformers-h200")
    fast = p.model_copy(update={"cpu_speed": p.cpu_speed.model_copy(update={"value": 2.0})})
    batch = [(1, 1000)] * 4
    slow_t = StepClock(built, host=EngineHost(p, 32)).time(batch)
    fast_t = StepClock(built, host=EngineHost(fast, 32)).time(batch)
    assert fast_t.device_s == pytest.approx(slow_t.device_s, rel=1e-12)      # float order of shared corners
    assert fast_t.host_s == pytest.approx(slow_t.host_s / 2)
