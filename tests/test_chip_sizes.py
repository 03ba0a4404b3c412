"""Plans are made from the chip's sizes only (issue 42, item 5): a clock or a rate changed leaves
the sizes equal, so plan reuse is an equality; the schedule keeps nothing else of the chip."""

from dataclasses import replace
from pathlib import Path

import pytest

from hwsim.pipeline import system
from hwsim.hw.chip import SIZE_FIELDS


def test_a_clock_or_a_rate_leaves_the_sizes_equal_and_a_size_does_not(h200):
    assert h200.at_sm_clock(0.6 * h200.clock_hz).sizes == h200.sizes
    assert replace(h200, hbm_peak_bytes_s=2 * h200.hbm_peak_bytes_s, l2_bytes_s=1.0).sizes == h200.sizes
    assert replace(h200, sms=h200.sms - 1).sizes != h200.sizes
    assert replace(h200, tensor_flops={"bf16": 1.0}).sizes != h200.sizes       # no native fp8 any more
    assert "clock_hz" not in SIZE_FIELDS and "hbm_peak_bytes_s" not in SIZE_FIELDS


def test_the_schedule_keeps_only_the_sizes(scenario_factory):
    b = system(scenario_factory())
    assert b.schedule.chip == b.chip.sizes
    with pytest.raises(AttributeError):
        b.schedule.chip.clock_hz          # a plan maker cannot read a rate


def test_plan_reuse_inspects_no_frames():
    source = (Path(__file__).resolve().parents[1] / "hwsim" / "whatif" / "reuse.py").read_text()
    assert "_getframe" not in source and "PLAN_CODE" not in source
