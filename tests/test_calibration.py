"""The h200-sxm profile held against H200 microbenchmarks (shared/calibration and calibration/data)."""

import json
import statistics
from pathlib import Path

import pytest

from hwsim import microbench as mb

ROOT = Path(__file__).resolve().parents[1]
EXTRA = ROOT / "calibration" / "data" / "h200_microbench_extra.jsonl"


def records(part):
    return [r for r in map(json.loads, EXTRA.read_text().splitlines()) if r["part"] == part]


def test_decode_gemms_within_tolerance(h200):
    """cuBLAS GEMMs at decode batch sizes (m <= 16), timed as graph replays."""
    errs = []
    for r in records("gemm_ctas"):
        if r["m"] <= 16:
            sim = mb.gemm_s(h200, r["m"], r["k"], r["n"])
            errs.append(abs(sim - r["ms"] * 1e-3) / (r["ms"] * 1e-3))
    assert len(errs) > 30
    assert statistics.median(errs) < 0.15


def test_per_block_bandwidth_is_bounded_like_little_says(h200):
    """A handful of thread blocks pull a small fraction of HBM; a full chip pulls most of it."""
    few = mb.stream_kernel(h200, 64 << 20)
    few = few.__class__(**{**{f: getattr(few, f) for f in few.__dataclass_fields__},
                           "tiles": 4, "hbm_read": float(16 << 20)})
    t_few, _ = mb.time_kernels(h200, [few])
    t_all, _ = mb.time_kernels(h200, [mb.stream_kernel(h200, 1 << 30)])
    measured_4 = [r for r in records("read_ctas") if r["series"] == "ctas" and r["G"] == 4][0]
    assert (64 << 20) / t_few < 0.05 * (1 << 30) / t_all
    # same order of magnitude as the measured 4-program Triton read (a kernel with less in flight)
    assert 0.5 < ((64 << 20) / t_few) / (measured_4["gbps"] * 1e9) < 4


def test_pointer_chase_latencies_set_the_profile(h200):
    lat = {r["bytes"]: r["ns_per_load"] for r in records("latency")}
    assert h200.hit_latency_s * 1e9 == pytest.approx(lat[16 << 20], rel=0.05)
    assert h200.miss_latency_s * 1e9 == pytest.approx(lat[256 << 20], rel=0.05)
