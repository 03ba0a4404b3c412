"""Analytic checks: the resource model reaches, and never beats, its ceilings."""

import dataclasses

import pytest

from hwsim import operators as mb
from hwsim.model import ops


def test_long_streaming_read_reaches_effective_bandwidth(h200):
    nbytes = 4e9
    t, _ = mb.time_kernels(h200, [mb.stream_kernel(h200, nbytes)])
    effective = h200.hbm_peak_bytes_s * h200.hbm_read_efficiency
    assert nbytes / t == pytest.approx(effective, rel=0.02)
    assert nbytes / t <= effective


def test_large_gemm_reaches_compute_ceiling(h200):
    m = k = n = 8192
    t = mb.gemm_s(h200, m, k, n)
    ceiling = h200.tensor_flops["bf16"] * h200.tensor_efficiency
    achieved = 2.0 * m * k * n / t
    assert achieved <= ceiling
    assert achieved == pytest.approx(ceiling, rel=0.05)


def test_small_kernels_are_slower_per_byte_than_large(h200):
    rates = []
    for n in (256, 2048, 14336):   # same K, more output columns: more thread blocks
        t = mb.gemm_s(h200, 1, 4096, n)
        rates.append(4096 * n * 2 / t)
    assert rates[0] < rates[1] < rates[2]
    assert rates[0] < 0.25 * rates[2]


def test_few_sm_kernel_is_bounded_by_per_sm_pipes(h200):
    # One thread block streaming 1 MB: Little's law on one SM, far below HBM bandwidth.
    k = mb.stream_kernel(h200, 1 << 20)
    one_block = dataclasses.replace(k, tiles=1, hbm_read=float(1 << 20))
    t, _ = mb.time_kernels(h200, [one_block])
    per_sm_rate = h200.inflight_bytes_per_block / h200.miss_latency_s
    assert (1 << 20) / t <= per_sm_rate * 1.0001
    assert (1 << 20) / t == pytest.approx(per_sm_rate, rel=0.1)


def test_tile_and_wave_fidelity_agree_on_a_gemm(h200):
    wave = mb.gemm_s(h200, 8, 4096, 14336, fidelity="wave")
    tile = mb.gemm_s(h200, 8, 4096, 14336, fidelity="tile")
    assert tile == pytest.approx(wave, rel=0.02)


def test_graph_launch_is_cheaper_than_eager(h200):
    ks = [ops.elementwise(f"k{i}", 0, 4096, 4096, 0.25, h200) for i in range(50)]
    graph, _ = mb.time_kernels(h200, ks, launch="graph")
    eager, _ = mb.time_kernels(h200, ks, launch="eager")
    assert eager > 3 * graph
    assert eager / 50 == pytest.approx(h200.launch_eager_s, rel=0.2)   # host-bound
