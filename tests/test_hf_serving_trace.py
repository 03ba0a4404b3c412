"""The HF serving validation's request traces (validation/hf_serving_trace.py) load through
hwsim's own request-trace reader unchanged, and its metrics (hf_serving_stats.py) are the
benchmark definitions. No torch needed."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "validation"))

import hf_serving_stats as stats  # noqa: E402
import hf_serving_trace as tr  # noqa: E402
from hwsim.serving.traces import read_trace  # noqa: E402


@pytest.mark.parametrize("shape,rate,n", [("chat", 8.0, 200), ("long", 1.0, 12), ("chat", None, 64)])
def test_trace_round_trips_through_hwsim_reader(tmp_path, shape, rate, n):
    rows = tr.make_trace(shape, rate, n, seed=7)
    path = tmp_path / "t.jsonl"
    tr.write_trace(rows, path)
    got = read_trace(path)
    assert len(got) == n
    for r, g in zip(rows, got):
        assert g.arrival_s == pytest.approx(r.arrival_s, abs=1e-6)
        assert (g.prompt_tokens, g.output_tokens) == (r.prompt_tokens, r.output_tokens)
        assert g.hash_ids == ()                    # random prompts share no KV block
    assert tr.read_trace(path) == [tr.TraceRow(g.arrival_s, g.prompt_tokens, g.output_tokens) for g in got]


def test_trace_is_seeded_and_has_the_stated_shape():
    a = tr.make_trace("chat", 4.0, 2000, seed=3)
    assert a == tr.make_trace("chat", 4.0, 2000, seed=3)
    assert a != tr.make_trace("chat", 4.0, 2000, seed=4)
    assert a[0].arrival_s == 0.0 and all(x.arrival_s <= y.arrival_s for x, y in zip(a, a[1:]))
    mean_gap = a[-1].arrival_s / (len(a) - 1)
    assert 0.9 / 4.0 < mean_gap < 1.1 / 4.0                       # Poisson at 4 req/s
    prompts = sorted(r.prompt_tokens for r in a)
    replies = sorted(r.output_tokens for r in a)
    assert 360 < prompts[len(a) // 2] < 440 and 135 < replies[len(a) // 2] < 165   # the medians
    assert min(prompts) >= 16 and max(prompts) <= 2048 and min(replies) >= 32 and max(replies) <= 256
    burst = tr.make_trace("chat", None, 16, seed=3)
    assert {r.arrival_s for r in burst} == {0.0}
    assert all(4096 <= r.prompt_tokens <= 8000 for r in tr.make_trace("long", 1.0, 50, seed=1))


def test_trace_module_needs_no_torch():
    code = ("import sys; sys.path.insert(0, 'validation'); import hf_serving_trace, hf_serving_stats; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_stats_follow_the_benchmark_definitions():
    records = [{"arrival_s": 0.0, "token_s": [0.1, 0.2, 0.4], "error": None},
               {"arrival_s": 0.5, "token_s": [0.7, 0.8], "error": None},
               {"arrival_s": 0.6, "token_s": [], "error": "not finished"}]
    s = stats.summarize(records)
    assert (s["requests"], s["finished"], s["failed"], s["generated_tokens"]) == (3, 2, 1, 5)
    assert s["ttft_ms"]["mean"] == pytest.approx(150.0)           # (100 + 200) / 2
    assert s["itl_ms"]["p50"] == pytest.approx(100.0)             # gaps 100, 200, 100 ms pooled
    assert s["itl_ms"]["mean"] == pytest.approx(400.0 / 3, abs=1e-3)         # ms rounded to the us
    assert s["tpot_ms"]["mean"] == pytest.approx(125.0)           # (150 + 100) / 2
    assert s["e2e_ms"]["mean"] == pytest.approx(350.0)            # (400 + 300) / 2
    assert s["throughput_tok_s"] == pytest.approx(5 / 0.8)        # 5 tokens, t = 0 to 0.8 s
    assert stats.percentile([1.0, 2.0, 3.0, 4.0], 90) == pytest.approx(3.7)   # numpy's linear rule
