"""Collectives on simulated links (hwsim/parallel): analytic answers of the ring and of the
all-to-all, overlap with compute through the arbiter, and the published figures of
docs/multi_gpu.md within 15%."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from hwsim import operators
from hwsim.engine.records import StreamTotals
from hwsim.engine.stream import Stream
from hwsim.engine.timer import KernelTimer
from hwsim.parallel import collectives as col
from hwsim.parallel import routing
from hwsim.parallel.comm_kernels import DEEPEP_LOW_LATENCY, DEEPEP_NORMAL, NCCL_RING
from hwsim.parallel.topology import load_topology

REPO = Path(__file__).resolve().parents[1]


def expected_destinations(experts: int, topk: int, groups: int) -> float:
    """Expected distinct groups (GPUs or nodes, each holding experts/groups experts) that a
    token's top-k experts, drawn uniformly without replacement, fall on."""
    per_group = experts // groups
    miss = 1.0
    for i in range(topk):        # P(none of the k draws lands in one given group)
        miss *= (experts - per_group - i) / (experts - i)
    return groups * (1.0 - miss)


def _cluster(gpus=8, topology="hgx-h200-8"):
    return load_topology(topology).cluster(gpus)


@pytest.mark.parametrize("gpus", [2, 4, 8])
def test_ring_all_reduce_takes_2_g_minus_1_over_g_n_over_bandwidth_plus_latency(gpus):
    cluster = _cluster(gpus)
    chip = cluster.devices[0].chip
    n = 256e6
    t = col.time_alone(cluster, col.all_reduce(cluster, cluster.devices, n, NCCL_RING))
    bw = chip.scaleup_bytes_s * NCCL_RING.scaleup_efficiency
    steps = 2 * (gpus - 1)
    expected = NCCL_RING.fixed_us * 1e-6 + 2 * (gpus - 1) / gpus * n / bw + steps * chip.scaleup_latency_s
    assert t == pytest.approx(expected, rel=1e-6)
    # the bytes went through the ports: every device sent and received 2(G-1)/G of the buffer
    for d in cluster.devices:
        assert d.scaleup_tx.served == pytest.approx(2 * (gpus - 1) / gpus * n)
        assert d.scaleup_rx.served == pytest.approx(2 * (gpus - 1) / gpus * n)


def test_all_gather_is_half_an_all_reduce_and_a_ring_is_as_slow_as_its_network_hop():
    cluster = _cluster(8)
    n = 1e9
    ag = col.time_alone(cluster, col.all_gather(cluster, cluster.devices, n, NCCL_RING))   # the same kernel
    ar = col.time_alone(cluster, col.all_reduce(cluster, cluster.devices, n))
    fixed = NCCL_RING.fixed_us * 1e-6
    assert (ar - fixed) == pytest.approx(2 * (ag - fixed), rel=1e-9)
    two_nodes = _cluster(16)        # hgx-h200-8 x 2: the ring crosses the NICs twice
    t = col.time_alone(two_nodes, col.all_reduce(two_nodes, two_nodes.devices, n))
    chip = two_nodes.devices[0].chip
    per_step = chip.scaleout_latency_s + n / 16 / (chip.scaleout_bytes_s * NCCL_RING.scaleout_efficiency)
    assert t == pytest.approx(fixed + 30 * per_step, rel=1e-6)
    assert two_nodes.devices[7].nic.served > 0 and two_nodes.devices[3].nic.served == 0


def test_uniform_all_to_all_moves_g_minus_1_over_g_of_the_dispatched_bytes():
    gpus, experts = 8, 256
    cluster = _cluster(gpus)
    placement = routing.gpu_of_expert(experts, gpus)
    m = routing.per_expert_matrix(128, 8, 7168, gpus, placement, routing.expert_probabilities(experts))
    dispatched = m.sum()
    col.time_alone(cluster, col.moe_low_latency(cluster, cluster.devices, m, DEEPEP_LOW_LATENCY, "dispatch"))
    sent = sum(d.scaleup_tx.served for d in cluster.devices)
    assert sent == pytest.approx((gpus - 1) / gpus * dispatched)


def test_incast_saturates_the_receivers_port():
    """Seven GPUs send to one: its port in carries them all, so they take 7x the wire time of one
    alone (the link latency is inside each item and stretches with it: the arbiter's policy)."""
    cluster = _cluster(8)
    d = cluster.devices
    n = 100e6
    one = col.time_alone(cluster, col.phase(cluster, [(d[1], d[0], n)], NCCL_RING, "one"))
    cluster = _cluster(8)
    d = cluster.devices
    seven = col.time_alone(cluster, col.phase(cluster, [(d[i], d[0], n) for i in range(1, 8)], NCCL_RING, "incast"))
    lat = d[0].chip.scaleup_latency_s
    assert seven == pytest.approx(7 * (one - lat), rel=1e-6)
    assert d[0].scaleup_rx.served == pytest.approx(7 * n)


def test_a_collective_and_compute_on_another_stream_slow_each_other_through_the_sms():
    cluster = _cluster(2)
    env, a = cluster.env, cluster.devices[0]
    chip = a.chip
    kernel = operators.stream_kernel(chip, 4e9)     # a streaming kernel fills every block slot
    assert a.shares(KernelTimer(chip, "kernel").at_once(kernel))[a.sm] == pytest.approx(1.0)
    alone_k = KernelTimer(chip, "kernel").at_once(kernel).duration
    idle = _cluster(2)
    alone_c = col.time_alone(idle, col.all_reduce(idle, idle.devices, 2e9))
    stream = Stream(env, a, cluster.arbiter, KernelTimer(chip, "kernel"), launch="graph")
    ends = {}

    def compute():
        yield env.process(stream.run([kernel], 0, None, StreamTotals()))
        ends["kernel"] = env.now

    def comm():
        yield env.process(col.all_reduce(cluster, cluster.devices, 2e9))
        ends["all-reduce"] = env.now

    env.process(compute())
    env.process(comm())
    env.run()
    assert ends["kernel"] > alone_k * 1.01          # it lost SMs to the collective kernel
    assert ends["all-reduce"] > alone_c * 1.001     # and the collective lost SMs to it
    assert ends["kernel"] < alone_k + alone_c       # but they overlapped


def _published():
    spec = importlib.util.spec_from_file_location("published_collectives",
                                                  REPO / "calibration" / "published_collectives.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod          # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_published_figures_within_15_percent():
    mod = _published()
    rows = mod.table(slow=False)
    assert len(rows) >= 18
    assert sum(r.role == "held out" for r, _, _ in rows) >= 12
    misses = {r.what: f"{err:+.1%}" for r, _, err in rows if abs(err) > 0.15 and r.role != "superseded"}
    assert not misses
    # NCCL's NVLink rates are fitted to 2 x H200 up to 256 MB, where NCCL had not reached the
    # 8 GiB figure of 8 x H100: those rows stay below it, by what the docs say (-19% for the
    # all-reduce, -36% for the all-gather and reduce-scatter, slower still on two GPUs)
    superseded = [err for r, _, err in rows if r.role == "superseded"]
    assert len(superseded) == 3 and all(-0.4 < err < -0.1 for err in superseded)


def _measured():
    spec = importlib.util.spec_from_file_location("fit_collectives", REPO / "calibration" / "fit_collectives.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_measured_2_gpu_collectives_replay_within_the_fit_s_errors():
    """Every CUDA-graph call measured on 2 x H200, simulated with the kernels as defined: the
    fitted all-reduces and all-to-alls, and the held-out MoE all-to-alls (their message counts)."""
    mod = _measured()
    rows = mod.check(mod.records())
    errors = {}
    for what, _, measured, simulated in rows:
        kind = "moe" if "tok/GPU" in what else what.split()[0]
        errors.setdefault(kind, []).append(abs(simulated / measured - 1))
    assert {k: len(v) for k, v in errors.items()} == {"all_reduce": 17, "all_gather": 17, "reduce_scatter": 17,
                                                       "all_to_all": 17, "moe": 36}
    assert np.median(errors["all_reduce"]) < 0.05 and max(errors["all_reduce"]) < 0.15
    gather_scatter = errors["all_gather"] + errors["reduce_scatter"]
    assert np.median(gather_scatter) < 0.06 and max(gather_scatter) < 0.15
    assert np.median(errors["all_to_all"]) < 0.10
    assert np.median(errors["moe"]) < 0.10 and max(errors["moe"]) < 0.35      # held out


@pytest.mark.parametrize("nbytes, picked", [(16e3, "nccl-ring/LL"), (64e6, "nccl-ring/Simple")])
def test_a_call_runs_on_the_protocol_that_finishes_first_alone(nbytes, picked):
    cluster = _cluster(2)
    hops = [(cluster.devices[0], cluster.devices[1], nbytes / 2), (cluster.devices[1], cluster.devices[0], nbytes / 2)]
    chosen = col.protocol(cluster, NCCL_RING, hops, steps=2)
    assert chosen.name == picked
    t = col.time_alone(cluster, col.all_reduce(cluster, cluster.devices, nbytes, NCCL_RING))
    rate, lat = cluster.devices[0].chip.scaleup_bytes_s, cluster.devices[0].chip.scaleup_latency_s
    alone = [p.fixed_us * 1e-6 + 2 * (lat + nbytes / 2 / (rate * p.scaleup_efficiency)) for p in NCCL_RING.protocols]
    assert t == pytest.approx(min(alone), rel=1e-6)


def test_a_normal_relay_forwards_a_copy_to_each_destination_gpu_of_its_node():
    """One token from GPU 0 to experts on GPUs 9, 10 and 11 of the second node: it crosses the
    network once, to GPU 8 (GPU 0's local index there), which sends three copies over NVLink."""
    cluster = _cluster(16)
    d = cluster.devices
    b = 1e6
    rank = [[0.0] * 16 for _ in range(16)]
    node = [[0.0, 0.0] for _ in range(16)]
    rank[0][9] = rank[0][10] = rank[0][11] = b
    node[0][1] = b
    col.time_alone(cluster, col.moe_normal(cluster, d, rank, node, DEEPEP_NORMAL, "dispatch"))
    assert d[0].nic.served == pytest.approx(b) and d[8].nic_rx.served == pytest.approx(b)
    assert d[0].scaleup_tx.served == 0
    assert d[8].scaleup_tx.served == pytest.approx(3 * b)
    assert [d[j].scaleup_rx.served for j in (9, 10, 11, 12)] == pytest.approx([b, b, b, 0])


def test_deepep_internode_bottleneck_is_nvlink_at_ep16_and_the_nic_beyond():
    """DeepEP's maintainer (deepseek-ai/DeepEP#285): at EP16 on H800 'when the RDMA bandwidth
    reaches 43 GB/s, the NVLink bandwidth will exceed 140 GB/s, making NVLink the bottleneck';
    and the RDMA figure counts a token's own node too, so EP32's 58 GB/s exceeds what a
    400 Gb/s NIC carries."""
    mod = _published()
    busy = {}
    for ep in (16, 32):
        cluster = load_topology("h800-cx7").cluster(ep)
        gpus, nodes = mod.deepep_spread(ep)
        rank = routing.per_destination_matrix(4096, mod.FP8_TOKEN, ep, gpus)
        node = [routing.per_destination_matrix(4096, mod.FP8_TOKEN, ep // 8, nodes)[0]] * ep
        t = col.time_alone(cluster, col.moe_normal(cluster, cluster.devices, rank, node, DEEPEP_NORMAL, "d"))
        d0 = cluster.devices[0]
        busy[ep] = (d0.scaleup_tx.busy_s / t, d0.nic.busy_s / t)
        counted = 4096 * nodes * mod.FP8_TOKEN / t / 1e9
        assert d0.nic.served / t / 1e9 < 50 * DEEPEP_NORMAL.scaleout_efficiency * 1.001
        if ep == 16:
            assert 4096 * gpus * mod.FP8_TOKEN / t / 1e9 > 140          # NVLink, as DeepEP counts it
        else:
            assert counted > 50                                          # above the NIC's line rate
    assert busy[16][0] > 0.95 and busy[16][1] < 0.6
    assert busy[32][1] > 0.95 and busy[32][0] < 0.9


def test_group_limited_gating_keeps_the_top_groups_and_counts_destinations():
    rng = np.random.default_rng(1)
    scores = np.abs(rng.standard_normal((2000, 256))) + 1
    idx = routing.group_limited_topk(scores, groups=8, topk_groups=4, topk=8)
    group = idx // 32
    best = scores.reshape(2000, 8, 32).max(axis=2)
    top4 = np.argsort(-best, axis=1)[:, :4]
    assert all(set(g) <= set(t) for g, t in zip(group.tolist(), top4.tolist()))
    assert routing.distinct_per_token(np.array([[0, 1, 40, 41], [0, 64, 128, 192]]), 256, 8) == 3.0
    # without a group limit the top-8 is a uniform draw: the closed form for distinct holders
    free = routing.group_limited_topk(scores, groups=1, topk_groups=1, topk=8)
    assert routing.distinct_per_token(free, 256, 16) == pytest.approx(
        expected_destinations(256, 8, 16), rel=0.02)
