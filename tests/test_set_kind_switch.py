"""`--set` that switches a block's kind: the file's keys of the old kind give way (the user changed
the kind), keys --set itself writes under the wrong kind stay errors (issue 42's unions)."""

import pytest

from hwsim.config.load import load_scenario
from hwsim.errors import ConfigError

SCENARIO = """hardware: h200-sxm
model: llama-3.1-8b
workload:
  arrivals: {kind: poisson, rate_per_s: 2, requests: 20}
  prompt: {kind: lognormal, tokens: 400, sigma: 0.6}
"""


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    return path


def test_switching_kind_drops_the_old_kinds_file_keys_and_keeps_shared_ones(scenario):
    cfg = load_scenario(scenario, ["workload.arrivals.kind=trace", "workload.arrivals.trace=t.jsonl"])
    assert cfg.workload.arrivals.kind == "trace" and cfg.workload.arrivals.requests == 20
    prompt = load_scenario(scenario, ["workload.prompt.kind=fixed"]).workload.prompt
    assert prompt.kind == "fixed" and prompt.tokens == 400      # tokens: a key of both kinds


def test_a_key_set_under_the_wrong_kind_is_still_refused(scenario):
    with pytest.raises(ConfigError, match="unknown key of kind trace") as e:
        load_scenario(scenario, ["workload.arrivals.kind=trace", "workload.arrivals.trace=t.jsonl",
                                 "workload.arrivals.rate_per_s=3"])
    assert (e.value.file, e.value.key) == ("--set", "workload.arrivals.rate_per_s")
    with pytest.raises(ConfigError, match="unknown key of kind poisson"):
        load_scenario(scenario, ["workload.arrivals.users=3"])


def test_a_file_key_of_another_kind_without_a_switch_is_refused(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.replace("requests: 20", "requests: 20, users: 4"))
    with pytest.raises(ConfigError, match="unknown key of kind poisson") as e:
        load_scenario(path)
    assert (e.value.line, e.value.key) == (4, "workload.arrivals.users")
