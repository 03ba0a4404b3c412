"""The power governor (hwsim/hw/power.py): the power model, the settled clock, and its effect
on whole passes (compute-bound prefill throttles, memory-bound decode does not)."""

import subprocess
import sys

import pytest

from hwsim.config.load import load_profile, load_scenario
from hwsim.hw.chip import ChipSpec
from hwsim.hw.power import Activity, PowerModel, settle
from hwsim.pipeline import run_config
from hwsim.validate import predict_ms

MODEL = PowerModel(limit_w=700, idle_w=80, clock_w=60, tensor_j_per_flop=1e-12, l2_j_per_byte=40e-12,
                   hbm_j_per_byte=100e-12, max_clock_hz=2e9, min_clock_hz=0.3e9, tensor_clock_hz=2e9)


def test_watts_is_the_energy_over_the_time():
    work = Activity(tensor_flops=4e12, l2_bytes=1e10, hbm_bytes=2e10)
    # at the maximum clock: 80 + 60 + (4 J + 0.4 J + 2 J) / 0.01 s
    assert MODEL.watts(work, 0.01, 2e9) == pytest.approx(80 + 60 + 640)
    # at half the clock the SMs' energy falls with V^2 ~ x^2 and the clock tree with x^3;
    # HBM's does not
    assert MODEL.watts(work, 0.01, 1e9) == pytest.approx(80 + 60 / 8 + (4.4 / 4 + 2) / 0.01)


def test_compute_bound_pass_settles_where_its_power_meets_the_limit():
    work = Activity(tensor_flops=8e12)          # 8 J at the maximum clock, in 10 ms: 940 W
    calls = []

    def simulate(clock_hz):                     # every rate scales with the clock
        calls.append(clock_hz)
        return 0.01 * 2e9 / clock_hz, work

    s = settle(MODEL, simulate)
    x = s.clock_hz / 2e9
    # closed form: 80 + 60 x^3 + 800 x^3 = 700
    assert x == pytest.approx(((700 - 80) / 860) ** (1 / 3), rel=0.01)
    assert s.watts == pytest.approx(700, rel=0.01)
    assert s.watts_at_max == pytest.approx(940)
    assert s.seconds == pytest.approx(0.01 / x)
    assert len(calls) == s.simulations <= 3


def test_pass_under_the_limit_keeps_the_maximum_clock():
    s = settle(MODEL, lambda hz: (0.01, Activity(hbm_bytes=4e10)))     # 4 TB/s: 540 W
    assert s.clock_hz == 2e9 and s.simulations == 1 and s.watts == pytest.approx(540)


def test_memory_bound_pass_over_the_limit_settles_low_and_loses_little_time():
    """HBM's power does not fall with the SM clock: the governor must go far down, and time
    (set by HBM) barely grows; the root is still found within the tolerance."""
    def simulate(clock_hz):
        x = clock_hz / 2e9
        return 0.01 * (0.9 + 0.1 / x), Activity(tensor_flops=1e12, hbm_bytes=5.5e10)
    s = settle(MODEL, simulate)
    assert s.clock_hz < 1.9e9
    assert s.watts == pytest.approx(700, rel=0.01)


def test_tensor_work_above_its_own_clock_limit_costs_no_more_energy():
    capped = PowerModel(**{**MODEL.__dict__, "tensor_clock_hz": 1.5e9})
    work = Activity(tensor_flops=4e12)
    # at the maximum clock the tensor work runs (and is priced) at 1.5 GHz: e_tensor as fitted
    assert capped.watts(work, 0.01, 2e9) == pytest.approx(80 + 60 + 400)
    # below its limit it scales as the SMs' work does
    assert capped.watts(work, 0.01, 0.75e9) == pytest.approx(80 + 60 * 0.375 ** 3 + 400 * 0.25)


def test_chip_at_a_lower_clock_scales_the_sms_only(h200):
    slow = h200.at_sm_clock(h200.clock_hz * 0.5)
    cap = h200.tensor_clock_hz
    assert cap < h200.clock_hz          # the H200's GEMMs hold 1755 MHz, under the 1980 MHz boost
    assert slow.tensor_flops["bf16"] == pytest.approx(h200.tensor_flops["bf16"] * h200.clock_hz * 0.5 / cap)
    assert h200.at_sm_clock(cap).tensor_flops == h200.tensor_flops
    assert slow.vector_flops == pytest.approx(h200.vector_flops / 2)
    assert slow.kernel_fixed_s == pytest.approx(h200.kernel_fixed_s * 2)
    assert slow.l2_bytes_s == h200.l2_bytes_s and slow.l2_hit_latency_s == h200.l2_hit_latency_s
    assert slow.hbm_peak_bytes_s == h200.hbm_peak_bytes_s
    assert slow.hbm_latency_s == h200.hbm_latency_s
    assert slow.launch_graph_s == h200.launch_graph_s


LLAMA_PREFILL = {"name": "llama-prefill", "hardware": "h200-sxm", "model": "llama-3.1-8b", "phase": "prefill",
                 "batch": "1", "context_tokens": "0", "prompt_tokens": "512", "kv_bits": "16",
                 "launch": "graph", "measured_ms": "1", "_line": 2}


def test_dense_prefill_throttles_and_settled_lies_between_max_and_a_locked_low_clock():
    """A 512-token Llama-3.1-8B prefill draws over 700 W at 1980 MHz on the H200 (measured:
    the clock settles near 1650 MHz, 12.1 ms -> 13.7 ms): the settled prediction is slower
    than the maximum-clock one, and faster than one at a clock locked well below."""
    at_max = predict_ms(LLAMA_PREFILL, ["runtime.sm_clock=max"])
    settled = predict_ms(LLAMA_PREFILL)
    locked = predict_ms(LLAMA_PREFILL, ["runtime.sm_clock=1200"])
    assert at_max * 1.04 < settled < locked


def test_decode_run_reports_power_and_stays_at_the_maximum_clock():
    cfg = load_scenario(None, ["workload.decode_steps=2"])
    s = run_config(cfg).summary
    p = s["power"]
    assert p["limit_w"] == 700 and not p["throttled"]
    assert p["sm_clock_mhz"] == p["max_clock_mhz"] == 1980
    assert 150 < p["watts"] < 700
    # energy per token is the power over the tokens' time: batch 1, one token a step
    assert p["joules_per_token"] == pytest.approx(p["watts"] * s["itl_ms"]["mean"] / 1e3, rel=1e-6)
    at_max = run_config(load_scenario(None, ["workload.decode_steps=2", "runtime.sm_clock=max"])).summary
    assert at_max["itl_ms"] == s["itl_ms"]


def test_profile_without_power_block_reports_none():
    profile = load_profile("mi300x")
    assert profile.power is None
    s = run_config(load_scenario(None, ["hardware=mi300x", "workload.decode_steps=1"])).summary
    assert s["power"] is None


@pytest.mark.parametrize("value", ["fast", "-3", "0"])
def test_bad_sm_clock_is_one_clear_error(value):
    res = subprocess.run([sys.executable, "-m", "hwsim.cli", "run", "--set", f"runtime.sm_clock={value}"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert "runtime.sm_clock" in res.stderr and "Traceback" not in res.stderr


def test_a_pass_planned_at_one_clock_runs_the_same_at_another():
    """validate builds each draw's kernels once and replays them at every clock the governor
    probes: the schedule must not depend on the clock (the plans are equal), and the pass
    timed from the shared plan must be the pass timed from its own, to the bit."""
    from hwsim.pipeline import system
    from hwsim.step import plan_pass, simulate_pass
    from hwsim.validate import _row_scenario

    row = {**LLAMA_PREFILL, "model": "mixtral-8x7b", "phase": "decode", "batch": "8",
           "context_tokens": "1024", "prompt_tokens": "0"}
    cfg, shape = _row_scenario(row)
    top = system(cfg)
    low_clock = top.chip.clock_hz * 0.7
    own, shared = top.at_sm_clock(low_clock), top.at_sm_clock(low_clock)
    for draw in range(2):
        plan, own_plan = plan_pass(top, shape, draw), plan_pass(own, shape, draw)
        assert own_plan.items == plan.items                 # a second draw: on-chip state carried over
        mine = simulate_pass(own, shape, draw, None, plan=own_plan)
        replayed = simulate_pass(shared, shape, draw, None, plan=plan)
        assert (replayed.duration_s, replayed.activity, replayed.breakdown_s) == \
               (mine.duration_s, mine.activity, mine.breakdown_s)
        assert mine.duration_s > simulate_pass(top, shape, draw, None, plan=plan).duration_s


def test_a_throttled_run_replays_its_plans_and_equals_a_run_locked_at_its_clock():
    """A throttled run builds its steps' kernels at the first probe and replays them at the
    others (issue 33): its result is the same as a run locked at the clock it settled at, which
    plans every step itself, expert SRAM statistics included (the planning's state)."""
    sets = ["workload.batch_size=256", "workload.context_tokens=1024", "workload.decode_steps=2"]
    settled = run_config(load_scenario("scenarios/moe-prefetch.yaml", sets), intervals=False).summary
    assert settled["power"]["throttled"]
    locked = run_config(load_scenario("scenarios/moe-prefetch.yaml", sets + [
        f"runtime.sm_clock={settled['power']['sm_clock_mhz']}"]), intervals=False).summary
    for key in ("p50", "p99", "mean"):
        assert settled["itl_ms"][key] == pytest.approx(locked["itl_ms"][key], rel=1e-9)
    assert settled["breakdown_ms"] == pytest.approx(locked["breakdown_ms"], rel=1e-9)
    assert settled["moe"]["cache"] == locked["moe"]["cache"]
    prefetch, locked_prefetch = settled["moe"]["prefetch"], locked["moe"]["prefetch"]
    assert prefetch.keys() == locked_prefetch.keys()
    for key, value in prefetch.items():       # numbers to 1e-9; the predictor's name exactly
        expected = locked_prefetch[key]
        assert value == (pytest.approx(expected, rel=1e-9) if isinstance(expected, float) else expected), key


def test_a_rescaled_first_guess_settles_in_two_simulations():
    """Issue 33: the maximum-clock pass's time, its SM-bound parts re-scaled to a clock,
    guesses the settled clock; one simulation there confirms it. Where the re-scaling is what
    the pass does (memory time fixed, tensor time as 1/x), the guess is the root."""
    work = Activity(tensor_flops=6e12, hbm_bytes=2e10)
    calls = []

    def simulate(clock_hz):
        calls.append(clock_hz)
        return 0.004 + 0.006 * 2e9 / clock_hz, work

    s = settle(MODEL, simulate, lambda: {"weight_read": 0.004, "gemm_compute": 0.006})
    assert len(calls) == s.simulations == 2 and s.clock_hz < 2e9
    assert s.watts == pytest.approx(700, rel=1e-4)
    # without the breakdown, the cubic guess (every rate with the clock) takes more probes
    calls.clear()
    assert settle(MODEL, simulate).simulations > 2


def test_a_rescaled_guess_that_misses_still_settles_within_the_band():
    """The re-scaling is an estimate: where compute hides under memory at the maximum clock
    (the breakdown says memory, the pass slows anyway), the confirming simulation misses and
    the secant search takes over, to a clock within the governor's 1%."""
    work = Activity(tensor_flops=8e12)

    def simulate(clock_hz):                     # compute-bound, but its breakdown says memory
        return 0.01 * 2e9 / clock_hz, work

    s = settle(MODEL, simulate, lambda: {"weight_read": 0.01})
    assert s.simulations > 2 and s.watts == pytest.approx(700, rel=0.01)


def test_a_throttled_run_settles_in_two_simulations_within_the_band(monkeypatch):
    """The default scenario at batch 256 draws over 700 W at 1980 MHz: the governor settles it
    with the maximum-clock run and one confirming simulation, at a clock whose power meets the
    limit within the band, and the run is the run locked at that clock."""
    import hwsim.run as run

    clocks = []
    simulate = run._simulate

    def counted(cfg, b, *args, **kwargs):
        clocks.append(b.chip.clock_hz)
        return simulate(cfg, b, *args, **kwargs)

    monkeypatch.setattr(run, "_simulate", counted)
    sets = ["workload.batch_size=256", "workload.context_tokens=1024", "workload.decode_steps=2"]
    settled = run_config(load_scenario(None, sets), intervals=False).summary
    power = settled["power"]
    assert power["throttled"] and power["watts_at_max_clock"] > 700
    assert len(clocks) == 2 and clocks[0] == 1980e6 and clocks[1] == power["sm_clock_mhz"] * 1e6
    assert power["watts"] == pytest.approx(power["limit_w"], rel=0.01)
    locked = run_config(load_scenario(None, sets + [f"runtime.sm_clock={power['sm_clock_mhz']}"]),
                          intervals=False).summary
    assert settled["itl_ms"] == pytest.approx(locked["itl_ms"], rel=1e-9)
    assert settled["breakdown_ms"] == pytest.approx(locked["breakdown_ms"], rel=1e-9)
    assert power["watts"] == pytest.approx(locked["power"]["watts"], rel=1e-9)
