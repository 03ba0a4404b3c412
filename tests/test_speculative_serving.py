"""Issue 45, item 3: speculative decoding and MTP inside continuous batching."""

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from hwsim.pipeline import run_config, system
from hwsim.config.load import load_scenario
from hwsim.serving.loop import PREFILL_BUCKET, StepOracle
from hwsim.speculative import expected_tokens
from hwsim.serving.speculation import Acceptance, ServingSpeculation

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validation"))
from speculative_crossover import closed_form  # noqa: E402

SERVE = ["model=llama-3.1-8b", "workload.arrivals.kind=poisson", "workload.arrivals.requests=24",
         "workload.prompt.tokens=256", "workload.output.tokens=64", "runtime.sm_clock=max"]


def spec_sets(k, a=0.8):
    return ["workload.speculative.method=mtp", f"workload.speculative.tokens={k}",
            f"workload.speculative.acceptance={a}"]


def serve(*sets):
    cfg = load_scenario(None, [*SERVE, *sets])
    return run_config(cfg, system(cfg), intervals=False)


def test_a_serving_run_speculates_and_the_same_seed_gives_the_same_run():
    a = serve("workload.arrivals.rate_per_s=4", *spec_sets(3))
    again = serve("workload.arrivals.rate_per_s=4", *spec_sets(3))
    other = serve("workload.arrivals.rate_per_s=4", "seed=7", *spec_sets(3))
    plain = serve("workload.arrivals.rate_per_s=4")
    assert a.summary["itl_ms"] == again.summary["itl_ms"] and a.summary["ttft_ms"] == again.summary["ttft_ms"]
    assert a.summary["itl_ms"] != other.summary["itl_ms"]
    # every request gets its whole reply, one gap a token after the first; fewer iterations
    assert all(r["output_tokens"] == 64 for r in a.requests)
    assert len(a.gaps_ms) == len(plain.gaps_ms) == 24 * 63
    assert len(a.iterations) < len(plain.iterations)
    # at this light load, speculation (acceptance 0.8) lowers the ITL per accepted token
    assert a.summary["itl_ms"]["mean"] < 0.7 * plain.summary["itl_ms"]["mean"]


def test_verification_tokens_share_the_token_budget_with_prefills():
    q = 4
    res = serve("workload.arrivals.rate_per_s=400", "workload.token_budget=512", *spec_sets(q - 1))
    its = res.iterations
    assert all(it.prefill_tokens <= max(0, 512 - q * it.decodes) or it.decodes == 0 for it in its)
    assert any(it.decodes and it.prefill_tokens for it in its)           # mixed iterations ran
    # the verification pass: K + 1 rows a decoding sequence beside the (bucketed) prompt chunk
    mixed = next(it for it in its if it.decodes and it.prefill_tokens)
    chunk = math.ceil(mixed.prefill_tokens / PREFILL_BUCKET) * PREFILL_BUCKET
    assert mixed.step.tokens == q * mixed.decodes + chunk


def test_acceptance_is_drawn_per_sequence_and_has_the_closed_form_mean():
    rates = [0.9, 0.6, 0.3]
    acc = Acceptance(seed=3, rates=rates)
    draws = np.array([acc.tokens(5) for _ in range(20000)])
    assert draws.min() >= 1 and draws.max() <= 4
    assert draws.mean() == pytest.approx(expected_tokens(rates), rel=0.02)
    # a sequence's draws do not depend on the others' (interleaved or alone: the same)
    one, two = Acceptance(3, rates), Acceptance(3, rates)
    alone = [one.tokens(5) for _ in range(100)]
    mixed = []
    for _ in range(100):
        two.tokens(9)
        mixed.append(two.tokens(5))
    assert alone == mixed


@pytest.mark.parametrize("decodes, verdict", [(1, "lowers"), (512, "raises")])
def test_speculation_lowers_itl_at_batch_1_and_raises_it_at_a_saturated_batch(decodes, verdict):
    """The known crossover, in the serving loop's own step composition (SpeculativeOracle):
    MTP with K = 7 drafted tokens, acceptance 0.8 (E = 4.16 tokens a step), Llama-3.1-8B,
    cuDNN attention (bandwidth-bound), 512 tokens of context. At batch 1 the step reads the
    weights once for E tokens; at batch 512 the GEMMs are compute-bound and verification's 8
    rows a sequence cost 8x the flops for 4.16 tokens. hwsim's ITL per accepted token falls /
    rises as the closed-form count says, and its step's bytes and flops are the count's."""
    k, a, ctx = 7, 0.8, 512
    sets = ["runtime.attention_kernel=cudnn", "workload.max_batch_size=512"]
    spec_b = system(load_scenario(None, [*SERVE, *sets, *spec_sets(k, a)]))
    plain_b = system(load_scenario(None, [*SERVE, *sets]))
    e = expected_tokens([a] * k)
    spec_step = ServingSpeculation(spec_b).oracle(spec_b).time(decodes, ctx, 0, 0)
    plain_step = StepOracle(plain_b).time(decodes, ctx, 0, 0)
    hwsim_ratio = spec_step.duration_s / e / plain_step.duration_s
    (t_spec, bytes_spec, flops_spec), (t_plain, bytes_plain, _) = (closed_form(spec_b, decodes, ctx, k),
                                                                   closed_form(plain_b, decodes, ctx, 0))
    cf_ratio = t_spec / e / t_plain
    if verdict == "lowers":
        assert cf_ratio < 0.6 and hwsim_ratio < 0.6
    else:
        assert cf_ratio > 1.1 and hwsim_ratio > 1.0
        # the GEMMs' flops are what grows: hwsim's tensor work is the count's (GEMM padding aside)
        # plus cuDNN's verification attention, a 64-row tile per (sequence, query head) over the
        # keys (hwsim/model/multi_query_attention.py: the traced sm90 kernel)
        m = spec_b.model
        attention = m.layers * decodes * m.attention.heads * 2 * 64 * (ctx + 1) * 2 * m.attention.head_dim
        assert spec_step.activity.tensor_flops == pytest.approx(flops_spec + attention, rel=0.05)
    # weights and KV are the count's (hwsim adds the activations' spills: 16 GB at 512 x 8 rows,
    # which only make the verification costlier)
    for step, count in ((spec_step, bytes_spec), (plain_step, bytes_plain)):
        assert step.bytes["weights"] + step.bytes["kv"] == pytest.approx(count, rel=0.05)


DRAFT_1B = str(Path(__file__).parent / "data" / "llama-3.2-1b.yaml")


def draft_sets(k, a):
    return ["workload.speculative.method=draft", f"workload.speculative.tokens={k}",
            f"workload.speculative.draft={DRAFT_1B}", f"workload.speculative.acceptance={a}"]


def test_a_draft_model_serves_under_arrivals_its_step_charged_each_iteration():
    """Llama-3.1-8B verifying a Llama-3.2-1B draft's K = 4 tokens under Poisson arrivals. Each
    iteration that decodes pays K passes of the draft's own decode step before verifying; with
    acceptance 0 that buys nothing (ITL per token worse than no speculation), with acceptance 1
    every verification gives K + 1 = 5 tokens."""
    k, rate = 4, "workload.arrivals.rate_per_s=4"
    plain = serve(rate)
    never, always = serve(rate, *draft_sets(k, 0)), serve(rate, *draft_sets(k, 1))
    # a batch-1 iteration's drafts are K of the draft model's own decode steps at its context
    it = next(it for it in never.iterations if it.decodes == 1 and not it.prefill_tokens)
    cfg = load_scenario(None, [f"model={DRAFT_1B}", "runtime.sm_clock=max", "workload.batch_size=1",
                               f"workload.context_tokens={it.step.context}", "workload.decode_steps=1"])
    draft_step_ms = run_config(cfg, system(cfg), intervals=False).summary["itl_ms"]["mean"]
    assert it.step.draft_s * 1e3 == pytest.approx(k * draft_step_ms, rel=0.02)
    assert all(it.step.draft_s > 0 for it in never.iterations if it.decodes)
    assert never.summary["itl_ms"]["mean"] > 1.5 * plain.summary["itl_ms"]["mean"]
    assert always.summary["itl_ms"]["mean"] < 0.6 * plain.summary["itl_ms"]["mean"]
    sp0, sp1 = never.summary["speculative"], always.summary["speculative"]
    assert sp0["tokens_per_verification"] == 1.0 and sp0["acceptance_measured"] == [0.0, None, None, None]
    assert sp1["tokens_per_verification"] == 5.0 and sp1["acceptance_measured"] == [1.0] * k
    assert sp0["draft_model"] == sp1["draft_model"] == DRAFT_1B
    assert 0.3 < sp0["draft_share"] < 0.7           # four 1B passes beside one 8B verification


def test_a_serving_run_summarises_its_speculation_measured_against_configured():
    from hwsim.summary import RunSummary, ServingSpeculativeSummary, SpeculativeSummary
    res = serve("workload.arrivals.rate_per_s=4", *spec_sets(3, 0.8))
    sp = res.summary["speculative"]
    its = res.iterations
    assert sp["acceptance"] == [0.8] * 3 and sp["expected_tokens_per_step"] == pytest.approx(expected_tokens([0.8] * 3))
    assert all(r == pytest.approx(0.8, abs=0.06) for r in sp["acceptance_measured"])
    assert sp["tokens_per_verification"] == pytest.approx(sp["expected_tokens_per_step"], rel=0.05)
    assert sp["tokens_per_verification"] == 1 + sp["accepted_tokens_per_verification"]
    assert sp["draft_acceptance_rate"] == pytest.approx(sp["accepted_tokens_per_verification"] / 3)
    assert sp["verifications"] == sum(it.decodes for it in its)
    # every token a reply got after its first came from a verification
    verifying = sum(1 for it in its if it.decodes)
    assert sp["tokens_per_step"] * verifying == pytest.approx(sum(r["output_tokens"] - 1 for r in res.requests))
    assert sp["ms_per_step"] == pytest.approx(1e3 * np.mean([it.duration_s for it in its]))
    assert sp["draft_ms_per_step"] + sp["verify_ms_per_step"] == pytest.approx(sp["ms_per_step"])
    assert 0 < sp["draft_share"] < 1 and sp["draft_share"] == pytest.approx(sp["draft_ms_per_step"] / sp["ms_per_step"])
    # read back from a manifest: the serving part, not the fixed batch's
    assert type(RunSummary.from_dict(res.summary).speculative) is ServingSpeculativeSummary
    fixed = run_config(cfg := load_scenario(None, ["workload.decode_steps=1", *spec_sets(2)]), system(cfg),
                         intervals=False)
    assert type(RunSummary.from_dict(fixed.summary).speculative) is SpeculativeSummary
