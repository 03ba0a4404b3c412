"""Request traces in the public layouts (Azure LLM inference, BurstGPT, Mooncake JSONL) and
hwsim's own, the start/duration/rate_scale window, and malformed rows named by file, line
and column."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from hwsim.cli import app
from hwsim.errors import ConfigError
from hwsim.serving.traces import read_trace

TRACES = Path(__file__).resolve().parents[1] / "scenarios" / "traces"
TINY = str(Path(__file__).parent / "data" / "tiny-moe.yaml")


def test_azure_layout_counts_seconds_from_the_first_row_and_skips_empty_replies():
    rows = read_trace(TRACES / "azure-conv-sample.csv")
    assert [r.arrival_s for r in rows[:3]] == [0.0, 4.314579, 4.570214]     # 7 fraction digits read
    assert (rows[0].prompt_tokens, rows[0].output_tokens) == (374, 44)
    assert len(rows) == 9 and all(r.output_tokens > 0 for r in rows)     # the 0-token reply skipped


def test_burstgpt_layout_keeps_its_seconds_and_skips_failed_requests():
    rows = read_trace(TRACES / "burstgpt-sample.csv")
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in rows[:2]] == [(5.0, 472, 18),
                                                                                 (45.0, 1087, 230)]
    assert 1106.0 not in [r.arrival_s for r in rows]                     # 0 request/response tokens


def test_mooncake_jsonl_reads_milliseconds_and_hash_ids():
    rows = read_trace(TRACES / "mooncake-sample.jsonl")
    assert len(rows) == 8
    assert (rows[2].arrival_s, rows[2].prompt_tokens, rows[2].output_tokens) == (0.31, 1536, 60)
    assert rows[2].hash_ids == (0, 1, 4)


def test_hwsim_layout_is_read_as_before(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0.5,10,3\n1.25,20,4\n")
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in read_trace(path)] == [
        (0.5, 10, 3), (1.25, 20, 4)]


def test_start_duration_and_rate_scale_slice_and_compress_trace_time():
    rows = read_trace(TRACES / "burstgpt-sample.csv", start=100, duration=150, rate_scale=2)
    # trace seconds 118, 185, 214, 233 are in [100, 250); replayed from 0 at twice the rate
    assert [r.arrival_s for r in rows] == [9.0, 42.5, 57.0, 66.5]
    assert len(read_trace(TRACES / "burstgpt-sample.csv", limit=3)) == 3


@pytest.mark.parametrize("name, text, line, key", [
    ("bad.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,10,3\nyesterday,5,5\n",
     3, "TIMESTAMP"),
    ("bad.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                "5,ChatGPT,472,eighteen,490,Conversation log\n", 2, "Response tokens"),
    ("bad.csv", "arrival_s,prompt_tokens,output_tokens\n1,10,3\n0.5,10,3\n", 3, "workload.arrivals.trace"),
    ("bad.csv", "arrival_s,prompt_tokens,output_tokens\n1,0,3\n", 2, "prompt_tokens"),
    ("bad.csv", "when,prompt,reply\n1,2,3\n", 1, "workload.arrivals.trace"),
    ("bad.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 2}\n{"timestamp": 5, "input_length": 9}\n',
     2, "output_length"),
    ("bad.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": ["a"]}\n', 1, "hash_ids"),
    ("bad.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 2}\n{"timestamp": 5,\n', 2,
     "workload.arrivals.trace"),
])
def test_malformed_rows_name_file_line_and_column(tmp_path, name, text, line, key):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        read_trace(path)
    assert (err.value.file, err.value.line, err.value.key) == (str(path), line, key)


def test_a_malformed_trace_exits_2_with_one_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"timestamp": 0, "input_length": "many", "output_length": 2}\n')
    res = CliRunner().invoke(app, ["run", "--set", f"model={TINY}", "--set", "workload.arrivals.kind=trace",
                                   "--set", f"workload.arrivals.trace={path}", "--out", str(tmp_path / "b")])
    assert res.exit_code == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"{path}:1" in lines[0] and "input_length" in lines[0], res.stderr
    assert not (tmp_path / "b").exists()


def test_a_mooncake_trace_serves_end_to_end():
    from hwsim.config.load import load_scenario
    from hwsim.pipeline import run_config

    cfg = load_scenario(None, [f"model={TINY}", "workload.arrivals.kind=trace",
                               f"workload.arrivals.trace={TRACES / 'mooncake-sample.jsonl'}",
                               "workload.arrivals.requests=4", "workload.arrivals.rate_scale=4"])
    r = run_config(cfg)
    assert [q["arrival_s"] for q in r.requests] == [0.0, 0.0, 0.31 / 4, 0.845 / 4]
    assert [q["output_tokens"] for q in r.requests] == [40, 25, 60, 12]
