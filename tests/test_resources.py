"""Unit tests of the queueing primitives and the HBM channel model."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwsim.hw.hbm import Hbm
from hwsim.hw.server import Server, ServerBank


def test_fifo_server_follows_lindley():
    s = Server("s", rate=10.0)
    assert s.serve(0.0, 10) == pytest.approx(1.0)      # idle: starts at once
    assert s.serve(0.5, 10) == pytest.approx(2.0)      # queued behind the first
    assert s.serve(5.0, 5) == pytest.approx(5.5)       # idle again
    assert s.busy_s == pytest.approx(2.5)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1e-3), st.floats(1, 1e6)), min_size=1, max_size=40))
def test_server_never_exceeds_full_utilisation(reqs):
    s = Server("s", rate=1e9)
    now = 0.0
    end = 0.0
    for gap, units in reqs:
        now += gap
        end = max(end, s.serve(now, units))
    assert s.busy_s <= end + 1e-15           # busy time never exceeds elapsed time
    assert s.units == pytest.approx(sum(u for _, u in reqs))


def make_hbm(**kw):
    args = dict(stacks=2, channels_per_stack=4, peak_bytes_s=8e9, read_efficiency=1.0,
                write_efficiency=0.5, interleave_bytes=256)
    args.update(kw)
    return Hbm(**args)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 1 << 20), st.floats(1, 1e6))
def test_interleaving_conserves_bytes(address, nbytes):
    hbm = make_hbm()
    per = hbm.spread(address, nbytes)
    assert per.sum() == pytest.approx(nbytes)
    assert (per >= 0).all()


def test_short_read_hits_few_channels_long_read_all():
    hbm = make_hbm()
    assert np.count_nonzero(hbm.spread(0, 512)) == 2
    long = hbm.spread(0, 256 * 8 * 100)
    assert np.count_nonzero(long) == 8 and long.max() == long.min()


def test_reads_on_one_channel_queue_while_spread_reads_run_in_parallel():
    hbm = make_hbm()   # 8 channels of 1 GB/s
    t_same = max(hbm.read(0.0, 0, 256) for _ in range(8))          # all on channel 0
    hbm2 = make_hbm()
    t_spread = max(hbm2.read(0.0, i * 256, 256) for i in range(8))  # one per channel
    assert t_same == pytest.approx(8 * t_spread)


def test_writes_run_at_write_efficiency():
    hbm = make_hbm()
    r = hbm.read(0.0, 0, 8 * 256 * 10)
    hbm2 = make_hbm()
    w = hbm2.write(0.0, 0, 8 * 256 * 10)
    assert w == pytest.approx(2 * r)


def test_server_bank_serves_in_parallel():
    bank = ServerBank("b", 4, rate_each=1.0)
    assert bank.serve(0.0, np.array([1.0, 2.0, 0.0, 1.0])) == pytest.approx(2.0)
    assert bank.serve(0.0, np.array([1.0, 0.0, 0.0, 0.0])) == pytest.approx(2.0)
