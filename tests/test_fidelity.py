"""Fidelity levels and reuse agree with each other on whole steps."""

import pytest

from hwsim.config.load import load_scenario
from hwsim.pipeline import run_config


def itl(*sets):
    s = run_config(load_scenario(None, ["workload.decode_steps=1", *sets])).summary
    return s["itl_ms"]["p50"], s


@pytest.mark.parametrize("extra", [[], ["workload.batch_size=8", "model=qwen3-30b-a3b"],
                                   ["moe.prefetch.enabled=true"]])
def test_kernel_fidelity_and_reuse_match_wave_fidelity(extra):
    wave, sw = itl("runtime.fidelity=wave", *extra)
    kernel, sk = itl("runtime.fidelity=kernel", "runtime.reuse=false", *extra)
    reused, sr = itl("runtime.fidelity=kernel", "runtime.reuse=true", *extra)
    assert kernel == pytest.approx(wave, rel=1e-9)
    assert reused == pytest.approx(wave, rel=1e-9)
    for comp, ms in sw["breakdown_ms"].items():
        assert sr["breakdown_ms"][comp] == pytest.approx(ms, rel=1e-6, abs=1e-9)
    assert sr["bytes"] == pytest.approx(sw["bytes"], rel=1e-9)
    assert sk["sim"]["events"] < sw["sim"]["events"]


def test_tile_fidelity_within_two_percent_of_the_default():
    tile, _ = itl("runtime.fidelity=tile")
    default, _ = itl()
    assert default == pytest.approx(tile, rel=0.02)


def test_tile_rounds_match_one_process_per_block_slot():
    """The numpy rounds of tile fidelity against the SimPy process per block slot they
    replace agree to rounding on one wave, many waves, stream-K, per-stack experts and writes."""
    from hwsim.config.load import load_profile
    from hwsim.engine.records import RecordLog, StreamTotals
    from hwsim.engine.stream import Stream
    from hwsim.engine.timer import KernelTimer
    from hwsim.hw.chip import ChipSpec
    from hwsim.engine.cluster import Cluster
    from hwsim.metrics import Component
    from hwsim.model import ops

    chip = ChipSpec.from_profile(load_profile("h200-sxm"))
    kernels = [
        ops.elementwise("ew", 0, 4e6, 2e6, 0.5, chip, vectorized=False),            # 3907 tiles
        *ops.gemm("gemm", 0, 8, 4096, 14336, chip, weight_addr=1 << 30, weight_bytes=2,
                  data=Component.WEIGHT_READ),
        *ops.gemm("expert", 0, 4, 4096, 28672, chip, weight_addr=3 << 30, weight_bytes=2,
                  data=Component.EXPERT_READ, channel_group=2),
        *ops.decode_attention("attn", 0, 4, 32, 8, 128, 128, 4097, 512, 5 << 30, chip),
        ops.kv_append("kv", 0, 64, 1024, 2, 7 << 30, chip),
        ops.rows_kernel("norm", 0, 1, 4096, 2, 4, chip, weight_bytes=8192, weight_addr=9 << 30),   # 1 tile
        ops.elementwise("add", 0, 32768, 16384, 0.5, chip),                                         # 3 tiles
    ]
    ends = {}
    for processes in (False, True):
        cluster = Cluster(chip)
        env = cluster.env
        stream = Stream(env, cluster.devices[0], cluster.arbiter,
                        KernelTimer(chip, "tile", tile_processes=processes), launch="graph")
        records = RecordLog()
        env.process(stream.run(kernels, 0, records, StreamTotals()))
        env.run()
        ends[processes] = [r.t_end - r.t_start for r in records]
    for rounds, procs in zip(ends[False], ends[True]):
        assert rounds == pytest.approx(procs, rel=1e-9)
