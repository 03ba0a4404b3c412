"""HF paged|sdpa attention is one SDPA over the whole packed (with CUDA graphs, padded) batch, run as
the engine's own kernels through the simulated chip in place of the pass's per-sequence attention,
and a CUDA-graph capture runs the forward once and records it once, synchronously (issue 43: TTFT)."""

import pytest

from hwsim.pipeline import system
from hwsim.config.load import load_scenario
from hwsim.metrics import Component
from hwsim.model.paged_sdpa import APART, PackedShape, layer_kernels
from hwsim.serving.engine_host import EngineHost, load_engine_host
from hwsim.serving.packed_attention import packed_shape
from hwsim.serving.step_clock import StepClock, StepBatch

# the default HF host profile's per-launch and plan costs (hardware_profiles/engine_hosts/hf-transformers-h200.yaml)
LAUNCH_S = load_engine_host("hf-transformers-h200").launch_us.value * 1e-6
PLAN_S = load_engine_host("hf-transformers-h200").plan_ms.value * 1e-3

PAD = (64, 16384, 8192, 1345 * 256)         # the H100 graphs run's q / KV intervals, budget, pages


@pytest.fixture(scope="module")
def built():
    return system(load_scenario(None, ["model=llama-3.1-8b", "hardware=h100-sxm", "workload.arrivals.kind=poisson"]))


def test_packed_shape_is_the_whole_batch_and_padded_with_graphs():
    batch = [(1, 999), (1, 1999), (300, 0)]
    assert packed_shape(batch, 0.2) == PackedShape(302, 302 + 2998, True, 0.2)
    assert packed_shape([(500, 0)], 0.2) == PackedShape(500, 500, False, 0.2)     # no cache read: no gather
    # maybe_pad_inputs: q to 64, the KV read to 16384 (an empty read to one interval)
    assert packed_shape([(500, 0)], 0.2, PAD) == PackedShape(512, 512 + 16384, True, 0.2)
    assert packed_shape(batch, 0.2, PAD) == PackedShape(320, 320 + 16384, True, 0.2)


def test_the_layers_kernels_move_the_engines_bytes_and_flops(built):
    """Llama-3.1-8B (32 heads, 8 KV heads, head_dim 128), q 512 x k 4096 read from the cache."""
    p = PackedShape(512, 4096, True, 0.18)
    ks = layer_kernels(built.schedule, 3, p)
    assert [k.name for k in ks] == [f"L3.{n}" for n in ("k_write", "v_write", "k_gather", "v_gather", "k_repeat",
                                                        "v_repeat", "q_copy", "sdpa", "attn_out_copy")]
    by = {k.name.split(".")[1]: k for k in ks}
    kv, rep = 4096 * 8 * 128 * 2, 4096 * 32 * 128 * 2                 # bytes of K (or V): cache heads, query heads
    g = by["k_gather"]
    assert g.tiles * g.hbm_read == pytest.approx(kv) and g.data is Component.KV_READ    # from the cache
    r = by["k_repeat"]
    assert r.item.read_bytes == kv and r.item.write_bytes == rep and r.item.vectorized   # streams (paged_sdpa.py)
    s = by["sdpa"]
    assert s.tiles == 4 * 32 and s.tensor_share == 0.18 and s.compute is Component.ATTENTION_COMPUTE
    assert s.tiles * s.tensor_flops == pytest.approx(4 * 512 * 4096 * 128 * 32)
    assert s.tiles * (s.hbm_read + s.l2_read) == pytest.approx(     # Q, K and V per (q block, head), the bias rows
        32 * 512 * 128 * 2 + 4 * 2 * rep + 32 * 512 * 4096 * 2)
    first = 2 * rep + 512 * 4096 * 2                                    # 64 MB of K and V: from HBM; the 4 MB bias too
    assert s.tiles * s.hbm_read == pytest.approx(first if 512 * 4096 * 2 > built.chip.l2_bytes / 2 else 2 * rep)
    assert [k.name for k in layer_kernels(built.schedule, 3, PackedShape(512, 512, False, 0.18))][:4] == \
        ["L3.k_write", "L3.v_write", "L3.k_repeat", "L3.v_repeat"]      # nothing read from the cache: no gather
    assert layer_kernels(built.schedule, 3, APART) == []


def test_a_kernels_tensor_share_is_its_compute_rate(built):
    """Kernel.tensor_share (the SDPA backend's profiled share of the peak) sets its MMAs' rate; 0
    keeps the chip's tensor efficiency."""
    from hwsim.hw.sm import SmArray
    sm, c = SmArray(built.chip), built.chip
    assert sm.compute_time(1e9, 0, 0, "bf16", share=0.18) == pytest.approx(1e9 / (c.tensor_flops["bf16"] * 0.18 / c.sms))
    assert sm.compute_time(1e9, 0, 0, "bf16") == pytest.approx(1e9 / (c.tensor_flops["bf16"] * c.tensor_efficiency / c.sms))


def packed_clock(built, cuda_graph=False, async_batching=False, eff=0.124, packed=True):
    host = packed_host(cuda_graph, async_batching, eff)
    return StepClock(built, host=host, packed=packed), host


def test_the_steps_attention_is_the_engines_kernels_in_the_pass(built):
    """The step's pass leaves its per-sequence attention out and runs the engine's kernels: its
    device time is the rest of the pass and the attention's stream, both simulated, and the
    breakdown's attention is the stream's."""
    clock, _ = packed_clock(built)
    batch = [(1, 800)] * 30 + [(8162, 0)]
    t = clock.time(batch)
    packed = packed_shape(batch, 0.124)
    rest = clock.corner(30, 1024 if StepBatch.of(batch).mean_context > 256 else 256, 8162, 1, apart=True)
    stream_corners = clock.attention_corners(packed, exact=False)
    assert stream_corners and all(s.breakdown_s["attention_compute"] > 0 for _, s in stream_corners)
    stream = sum(w * s.duration_s for w, s in stream_corners)
    assert t.breakdown_s["attention_compute"] == pytest.approx(
        sum(w * s.breakdown_s["attention_compute"] for w, s in stream_corners))
    assert t.kernels > 32 * 9                          # the attention's nine kernels a layer are the pass's
    # the rest of the pass has no attention kernel: its attention_compute is none
    assert rest.breakdown_s["attention_compute"] == 0.0
    plain = StepClock(built, host=packed_host()).time(batch)
    own = plain.breakdown_s["attention_compute"]
    assert t.device_s > plain.device_s - own + 0.9 * stream    # 8192 x 32,192 dense, not 8162^2 / 2 causal
    assert t.device_s > 2 * plain.device_s


def test_prompts_in_one_step_attend_to_each_other(built):
    clock, _ = packed_clock(built, eff=0.3)
    one = clock.attention_corners(packed_shape([(2000, 0)], 0.3), exact=True)[0][1]
    two = clock.attention_corners(packed_shape([(2000, 0), (2000, 0)], 0.3), exact=True)[0][1]
    assert two.breakdown_s["attention_compute"] == pytest.approx(4 * one.breakdown_s["attention_compute"], rel=0.05)


def test_the_attention_grid_interpolates_the_exact_stream(built):
    """Eager shapes are timed between the (q, k) grid's streams: within a few percent of the
    shape's own stream (work bilinear in q and k: 1.6% at most over 40 random steps)."""
    clock, _ = packed_clock(built, eff=0.18)
    for batch in ([(1, 700)] * 37, [(1, 900)] * 5 + [(1500, 0)], [(3000, 2500)]):
        p = packed_shape(batch, 0.18)
        exact = clock.attention_corners(p, exact=True)[0][1].duration_s
        grid = sum(w * s.duration_s for w, s in clock.attention_corners(p, exact=False))
        assert grid == pytest.approx(exact, rel=0.03), batch


def packed_host(cuda_graph=False, async_batching=False, eff=0.124):
    p = load_engine_host("hf-transformers-h200")
    field = "packed_sdpa_efficiency_graphs" if cuda_graph else "packed_sdpa_efficiency"
    p = p.model_copy(update={field: p.graph_capture_forwards.model_copy(update={"value": eff})})
    host = EngineHost(p, 32, cuda_graph=cuda_graph, async_batching=async_batching)
    host.padding = PAD
    return host


def test_graphs_first_prefill_of_a_new_padded_shape_costs_a_capture(built):
    clock, host = packed_clock(built, cuda_graph=True)
    eager = (46 * 32 + 26) * LAUNCH_S
    first = clock.time([(700, 0)])
    again = clock.time([(690, 0)])                           # pads to the same 704 x 16,384: replayed
    third = clock.time([(705, 0)])                           # 768: a new shape, captured
    sched = 85.0e-6 + 47.3e-6 + 747.0e-6
    assert again.total_s == pytest.approx(sched + 9.85e-6 + again.device_s)
    assert first.total_s == pytest.approx(sched + max(eager, first.device_s) + eager)
    assert third.total_s - third.device_s > eager           # the capture's recorded issue, on top
    assert len(host.graphs) == 2


def test_a_capture_is_not_overlapped_by_async_batching(built):
    host = packed_host(cuda_graph=True, async_batching=True)
    clock = StepClock(built, host=host)
    batch = [(1, 1000)] * 8
    first = clock.time(batch)                                # a capture on IO pair 1: synchronous
    sched = 85.0e-6 + 8 * (47.3 + 747.0) * 1e-6
    eager = (46 * 32 + 26) * LAUNCH_S
    assert first.total_s == pytest.approx(sched + max(eager, first.device_s) + eager)
    clock.time(batch)                                        # pair 0's capture
    replay = clock.time(batch)
    assert replay.total_s == pytest.approx(max(sched, 9.85e-6 + replay.device_s))


def test_async_stamps_wait_for_the_next_steps_capture():
    """Measured (graphs + async, h100_call_s18 burst): stamps 5.7 ms apart after a 674 ms step: the
    loop issues step N+1 before it updates step N, and a capture is synchronous."""
    from hwsim.serving.engine_host import async_stamps
    from hwsim.serving.step_clock import StepTime

    def st(total, capture=0.0):
        return StepTime(0.01, 0.0, total, {"host_capture": capture})
    steps = [(0.0, st(0.5), []), (0.5, st(0.7, capture=0.14), []), (1.2, st(0.1), []),
             (2.0, st(0.1, capture=0.14), [])]                 # idle before the last: no wait
    assert async_stamps(steps) == {0.5: 1.2}
