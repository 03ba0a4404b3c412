"""Overlap between concurrent streams emerges from shared units (hwsim/engine/sharing.py),
held against analytic answers of the documented policy: a saturated unit serves the items
in flight in proportion to the fraction of it each uses alone (generalised processor
sharing), max-min fair across units."""

import pytest

from hwsim import operators
from hwsim.engine.copy import CopyEngine
from hwsim.engine.records import RecordLog, StreamTotals
from hwsim.engine.sharing import Arbiter
from hwsim.engine.stream import Stream
from hwsim.engine.timer import KernelTimer
from hwsim.engine.cluster import Cluster, Link
from hwsim.hw.units import Unit
from hwsim.model import ops
from hwsim.model.kernel import PrefetchLoad
from hwsim.engine.environment import CountingEnvironment


def gps_finish(items: list[tuple[float, float, float]]) -> list[float]:
    """Finish times on one bottleneck unit: items (start, seconds alone, fraction of the unit
    used alone). While the fractions in flight add up to more than 1, every item in flight
    progresses at 1 / their sum of its speed alone."""
    remaining = [1.0] * len(items)
    done = [None] * len(items)
    t = min(s for s, _, _ in items)
    while None in done:
        active = [i for i, (s, _, _) in enumerate(items) if s <= t + 1e-15 and done[i] is None]
        starts = [s for s, _, _ in items if s > t + 1e-15]
        rate = min(1.0, 1.0 / sum(items[i][2] for i in active)) if active else 0.0
        horizon = min(starts) if starts else float("inf")
        finish = min((remaining[i] * items[i][1] / rate for i in active), default=float("inf"))
        dt = min(finish, horizon - t)
        for i in active:
            remaining[i] -= dt * rate / items[i][1]
            if remaining[i] <= 1e-9:
                done[i] = t + dt
        t += dt
    return done


def test_arbiter_splits_one_unit_like_processor_sharing():
    env = CountingEnvironment()
    arbiter = Arbiter(env)
    unit = Unit("u", "hbm", 1.0, "bytes")
    a = arbiter.submit("a", 1.0, {unit: 1.0})
    b = arbiter.submit("b", 2.0, {unit: 1.0})
    env.run()
    assert a.done.value == pytest.approx(2.0)       # half speed until a is done
    assert b.done.value == pytest.approx(3.0)       # then b alone for its last half second


def test_arbiter_leaves_items_on_other_units_alone():
    env = CountingEnvironment()
    arbiter = Arbiter(env)
    u, v = Unit("u", "hbm", 1.0, "bytes"), Unit("v", "bus", 1.0, "bytes")
    a = arbiter.submit("a", 1.0, {u: 1.0})
    b = arbiter.submit("b", 1.0, {u: 1.0})
    c = arbiter.submit("c", 1.0, {v: 0.5})
    env.run()
    assert (a.done.value, b.done.value, c.done.value) == pytest.approx((2.0, 2.0, 1.0))


def _device_streams(chip, n_streams):
    cluster = Cluster(chip)
    device = cluster.devices[0]
    timer = KernelTimer(chip, "kernel")
    copies = CopyEngine(cluster.env, device, cluster.arbiter, timer)
    streams = [Stream(cluster.env, device, cluster.arbiter, KernelTimer(chip, "kernel"), launch="graph",
                      copies=copies) for _ in range(n_streams)]
    return cluster, device, streams, timer


def _hbm_fraction(device, shares):
    return max(f for u, f in shares.items() if u in device.hbm_stacks)


def test_hbm_bound_kernel_and_a_copy_share_hbm(h200):
    cluster, device, (stream,), timer = _device_streams(h200, 1)
    env = cluster.env
    kernel = operators.stream_kernel(h200, 2e9)
    nbytes = 1.0e9
    load = PrefetchLoad("copy", 0, (((0, 0), 1 << 34, nbytes, -1),))
    kernel_alone = timer.at_once(kernel)
    copy_alone = timer.copy(1 << 34, nbytes, -1)
    ends = {}

    def copier():
        stream.copies.start(load)
        ends["copy"] = yield stream.copies.landed[(0, 0)]

    def computer():
        yield env.process(stream.run([kernel], 0, None, StreamTotals()))
        ends["kernel"] = env.now

    env.process(copier())
    env.process(computer())
    env.run()
    expected = gps_finish([(h200.launch_graph_s, kernel_alone.duration, _hbm_fraction(device, device.shares(kernel_alone))),
                           (0.0, copy_alone.duration, _hbm_fraction(device, device.shares(copy_alone, 0)))])
    assert ends["kernel"] == pytest.approx(expected[0], rel=0.02)
    assert ends["copy"] == pytest.approx(expected[1], rel=0.02)
    alone = (kernel_alone.duration, copy_alone.duration)
    for end in ends.values():
        assert max(alone) <= end * 1.0001 and end <= sum(alone) + h200.launch_graph_s
    # both units stayed within their capacity: busy time never exceeds the run
    for unit in device.units:
        assert unit.busy_s <= env.now * 1.0001


def test_three_streams_of_hbm_bound_kernels(h200):
    cluster, device, streams, timer = _device_streams(h200, 3)
    env = cluster.env
    kernels = [operators.stream_kernel(h200, b) for b in (0.5e9, 1.0e9, 2.0e9)]
    ends = [None] * 3

    def run(i):
        yield env.process(streams[i].run([kernels[i]], 0, None, StreamTotals()))
        ends[i] = env.now

    for i in range(3):
        env.process(run(i))
    env.run()
    alone = [timer.at_once(k) for k in kernels]
    expected = gps_finish([(h200.launch_graph_s, e.duration, _hbm_fraction(device, device.shares(e)))
                           for e in alone])
    assert ends == pytest.approx(expected, rel=0.02)
    assert ends[0] < ends[1] < ends[2]
    assert max(e.duration for e in alone) < ends[2] <= sum(e.duration for e in alone) + h200.launch_graph_s


def transfer_shares(link: Link, nbytes: float, duration: float) -> dict[Unit, float]:
    """Reference model of a transfer between two devices as a work item of the arbiter (no
    run path submits one: collectives' flows are hwsim/parallel/flows.py). Alone it takes
    the link's latency plus its bytes over the link's bandwidth; meanwhile it uses the
    sender's port out and the receiver's port in at full rate, and the HBM of both ends
    (read on one, written on the other) in proportion to its bytes."""
    wire = nbytes / link.bytes_s / duration
    out = {port: min(1.0, wire) for port in link.ports}
    for device, efficiency in ((link.src, link.src.chip.hbm_read_efficiency),
                               (link.dst, link.dst.chip.hbm_write_efficiency)):
        hbm_s = nbytes / (device.chip.hbm_peak_bytes_s * efficiency)     # spread over every stack
        for stack in device.hbm_stacks:
            out[stack] = min(1.0, hbm_s / duration)
    return out


def transfer(arbiter: Arbiter, link: Link, nbytes: float, label: str = "transfer"):
    """Process body: move `nbytes` over `link`; returns when the last byte has landed."""
    duration = link.latency_s + nbytes / link.bytes_s
    item = arbiter.submit(label, duration, transfer_shares(link, nbytes, duration))
    yield item.done
    end = arbiter.env.now
    stretch = (end - item.start) / duration
    for port in link.ports:
        port.busy_s += nbytes / port.rate
        port.served += nbytes
        port.record(item.start, end, label, min(1.0, nbytes / port.rate / duration) / stretch)
    return end


def test_transfer_overlaps_compute_on_both_devices(h200):
    cluster = Cluster(h200, gpus=2)
    env, arbiter = cluster.env, cluster.arbiter
    a, b = cluster.devices
    link = cluster.link(a, b)
    kernel = operators.stream_kernel(h200, 2e9)
    streams = [Stream(env, d, arbiter, KernelTimer(h200, "kernel"), launch="graph") for d in (a, b)]
    ends = {}

    def compute(i):
        yield env.process(streams[i].run([kernel], 0, None, StreamTotals()))
        ends[i] = env.now

    def send():
        ends["transfer"] = yield env.process(transfer(arbiter, link, 4e9))

    env.process(compute(0))
    env.process(compute(1))
    env.process(send())
    env.run()
    k_alone = KernelTimer(h200, "kernel").at_once(kernel)
    x_alone = link.latency_s + 4e9 / link.bytes_s
    f_k = _hbm_fraction(a, a.shares(k_alone))
    x_shares = transfer_shares(link, 4e9, x_alone)
    f_read = max(x_shares[u] for u in a.hbm_stacks)       # the sender reads
    f_write = max(x_shares[u] for u in b.hbm_stacks)      # the receiver writes, at write efficiency
    assert f_write > f_read
    # the receiver's HBM saturates first: its kernel and the transfer share it at one rate; the
    # sender's kernel gets what the transfer leaves of the sender's HBM
    start = h200.launch_graph_s
    rate_b = min(1.0, 1.0 / (f_k + f_write))
    rate_a = min(1.0, (1.0 - f_read * rate_b) / f_k)
    end_a, end_b = start + k_alone.duration / rate_a, start + k_alone.duration / rate_b
    progress = (start + (end_b - start) * rate_b) / x_alone    # alone before the kernels start
    end_x = end_b + (1.0 - progress) * x_alone
    assert ends[0] == pytest.approx(end_a, rel=0.02)
    assert ends[1] == pytest.approx(end_b, rel=0.02)
    assert ends["transfer"] == pytest.approx(end_x, rel=0.02)
    assert ends[0] < ends[1]
    assert k_alone.duration < ends[0] and x_alone < ends["transfer"]     # both lost time to the other
    assert a.scaleup_tx.served == 4e9 and b.scaleup_rx.served == 4e9 and a.scaleup_rx.served == 0


def test_a_lone_kernel_through_the_arbiter_takes_its_time_alone(h200):
    """Something else scheduled during the kernel sends it through the arbiter: alone there,
    it must end exactly when the run-ahead path says."""
    kernels = operators.gemm_kernels(h200, 8, 4096, 14336)
    t_alone, _ = operators.time_kernels(h200, kernels, fidelity="kernel")
    cluster, device, (stream,), _ = _device_streams(h200, 1)
    env = cluster.env
    env.process((env.timeout(t_alone / 3) for _ in range(1)))   # an unrelated event mid-stream
    records = RecordLog()
    env.process(stream.run(kernels, 0, records, StreamTotals()))
    env.run()
    assert records[-1].t_end == pytest.approx(t_alone, rel=1e-9)
    assert any(r.shared for r in records)


def test_link_between_nodes_uses_the_nics(h200):
    cluster = Cluster(h200, gpus=4, gpus_per_node=2)
    a, _, c, _ = cluster.devices
    link = cluster.link(a, c)
    assert link.ports == (a.nic, c.nic_rx)
    assert link.bytes_s == h200.scaleout_bytes_s and link.latency_s == h200.scaleout_latency_s
    assert cluster.link(a, cluster.devices[1]).ports == (a.scaleup_tx, cluster.devices[1].scaleup_rx)
