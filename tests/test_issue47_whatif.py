"""Issue 47 item 9 and 11: sensitivity perturbs integer keys as integers (workload.batch_size
was "not run": the strict schema refuses 0.0 or 2.0), and says its cost before it starts."""

from __future__ import annotations

import pytest

from hwsim.whatif.numbers import load_base
from hwsim.whatif.sensitivity import probes, sensitivity


def test_integer_keys_are_perturbed_as_integers():
    base = load_base(None, ["workload.decode_steps=1", "workload.batch_size=1", "workload.context_tokens=512"])
    result, _ = sensitivity(base, keys=["workload.batch_size", "workload.context_tokens"])
    assert result["failed"] == []
    assert {r["key"] for r in result["rows"]} | set(result["no_effect"]) == {"workload.batch_size",
                                                                            "workload.context_tokens"}
    for r in result["rows"]:
        assert isinstance(r["low"], int) and isinstance(r["high"], int)


def test_probes_of_an_integer_are_integers():
    from hwsim.config.load import load_scenario
    from hwsim.whatif.numbers import scenario_number
    n = scenario_number(load_scenario(None, ["workload.batch_size=1"]), "workload.batch_size")
    lo, hi = probes(n)
    assert (lo, hi) == (1, 2) and all(type(v) is int for v in (lo, hi))


def test_sensitivity_says_its_cost_first_then_its_progress():
    base = load_base(None, ["workload.decode_steps=1", "workload.batch_size=1", "workload.context_tokens=512"])
    said = []
    sensitivity(base, keys=["workload.batch_size", "hbm.peak_bandwidth_gbps"], progress=said.append)
    assert said[0].startswith("sensitivity: 2 numbers, 3 runs, about ")    # batch 1: one-sided
    assert said[-1] == "sensitivity: 3 of 3 runs done"


@pytest.mark.parametrize("key, target, words", [
    ("seed", "itl_ms.p50=5", "seed"),                          # a random draw, not a quantity
    ("hbm.peak_bandwidth_gbps", "sim.wall_s=10", "sim.wall_s"),  # the simulator's own time
])
def test_goal_refuses_what_is_no_quantity(key, target, words):
    from hwsim.errors import ConfigError
    from hwsim.whatif.goal import goal, parse_target
    base = load_base(None, ["workload.decode_steps=1"])
    with pytest.raises(ConfigError, match=words) as info:
        goal(base, key, *parse_target(target))
    assert info.value.key in ("--vary", "--target")
