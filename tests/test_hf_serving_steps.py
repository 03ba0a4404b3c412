"""The measured runs' engine steps read off token stamps, and the two host speeds found in them
(validation/hf_serving_steps.py; validation/host_threads.py samples where the threads ran)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validation"))
import hf_serving_steps as hs  # noqa: E402
from host_threads import ThreadSampler, parse_stat  # noqa: E402


def test_steps_from_token_stamps():
    # request 0 (prompt 100) prefills in step 1 and decodes in steps 2-3; request 1 (prompt 50)
    # prefills in step 2 (its first token stamped with request 0's second) and decodes in step 3
    records = [{"prompt_tokens": 100, "token_s": [0.10, 0.20, 0.30]},
               {"prompt_tokens": 50, "token_s": [0.2005, 0.3004]}]
    steps = hs.engine_steps(records)
    assert [(s["decodes"], s["prompts"], s["prompt_tokens"], s["kv"]) for s in steps] == [
        (0, 1, 100, 100), (1, 1, 50, 101 + 50), (2, 0, 0, 102 + 51)]
    assert steps[0]["gap_s"] is None and steps[2]["gap_s"] == pytest.approx(0.0995)
    assert hs.decode_only(steps) == [(2, pytest.approx(99.5))]


def test_two_host_speeds_are_told_apart_whatever_the_batch():
    # a fast line 70 ms + 0.7 ms/seq, a third of the steps 40 ms above it, at every batch size
    points = [(n, 70 + 0.7 * n + (40 if i % 3 == 0 else 0) + (i % 5) * 0.5) for i, n in enumerate(range(1, 61))]
    m = hs.host_modes(points)
    assert m["fast_ms"] == pytest.approx(71, abs=1) and m["fast_us_per_seq"] == pytest.approx(700, abs=30)
    assert m["slow"] == 20 and m["slow_offset_ms"] == pytest.approx(40, abs=1.5)
    assert m["slow_flags"][:4] == [True, False, False, True]
    # one speed only: no slow steps
    assert hs.host_modes([(n, 70 + 0.7 * n) for n in range(1, 30)])["slow"] == 0


def test_thread_stat_fields_past_a_name_with_spaces():
    fields = ["S"] + [str(i) for i in range(4, 53)]      # fields 3.. of /proc/<pid>/task/<tid>/stat
    fields[11], fields[12], fields[36] = "250", "50", "7"  # utime (14), stime (15), processor (39)
    assert parse_stat("123 (pt main) " + " ".join(fields)) == ("pt main", 7, 300)


def test_thread_sampler_records_nothing_without_proc(tmp_path):
    s = ThreadSampler(tmp_path / "no-such-dir")
    s.sample(0.0)
    assert s.rows == []


def test_engine_thread_share_and_moves_by_speed():
    # thread 2 (the engine) runs flat out on CPU 3 in the first step, then at half share and moved
    # to CPU 9 in the second; thread 1 (the submitting loop) barely runs
    samples = [{"t": t, "tid": 1, "name": "py", "cpu": 0, "cpu_s": 0.01 * i} for i, t in enumerate((0.0, 0.05, 0.1, 0.15, 0.2))]
    samples += [{"t": 0.0, "tid": 2, "name": "py", "cpu": 3, "cpu_s": 1.0},
                {"t": 0.05, "tid": 2, "name": "py", "cpu": 3, "cpu_s": 1.05},
                {"t": 0.1, "tid": 2, "name": "py", "cpu": 3, "cpu_s": 1.1},
                {"t": 0.15, "tid": 2, "name": "py", "cpu": 9, "cpu_s": 1.125},
                {"t": 0.2, "tid": 2, "name": "py", "cpu": 9, "cpu_s": 1.15}]
    th = hs.engine_thread(samples)
    assert [round(x["share"], 2) for x in th] == [1.0, 1.0, 0.5, 0.5] and [x["moved"] for x in th] == [False, False, True, False]
    steps = [{"t": 0.1, "gap_s": 0.1}, {"t": 0.2, "gap_s": 0.1}]
    assert hs.threads_by_mode(steps, [False, True], samples) == (
        "fast: CPU share 1.00, moves 0 in 2 samples; slow: CPU share 0.50, moves 1 in 2 samples")
