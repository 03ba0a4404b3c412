"""Issue 34: speculative decoding and MTP (workload.speculative)."""

from pathlib import Path

import pytest

from hwsim.pipeline import run_config, system
from hwsim.config.load import load_scenario
from hwsim.errors import ConfigError
from hwsim.speculative import expected_tokens


def run(*sets):
    cfg = load_scenario(None, ["workload.decode_steps=1", *sets])
    return run_config(cfg, system(cfg), intervals=False).summary


def mtp(k, acceptance="0.8"):
    return run("workload.speculative.method=mtp", f"workload.speculative.tokens={k}",
               f"workload.speculative.acceptance={acceptance}")


def test_one_query_token_is_plain_decode_exactly():
    """The verification path at Q = 1 (K = 0, which the scenario refuses: plain decode is no
    workload.speculative) is the plain decode step, bit for bit."""
    plain = run()
    cfg = load_scenario(None, ["workload.decode_steps=1", "workload.speculative.method=mtp",
                               "workload.speculative.tokens=1"])
    w = cfg.workload
    zero = w.model_copy(update={"speculative": w.speculative.model_copy(update={"tokens": 0, "acceptance": 0.8})})
    cfg = cfg.model_copy(update={"workload": zero})
    spec = run_config(cfg, system(cfg), intervals=False).summary
    assert spec["itl_ms"] == plain["itl_ms"]
    assert spec["breakdown_ms"] == plain["breakdown_ms"] and spec["bytes"] == plain["bytes"]
    assert spec["speculative"]["expected_tokens_per_step"] == 1.0
    assert spec["speculative"]["draft_ms_per_step"] == 0.0


@pytest.mark.parametrize("rates", [[0.8] * 3, [0.9, 0.6, 0.3, 0.1], [1.0, 1.0], [0.0, 0.5]])
def test_expected_tokens_is_the_closed_form(rates):
    survive = [1.0]
    for a in rates:
        survive.append(survive[-1] * a)          # P(the first j drafted tokens all accepted)
    assert expected_tokens(rates) == pytest.approx(sum(survive))
    if len(set(rates)) == 1 and rates[0] < 1:
        a, k = rates[0], len(rates)
        assert expected_tokens(rates) == pytest.approx((1 - a ** (k + 1)) / (1 - a))


def test_summary_reports_tokens_per_step_and_ms_per_accepted_token():
    s = mtp(3, "[0.9,0.6,0.3]")["speculative"]
    assert s["expected_tokens_per_step"] == pytest.approx(1 + 0.9 + 0.9 * 0.6 + 0.9 * 0.6 * 0.3)
    assert s["ms_per_accepted_token"] == pytest.approx(s["ms_per_step"] / s["expected_tokens_per_step"])
    # the step is its draft passes and its verification, back to back
    assert s["draft_ms_per_step"] + s["verify_ms_per_step"] == pytest.approx(s["ms_per_step"], rel=1e-9)
    assert s["draft_ms_per_step"] > 0 and s["query_tokens_per_sequence"] == 4


def test_more_query_tokens_touch_at_least_as_many_experts():
    plain = run()
    experts, verify = [plain["moe"]["distinct_experts_per_layer"]], [plain["itl_ms"]["p50"]]
    for k in range(1, 4):
        s = mtp(k)["speculative"]
        experts.append(s["experts_per_layer"])
        verify.append(s["verify_ms_per_step"])
        assert s["experts_per_layer"] >= s["experts_per_layer_first_token"] == 2.0
        assert s["extra_experts_per_layer"] == pytest.approx(s["experts_per_layer"] - 2.0)
    assert experts == sorted(experts) and experts[-1] > experts[0]
    assert verify == sorted(verify)      # more experts and rows to verify: never faster


def test_a_draft_model_drafts():
    draft = str(Path(__file__).parent / "data" / "mistral-7b.yaml")    # Mixtral's vocabulary (issue 47)
    s = run("workload.speculative.method=draft", f"workload.speculative.draft={draft}",
            "workload.speculative.tokens=2")["speculative"]
    one = run("workload.speculative.method=draft", f"workload.speculative.draft={draft}",
              "workload.speculative.tokens=1")["speculative"]
    assert s["draft_model"] == draft
    assert s["draft_ms_per_step"] == pytest.approx(2 * one["draft_ms_per_step"], rel=0.1)


@pytest.mark.parametrize("sets, words", [
    (["workload.speculative.method=draft", "workload.speculative.tokens=2"], "needs draft"),
    (["workload.speculative.method=mtp", "workload.speculative.tokens=2", "workload.speculative.acceptance=[0.5]"],
     "1 rates for 2 drafted tokens"),
    (["workload.speculative.method=mtp", "workload.speculative.tokens=2", "workload.speculative.acceptance=1.5"],
     "between 0 and 1"),
    (["workload.speculative.method=mtp", "workload.speculative.tokens=0"], "greater than or equal to 1"),
    (["workload.speculative.method=mtp", "workload.speculative.tokens=2", "workload.arrivals.kind=poisson",
      "workload.disaggregation.prefill_gpus=1"], "not with workload.disaggregation"),
])
def test_bad_speculative_keys_are_config_errors(sets, words):
    with pytest.raises(ConfigError, match=words):
        load_scenario(None, sets)


def test_acceptance_elasticity_of_the_accepted_token_is_the_closed_form():
    """One drafted token: a step yields 1 + a tokens in the same time, so the ms per accepted
    token has the elasticity -a / (1 + a) to the acceptance rate a."""
    from hwsim.whatif.numbers import load_base
    from hwsim.whatif.sensitivity import sensitivity
    base = load_base(None, ["workload.decode_steps=1", "workload.speculative.method=mtp",
                            "workload.speculative.tokens=1", "workload.speculative.acceptance=0.8"])
    result, summary = sensitivity(base, keys=["workload.speculative.acceptance"])
    assert result["itl_ms"] == summary["speculative"]["ms_per_accepted_token"]
    assert result["rows"][0]["itl_elasticity"] == pytest.approx(-0.8 / 1.8, rel=0.01)


def test_mla_verification_reads_the_latent_cache_once_for_all_queries():
    """DeepSeek's MLA (deepseek-v2-lite, 27 layers): the K+1 queries of a sequence share one read
    of its latent cache, while the absorbed kv_b GEMM and the MoE see K+1 rows each; each of the
    K MTP passes reads its one layer's cache."""
    plain = run("model=deepseek-v2-lite")
    spec = run("model=deepseek-v2-lite", "workload.speculative.method=mtp", "workload.speculative.tokens=2")
    assert spec["bytes"]["kv"] == pytest.approx(plain["bytes"]["kv"] * (1 + 2 / 27), rel=0.01)
    assert spec["speculative"]["verify_ms_per_step"] > plain["itl_ms"]["p50"]
    assert spec["speculative"]["experts_per_layer"] > plain["moe"]["distinct_experts_per_layer"]
