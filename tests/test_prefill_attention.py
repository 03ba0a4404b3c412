"""Causal FlashAttention-2 prefill: its unequal tiles leave the busiest SM more than its share
(calibration/data/h200_kernel_traces.jsonl, part prefill_attention: CUPTI device times)."""

import json
from pathlib import Path

import pytest

from hwsim import operators as mb
from hwsim.model import ops

TRACES = Path(__file__).resolve().parents[1] / "calibration" / "data" / "h200_kernel_traces.jsonl"


def test_busiest_sm_share_of_a_causal_grid():
    """One query block a head: every tile equal, one each. 32 blocks x 32 heads on 132 SMs:
    the mean share is 1024 / 132 = 7.8 tiles; greedy dispatch in launch order leaves the
    busiest SM more (the last heads' long blocks start late), but less than twice the mean."""
    assert ops.causal_busiest_tiles(1, 32, 132) == 1
    busiest = ops.causal_busiest_tiles(32, 32, 132)
    assert 1024 / 132 < busiest < 2 * 1024 / 132


@pytest.mark.parametrize("tokens", [1024, 4096])
def test_causal_prefill_kernel_within_a_quarter_of_the_h200(h200, tokens):
    measured = [r for r in map(json.loads, TRACES.read_text().splitlines())
                if r.get("part") == "prefill_attention" and r["T"] == tokens and r["KVH"] == 8]
    assert measured
    us = sum(k["us"] for k in measured[0]["kernels"])      # one flash_fwd kernel, its median
    k = ops.prefill_attention("attention", 0, tokens, 32, 8, 128, 128, h200)
    assert mb.device_time_s(h200, [k]) * 1e6 == pytest.approx(us, rel=0.25)
