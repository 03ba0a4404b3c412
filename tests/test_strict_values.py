"""Nonsense that used to run with exit 0, or end in an internal error (exit 1), is one error
line naming file, line and key, exit 2 (issue 29): YAML 1.2 number rules, strict types,
physical bounds with their reason, and cross-checks found after loading, located."""

from __future__ import annotations

import pytest

from test_bad_inputs import BASE, TINY, assert_clean, invoke, old_bundle, snapshot, write, ws  # noqa: F401


@pytest.mark.parametrize("line, where", [
    ("budget_ms: 1:20\n", ("s.yaml:9", "budget_ms", "valid number")),      # YAML 1.1: 80 (base 60)
    ("budget_ms: !!int 1:20\n", ("s.yaml:9", "YAML 1.2 integer")),
    ("runtime:\n  sm_clock: 1e9\n", ("s.yaml:10", "runtime.sm_clock", "345 to 1980 MHz")),
    ("runtime:\n  sm_clock: 10\n", ("s.yaml:10", "runtime.sm_clock")),
    ("kv_cache:\n  bits: 4\n  group_size: 1000000000000\n", ("s.yaml:11", "kv_cache.group_size", "more than 1,048,576")),
    ("kv_cache:\n  bits: 4\n  group_size: 1e12\n", ("s.yaml:11", "kv_cache.group_size", "valid integer")),
    ("kv_cache:\n  group_size: 64\n", ("s.yaml:10", "kv_cache.group_size", "unknown key of a bf16 cache")),
    ("kv_cache:\n  bits: 4\n  sinks: {tokens: 100000}\n", ("s.yaml:11", "kv_cache.sinks.tokens", "full width")),
    ("kv_cache:\n  sinks: {tokens: 1000000000}\n", ("s.yaml:10", "kv_cache.sinks.tokens", "more than 1,000,000")),
    ("hardware_overrides:\n  power.limit_w: 1\n", ("s.yaml:10", "power.limit_w", "idle power")),
    ("hardware_overrides:\n  sm.clock_mhz: 1e6\n", ("s.yaml:10", "sm.clock_mhz", "10 GHz")),
    ("parallel:\n  gpus: 3\n", ("s.yaml:9", "parallel.ep")),                   # found by build()
], ids=["base-60-seed", "tagged-base-60", "sm-clock-1e9", "sm-clock-under-min", "group-size-int",
        "group-size-float", "group-size-of-bf16", "sinks-cover-the-context", "sinks-1e9", "power-limit-1w", "clock-1e6-mhz",
        "parallel-found-in-build"])
def test_nonsense_in_a_scenario_is_one_located_error(ws, line, where):
    before = snapshot(ws / "out")
    res, t = invoke(["run", write(ws, "s.yaml", BASE.replace("budget_ms: 10\n", "") + line), "--out", ws / "out"])
    assert_clean(res, t, 2, where)
    assert snapshot(ws / "out") == before


# serving keys are keys of a serving run (hwsim.config.variants): these set its arrivals
CLOSED = ["workload.arrivals.kind=closed", "workload.arrivals.requests=2", "workload.arrivals.users=1"]


@pytest.mark.parametrize("override, where, context", [
    ("workload.batch_size=true", "valid integer", []),
    ("workload.batch_size=\"16\"", "valid integer", []),
    ("workload.output.kind=lognormal", None, [*CLOSED, "workload.output.max_tokens=4"]),
    ("workload.output.sigma=1e6", "lognormal sigma above 5", [*CLOSED, "workload.output.kind=lognormal"]),
    ("workload.arrivals.users=1000000", "more than 100,000", CLOSED),
], ids=["bool-as-int", "string-as-int", "lognormal-ok", "sigma-1e6", "users-1e6"])
def test_strict_types_and_bounds_of_overrides(ws, override, where, context):
    sets = [a for s in [*context, override] for a in ("--set", s)]
    res, t = invoke(["run", write(ws, "s.yaml", BASE), *sets, "--set", "workload.decode_steps=1",
                     "--out", ws / "b", "--json"])
    if where is None:
        assert res.exit_code == 0, res.stderr
        return
    assert_clean(res, t, 2, ("--set", override.split("=")[0], where))


def test_yaml_1_2_scalars():
    from hwsim.config.yaml_lines import load_yaml_text

    data = load_yaml_text("a: 1:20\nb: 010\nc: yes\nd: on\ne: 4.8e12\nf: 0x1F\ng: 2020-01-01\nh: True\n", "x").data
    assert data == {"a": "1:20", "b": 10, "c": "yes", "d": "on", "e": 4.8e12, "f": 31, "g": "2020-01-01",
                    "h": True}


@pytest.mark.parametrize("change, where", [
    (("layers: 4", "layers: 2"), ("m.yaml:7", "moe.dense_layers", "at least one MoE layer")),
    (("expert_ffn: 2048}", "expert_ffn: 2048, shared_experts: 2}"), ("m.yaml:7", "moe.shared_ffn")),
], ids=["dense-layers-over-layers", "shared-experts-without-width"])
def test_a_model_no_model_can_have_is_refused(ws, change, where):
    from pathlib import Path

    text = Path(TINY).read_text().replace(*change)
    if "layers: 2" in text:
        text = text.replace("moe: {", "moe: {dense_layers: 5, ")
    model = write(ws, "m.yaml", text)
    res, t = invoke(["run", write(ws, "s.yaml", BASE.replace(TINY, str(model))), "--out", ws / "b"])
    assert_clean(res, t, 2, where)


def test_power_settle_stays_real_below_idle():
    from hwsim.hw.power import Activity, PowerModel, settle

    model = PowerModel(limit_w=1, idle_w=79, clock_w=92, tensor_j_per_flop=1e-12, l2_j_per_byte=1e-11,
                       hbm_j_per_byte=1e-10, max_clock_hz=1.98e9, min_clock_hz=3.45e8, tensor_clock_hz=1.755e9)
    settled = settle(model, lambda clock: (1e-3 * 1.98e9 / clock, Activity(1e12, 1e9, 1e9)))
    assert isinstance(settled.clock_hz, float) and settled.clock_hz == model.min_clock_hz
