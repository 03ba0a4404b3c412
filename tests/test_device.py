"""A device has exactly the units its chip has; the replay cache's key covers every timing
field of a kernel; the Gantt chart draws the units' own intervals."""

import dataclasses

import pytest

from hwsim.config.load import load_profile, load_scenario
from hwsim.engine.replay import ReplayCache
from hwsim.engine.timer import KernelTimer
from hwsim.hw.chip import ChipSpec
from hwsim.hw.device import Device
from hwsim.model import ops
from hwsim.model.kernel import TIMING_FIELDS, Kernel, copy_kernel, relocated
from hwsim.pipeline import run_config


def test_units_the_chip_lacks_do_not_exist(h200):
    names = {u.name for u in Device(h200).units}
    assert "decoder" not in names and {"L2", "bus", "copy engine 0", "HBM stack 5", "NVLink out"} <= names
    assert "HBM stack 6" not in names
    decoder_chip = ChipSpec.from_profile(load_profile("h200-decoder"))
    assert Device(decoder_chip).decoder is not None
    without_ports = dataclasses.replace(h200, scaleup_bytes_s=None, scaleout_bytes_s=None)
    assert not {"NVLink out", "NVLink in", "NIC out", "NIC in"} & {u.name for u in Device(without_ports).units}


def test_replay_key_covers_every_field_but_those_marked_not_timing(h200):
    excluded = {f.name for f in dataclasses.fields(Kernel)} - set(TIMING_FIELDS)
    assert excluded == {"name", "layer", "address", "replay_key", "timing", "l2_variants", "code", "role", "item"}
    cache = ReplayCache(KernelTimer(h200, "kernel"))
    base = ops.elementwise("ew", 0, 4e6, 2e6, 0.5, h200)
    keyed = dataclasses.replace(base)
    key = cache.key(keyed)
    assert cache.key(dataclasses.replace(base, name="other", layer=7)) == key
    for name in TIMING_FIELDS:
        value = getattr(base, name)
        changed = {bool: lambda v: not v, int: lambda v: v + 1, float: lambda v: v + 1.5,
                   str: lambda v: v + "x", tuple: lambda v: (*v, "y")}.get(type(value))
        if changed is None:     # an enum (the data and compute components): another member
            changed = lambda v: next(m for m in type(v) if m is not v)  # noqa: E731
        variant = dataclasses.replace(base, **{name: changed(value)})
        assert cache.key(variant) != key, name
        copied = copy_kernel(keyed, **{name: changed(value)})     # as the L2 walk copies
        assert cache.key(copied) != key, name
    assert cache.key(relocated(keyed, "other", 7, 0)) == key


def test_gantt_draws_one_bar_per_unit_interval_of_the_step():
    from matplotlib.figure import Figure

    from hwsim.plots.gantt import plot_gantt

    result = run_config(load_scenario(None, ["workload.decode_steps=1"]))
    t0 = result.records[0].t_start
    t1 = max(r.t_end for r in result.records)
    inside = sum(1 for spans in result.lanes.values() for s, e, *_ in spans if e > t0 and s < t1)
    (bars,) = plot_gantt(Figure().subplots(), result.lanes, result.records)
    assert len(bars.get_paths()) == inside > len(result.records)
    # an HBM stack is busy only while bytes are served there: less than the SM groups' time
    hbm = sum(e - s for s, e, *_ in result.lanes["HBM stack 0"])
    assert 0 < hbm < sum(r.t_end - r.t_start for r in result.records) * 1.0001
