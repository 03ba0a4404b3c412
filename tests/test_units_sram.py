"""Units own their demand (issue 32, item 1): the memory path's levels are built by the device's
units, so a new unit on a tile's path needs no change in the engine; the expert SRAM is a unit
that serves the weight bytes kernels read from it and the prefetch copies landing in it, with
its own lane, and changes no timing."""

import numpy as np
import pytest

from hwsim.config.load import load_profile, load_scenario
from hwsim.engine.timer import KernelTimer
from hwsim.hw.chip import ChipSpec
from hwsim.hw.device import Device
from hwsim.hw.units import Bus, Unit
from hwsim.metrics import Component
from hwsim.model import ops


@pytest.fixture(scope="module")
def chip():
    return ChipSpec.from_profile(load_profile("h200-sxm"))


def weights_gemm(chip, on_chip: float):
    """A decode GEMM over 2048 x 8192 bf16 weights (no split-K), `on_chip` of them resident in SRAM."""
    (k,) = ops.gemm("w", 0, 1, 2048, 8192, chip, weight_addr=0, weight_bytes=2, data=Component.WEIGHT_READ,
                    weights_on_chip=on_chip)
    return k


def test_the_memory_path_walks_the_levels_its_device_units_build(chip):
    plain, with_sram = Device(chip), Device(chip, sram_bytes=32 * 2**20)
    assert [lv.kind for lv in KernelTimer(chip, "kernel", device=plain).path.levels] == ["bus", "l2", "hbm"]
    levels = KernelTimer(chip, "kernel", device=with_sram).path.levels
    assert [lv.kind for lv in levels] == [u.kind for u in with_sram.memory] == ["bus", "l2", "sram", "hbm"]
    # a level holds nothing of its device: a kernel timed on it is timed for every identical
    # device of a cluster (replay.py's shared book)
    for level in levels:
        assert not any(isinstance(v, (Unit, Device)) for v in vars(level).values())


def test_a_new_unit_on_the_memory_path_needs_no_engine_change(chip):
    """A unit class (here a plain Bus of another kind, at half the bus's rate) listed on the
    device's memory path and among its demanding units is timed, charged and shared with no
    line of the engine touched."""
    device = Device(chip)
    probe = Bus("probe", "probe", chip.bus_bytes_s / 2, "bytes")
    device.memory.append(probe)
    device.demanding.append(probe)
    k = weights_gemm(chip, 0.0)
    e = KernelTimer(chip, "kernel", device=device).at_once(k)
    busy, served, until = e.demand["probe"]
    assert served == pytest.approx(e.demand["bus"][1])            # every byte crosses it too
    assert busy == pytest.approx(2 * e.demand["bus"][0])          # at half the bus's rate
    device.account(e, 3)
    assert probe.served == pytest.approx(3 * served)
    assert device.shares(e)[probe] == pytest.approx(min(1.0, busy / e.duration))


def test_sram_serves_the_resident_weight_bytes_and_changes_no_timing(chip):
    k = weights_gemm(chip, 0.5)
    weights = 2048 * 8192 * 2
    assert k.tiles * k.sram_read == pytest.approx(weights / 2)
    device = Device(chip, sram_bytes=32 * 2**20)
    e = KernelTimer(chip, "kernel", device=device).at_once(k)
    alone = KernelTimer(chip, "kernel").at_once(k)
    assert e.duration == alone.duration and e.parts == alone.parts
    busy, served, until = e.demand["sram"]
    assert served == pytest.approx(weights / 2)
    assert busy == pytest.approx(served / chip.l2_bytes_s)      # the L2's lines: its bandwidth
    assert 0 < until <= e.duration
    device.account(e, 2)
    assert device.sram.served == pytest.approx(weights)
    assert device.sram not in device.shares(e)                  # asked through the L2's share
    device.record_intervals(True)
    device.record(e, 1.0, 1.0 + e.duration, "w")
    (start, end, label, share), = device.sram.intervals
    assert (start, label) == (1.0, "w") and end == pytest.approx(1.0 + until)
    assert share == pytest.approx(busy / until)


def test_a_prefetch_copy_lands_in_sram_at_the_same_speed(chip):
    device = Device(chip, sram_bytes=32 * 2**20)
    nbytes = 5.5 * 2**20
    e = KernelTimer(chip, "kernel", device=device).copy(3 * 2**20, nbytes, 2)
    alone = KernelTimer(chip, "kernel").copy(3 * 2**20, nbytes, 2)
    assert e.duration == alone.duration
    assert e.demand["sram"][1] == nbytes == e.demand["l2"][1] == e.demand["bus"][1]
    assert e.hbm_read == nbytes


def test_a_pass_with_expert_sram_charges_it_every_byte_read_or_landed_there():
    """The SRAM unit's bytes are the resident weights the pass's kernels read plus the prefetch
    copies that landed, and its lane is drawn; a scenario without expert SRAM has no such unit."""
    from hwsim.pipeline import system
    from hwsim.engine.records import RecordLog
    from hwsim.model.kernel import Kernel, PrefetchLoad, named_kernels
    from hwsim.model.schedule import StepShape
    from hwsim.step import plan_pass, simulate_pass

    cfg = load_scenario(None, ["model=qwen3-30b-a3b", "workload.batch_size=8", "moe.cache.policy=pinned-hot",
                               "moe.prefetch.enabled=true", "workload.context_tokens=512"])
    b = system(cfg)
    shape = StepShape("decode", 8, 8, cfg.workload.context_tokens)
    plan = plan_pass(b, shape, 0)
    read = sum(k.tiles * k.sram_read for k in named_kernels(plan.items) if type(k) is Kernel)
    landed = sum(nbytes for item in plan.items if type(item) is PrefetchLoad for _, _, nbytes, _ in item.loads)
    assert read > 0 and landed > 0
    simulate_pass(b, shape, 0, RecordLog(), plan=plan)
    b.device.sync()
    assert b.device.sram.served == pytest.approx(read + landed, rel=1e-9)
    assert b.device.sram.capacity == b.chip.l2_bytes * cfg.moe.cache.persist_fraction
    assert b.gpus.lanes()["expert SRAM"]

    plain = system(load_scenario(None, ["model=qwen3-30b-a3b", "workload.batch_size=8"]))
    assert plain.device.sram is None and "expert SRAM" not in plain.gpus.lanes()
    assert np.all([lv.kind != "sram" for lv in plain.stream.timer.path.levels])
