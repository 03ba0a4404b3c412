"""The step clock times a batch of (query tokens, cached tokens) through the serving loop's own
passes, by shape bucket; the engine host adds its launches, plans and scheduling as the engine
overlaps them."""

import pytest

from hwsim.pipeline import system
from hwsim.config.load import load_scenario
from hwsim.serving.engine_host import EngineHost, load_engine_host
from hwsim.serving.loop import StepOracle
from hwsim.serving.step_clock import StepBatch, StepClock

# the default HF host profile's per-launch and plan costs (hardware_profiles/engine_hosts/hf-transformers-h200.yaml)
LAUNCH_S = load_engine_host("hf-transformers-h200").launch_us.value * 1e-6
PLAN_S = load_engine_host("hf-transformers-h200").plan_ms.value * 1e-3


@pytest.fixture(scope="module")
def built():
    return system(load_scenario(None, ["model=llama-3.1-8b", "workload.arrivals.kind=poisson"]))


def test_batch_reduces_to_decodes_and_prompt_chunks():
    sb = StepBatch.of([(1, 999), (1, 1999), (300, 0), (200, 512)])
    assert (sb.decodes, sb.mean_context, sb.prefill_tokens, sb.prefill_sequences) == (2, 1500.0, 500, 2)
    assert (sb.query_tokens, sb.kv_tokens) == (502, 1000 + 2000 + 300 + 712)


def test_clock_on_the_grid_is_the_serving_loops_pass(built):
    oracle = StepOracle(built)
    clock = StepClock(built, oracle=oracle)
    t = clock.time([(1, 1023)] * 16 + [(256, 0)])         # context 1024, 256 prompt tokens: grid points
    assert clock.shapes_simulated == 1
    step = oracle.simulate((16, 1024, 256, 1))             # the loop's own pass of that shape
    assert t.device_s == pytest.approx(step.host.device_busy_s, rel=1e-3)   # (L2 warm from the first)
    assert t.total_s == t.device_s and t.host_s == 0.0


def test_off_the_grid_is_interpolated_between_its_passes(built):
    clock = StepClock(built)
    lo = clock.time([(1, 1023)] * 4 + [(64, 0)]).device_s
    hi = clock.time([(1, 1023)] * 4 + [(256, 0)]).device_s
    mid = clock.time([(1, 1023)] * 4 + [(112, 0)]).device_s          # a quarter of the way
    assert mid == pytest.approx(lo + 0.25 * (hi - lo))
    assert clock.shapes_simulated == 2                                 # no new pass for it
    both = clock.time([(1, 639)] * 4 + [(112, 0)]).device_s            # context 640: half way from 256
    assert clock.shapes_simulated == 4
    c256 = 0.75 * clock.corner(4, 256, 64, 1).host.device_busy_s + 0.25 * clock.corner(4, 256, 256, 1).host.device_busy_s
    assert both == pytest.approx(0.5 * c256 + 0.5 * mid)
    # the step's pass (what the run's summary averages) is its corners blended as its time is
    step = clock.time([(1, 639)] * 4 + [(112, 0)]).step
    assert step.host.device_busy_s == pytest.approx(both)
    assert step.breakdown_s["gemm_compute"] == pytest.approx(
        0.5 * (0.75 * clock.corner(4, 256, 64, 1).breakdown_s["gemm_compute"]
               + 0.25 * clock.corner(4, 256, 256, 1).breakdown_s["gemm_compute"])
        + 0.5 * (0.75 * clock.corner(4, 1024, 64, 1).breakdown_s["gemm_compute"]
                 + 0.25 * clock.corner(4, 1024, 256, 1).breakdown_s["gemm_compute"]))


def test_grids_are_geometric_and_decode_steps_finer():
    from hwsim.serving.step_clock import GRIDS, _around
    assert _around(5, 1, 2) == ((4, 0.75), (8, 0.25))
    assert _around(16, 1, 4) == ((16, 1.0),) and _around(0.5, 1, 2) == ((1, 1.0),)
    assert _around(3000, 16, 4) == ((1024, 1 - 1976 / 3072), (4096, 1976 / 3072))
    assert _around(100, 1, 2, 32) == ((96, 0.875), (128, 0.125))      # 64, 96, 128, 160: capped spacing
    assert GRIDS["decode"]["decodes"][1] < GRIDS["mixed"]["decodes"][1]


def test_eager_host_bounds_the_step_and_plans_once_per_shape(built):
    p = load_engine_host("hf-transformers-h200")
    host = EngineHost(p, layers=32)
    clock = StepClock(built, host=host)
    batch = [(1, 1000)] * 4
    first, again = clock.time(batch), clock.time(batch)
    issue = (46 * 32 + 26) * LAUNCH_S
    sched = (85.0 + 4 * (47.3 + 747.0)) * 1e-6                            # scheduling and masks
    assert again.total_s == pytest.approx(sched + max(issue, again.device_s))
    assert first.total_s - again.total_s == pytest.approx(PLAN_S)         # the cuDNN plan, once
    assert host.plans_built == 1


def test_graphs_replay_after_capturing_each_padded_shape(built):
    p = load_engine_host("hf-transformers-h200")
    batch = [(1, 1000)] * 4
    clock = StepClock(built, host=EngineHost(p, 32, cuda_graph=True))
    first, graphs = clock.time(batch), clock.time(batch)
    sched = (85.0 + 4 * (47.3 + 747.0)) * 1e-6
    assert graphs.total_s == pytest.approx(sched + 9.85e-6 + graphs.device_s)
    eager = (46 * 32 + 26) * LAUNCH_S    # the capture (ModelRunner._capture_graph): an eager forward, run,
    assert first.total_s == pytest.approx(sched + max(eager, first.device_s) + eager)   # then recorded only
    both = StepClock(built, host=EngineHost(p, 32, cuda_graph=True, async_batching=True))
    both.time(batch), both.time(batch)                # a capture on each of the two IO pairs
    t = both.time(batch)
    assert t.total_s == pytest.approx(max(sched, 9.85e-6 + t.device_s))   # no copy given: the host hides


def test_async_copy_of_the_host_io_overlaps_the_forward(built):
    """Measured (validation/data/hf_serving/h100_call_s18, graphs + async): ~111 ms a step at 1 to 72
    sequences, the whole static attention mask copied to the device each step (hwsim had 7 ms), on
    its own stream while the previous step computes: the step is the longer of copy and forward."""
    from hwsim.serving.engines.hf import io_copy_bytes
    p = load_engine_host("hf-transformers-h200")
    host = EngineHost(p, 32, cuda_graph=True, async_batching=True)
    host.h2d_bytes = io_copy_bytes(8192, 1345 * 256)
    clock = StepClock(built, host=host, packed=True)      # the engine's attention kernels, as engines/run.py
    walls = []
    for n in (1, 48):
        batch = [(1, 1000)] * n
        clock.time(batch), clock.time(batch)          # capture on both IO pairs
        t = clock.time(batch)
        walls.append(t.total_s)
        assert t.breakdown_s["host_h2d"] == pytest.approx(5.779e9 / (p.h2d_GBps.value * 1e9), rel=1e-3)
        assert t.total_s == pytest.approx(max(t.breakdown_s["host_h2d"], 9.85e-6 + t.device_s))
    # near flat in the batch, as measured: ~111 ms at a 16,384-key padded read, 117.8 ms at 49,152
    # (48 x 1,000 here), H100 (docs/serving.md); within 10%
    assert 0.100 < walls[0] <= walls[1] and walls[1] == pytest.approx(0.1178, rel=0.10)


def test_host_what_if_leaves_the_chip(built):
    p = load_engine_host("hf-transformers-h200")
    fast = p.model_copy(update={"cpu_speed": p.cpu_speed.model_copy(update={"value": 2.0})})
    batch = [(1, 1000)] * 4
    slow_t = StepClock(built, host=EngineHost(p, 32)).time(batch)
    fast_t = StepClock(built, host=EngineHost(fast, 32)).time(batch)
    assert fast_t.device_s == pytest.approx(slow_t.device_s, rel=1e-12)      # float order of shared corners
    assert fast_t.host_s == pytest.approx(slow_t.host_s / 2)


# 60 steps of scenarios/engines/hf-llama-chat.yaml (200 requests, evenly spaced: what
# benchmarks/bench_serving_engine.py --bucket-error 60 picks): decodes, mean context, prompt
# tokens, prompts
RUN_STEPS = [(0, 0, 380, 1), (3, 592, 0, 0), (7, 507, 0, 0), (13, 588, 0, 0), (13, 606, 326, 2), (17, 542, 0, 0),
             (25, 526, 495, 1), (27, 486, 0, 0), (31, 540, 0, 0), (32, 555, 0, 0), (36, 559, 0, 0), (37, 578, 0, 0),
             (38, 596, 0, 0), (38, 596, 0, 0), (32, 618, 0, 0), (32, 645, 0, 0), (35, 618, 0, 0), (33, 587, 0, 0),
             (28, 598, 509, 1), (31, 558, 0, 0), (31, 570, 0, 0), (30, 589, 0, 0), (32, 596, 451, 1), (29, 622, 341, 1),
             (30, 613, 0, 0), (28, 608, 298, 1), (25, 554, 0, 0), (29, 552, 0, 0), (32, 519, 0, 0), (37, 529, 0, 0),
             (31, 487, 0, 0), (35, 510, 0, 0), (39, 484, 0, 0), (39, 525, 0, 0), (41, 547, 213, 1), (39, 562, 0, 0),
             (40, 548, 0, 0), (39, 562, 0, 0), (39, 564, 331, 1), (38, 563, 0, 0), (34, 635, 0, 0), (31, 623, 0, 0),
             (30, 645, 0, 0), (26, 708, 0, 0), (25, 642, 0, 0), (25, 667, 0, 0), (26, 669, 0, 0), (27, 655, 0, 0),
             (25, 605, 0, 0), (28, 610, 0, 0), (31, 537, 0, 0), (31, 576, 0, 0), (26, 583, 0, 0), (24, 610, 0, 0),
             (25, 619, 0, 0), (25, 621, 0, 0), (24, 633, 0, 0), (18, 633, 0, 0), (14, 618, 0, 0), (10, 581, 0, 0)]


def test_grid_holds_the_exact_shapes_device_time(built):
    """The grid's interpolation against a pass of each step's very shape: 2.2% median, 6.2% max
    (docs/serving.md, Speed); the old finer grid (299 passes for the run instead of 74) was
    2.3% / 6.7%, rounding up to the loop's buckets 15% median."""
    clock, exact = StepClock(built), StepClock(built)
    errs = []
    for d, ctx, p, n in RUN_STEPS:
        sb = StepBatch(d, float(ctx), p, n, d + p, 0)
        x = exact.corner(d, ctx, p, n).host.device_busy_s
        errs.append(abs(clock.device(sb)[0] - x) / x)
    errs.sort()
    assert errs[len(errs) // 2] < 0.03 and errs[-1] < 0.08
    assert clock.shapes_simulated < 50                 # the finer grid before: 50 passes for them


def test_a_blended_pass_is_each_figure_its_corners_weighted_sum_in_their_order(built):
    import dataclasses
    from hwsim.serving.step_clock import _blend
    clock = StepClock(built)
    corners = [(0.375, clock.corner(4, 256, 64, 1)), (0.125, clock.corner(4, 256, 256, 1)),
               (0.5, clock.corner(4, 1024, 64, 1))]
    step = _blend(corners, {"x": 1.0})

    def weighted(get):                          # the blend's definition, to the last bit
        return sum(w * get(s) for w, s in corners)
    assert step.duration_s == weighted(lambda s: s.duration_s) and step.breakdown_s == {"x": 1.0}
    for f in dataclasses.fields(step.host):
        assert getattr(step.host, f.name) == weighted(lambda s: getattr(s.host, f.name)), f.name
    assert step.bytes == {k: weighted(lambda s: s.bytes.get(k, 0.0)) for k in corners[0][1].bytes}
    assert (step.kernels, step.tokens) == (weighted(lambda s: s.kernels), weighted(lambda s: s.tokens))
    assert step.activity.hbm_bytes == weighted(lambda s: s.activity.hbm_bytes)
    assert step.activity.tensor_flops == weighted(lambda s: s.activity.tensor_flops)
    assert step.active_weight_fraction == weighted(lambda s: s.active_weight_fraction)
