"""Issue 47 item 8: a speculative run's headline is the latency a user sees (per accepted token)
and its joules are per accepted token; a draft that cannot be one is refused (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from hwsim import pipeline
from hwsim.cli import app
from hwsim.errors import ConfigError

DATA = Path(__file__).parent / "data"
TINY = str(DATA / "tiny-moe.yaml")


@pytest.mark.parametrize("sets, words", [
    ([f"model={TINY}", "workload.speculative.draft=deepseek-v3"], "is larger than the model"),               # 671B for 4 layers
    (["model=qwen1.5-moe-a2.7b", "workload.speculative.draft=qwen3-235b-a22b"], "is larger than the model"),  # one vocabulary
    (["workload.speculative.draft=olmoe-1b-7b"], "vocabulary"),                                   # 50,304 vs 32,000
    (["workload.batch_size=64", f"workload.speculative.draft={DATA / 'mistral-7b.yaml'}"], "beside"),
    # Mixtral's 93 GB and 34 GB of KV fit an H200; a 14 GB draft and its own 34 GB of KV do not
    ([f"model={TINY}", f"workload.speculative.draft={DATA / 'tiny-draft.yaml'}",
      "workload.kernel_trace.path=scenarios/traces/kernels/synthetic-mixtral-b8-l4096.json.gz",
      "workload.kernel_trace.batch_size=1", "workload.kernel_trace.context_tokens=64"], "kernel_trace"),
])
def test_a_draft_that_cannot_be_one_is_refused(sets, words):
    loaded = pipeline.load(None, ["workload.decode_steps=1", "workload.speculative.method=draft",
                                  "workload.speculative.tokens=2", *sets])
    with pytest.raises(ConfigError, match=words) as info:
        pipeline.check(loaded)
    assert "workload.speculative" in str(info.value)


def test_a_fitting_draft_of_the_same_vocabulary_passes():
    pipeline.check(pipeline.load(None, ["workload.decode_steps=1", "workload.speculative.method=draft",
                                        "workload.speculative.tokens=2",
                                        f"workload.speculative.draft={DATA / 'mistral-7b.yaml'}"]))


def test_the_headline_of_a_speculative_run_is_per_accepted_token(tmp_path):
    res = CliRunner().invoke(app, ["run", "--out", str(tmp_path / "out"), "--no-plots", "--set", "workload.decode_steps=2",
                                   "--set", "workload.speculative.method=mtp", "--set", "workload.speculative.tokens=3",
                                   "--set", "workload.speculative.acceptance=0.8"])
    assert res.exit_code == 0, res.stderr
    import json
    s = json.loads((tmp_path / "out" / "manifest.json").read_text())["summary"]
    spec, power = s["speculative"], s["power"]
    out = " ".join(res.stdout.split())
    assert f"{spec['ms_per_accepted_token']:.3f} ms per accepted token" in out
    assert f"{power['joules_per_token']:.2f} J per accepted token" in out
    # --json's joules are per accepted token too: the watts over a sequence's accepted tokens a second
    per_accepted = power["watts"] * spec["ms_per_accepted_token"] / 1e3 / s["batch_size"]
    assert power["joules_per_token"] == pytest.approx(per_accepted, rel=1e-9)
    assert "inter-token latency p50" not in out      # the step's latency is not the user's
