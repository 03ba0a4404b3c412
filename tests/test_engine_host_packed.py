"""HF paged|sdpa attention is one SDPA over the whole packed (with CUDA graphs, padded) batch, and
a CUDA-graph capture runs the forward once and records it once, synchronously (issue 43: TTFT)."""

import pytest

from hwsim.build import build
from hwsim.config.load import load_scenario
from hwsim.serving.engine_host import EngineHost, load_engine_host
from hwsim.serving.packed_attention import PackedAttention, PackedShape
from hwsim.serving.step_clock import StepClock

PAD = (64, 16384, 8192, 1345 * 256)         # the H100 graphs run's q / KV intervals, budget, pages


@pytest.fixture(scope="module")
def built():
    return build(load_scenario(None, ["model=llama-3.1-8b", "hardware=h100-sxm", "workload.arrivals.kind=poisson"]))


def test_packed_shape_is_the_whole_batch_and_padded_with_graphs():
    batch = [(1, 999), (1, 1999), (300, 0)]
    assert PackedAttention.shape(batch) == PackedShape(302, 302 + 2998, True)
    assert PackedAttention.shape([(500, 0)]) == PackedShape(500, 500, False)     # no cache read: no gather
    # maybe_pad_inputs: q to 64, the KV read to 16384 (an empty read to one interval)
    assert PackedAttention.shape([(500, 0)], PAD) == PackedShape(512, 512 + 16384, True)
    assert PackedAttention.shape(batch, PAD) == PackedShape(320, 320 + 16384, True)


def test_prompts_in_one_step_attend_to_each_other(built):
    att = PackedAttention.of(built.model, built.chip)
    one = att.seconds(att.shape([(2000, 0)]), 0.3)
    two = att.seconds(att.shape([(2000, 0), (2000, 0)]), 0.3)
    assert two == pytest.approx(4 * one, rel=0.05)          # dense q x k: 4x, not the 2x of two attentions


def packed_host(cuda_graph=False, async_batching=False, eff=0.124):
    p = load_engine_host("hf-transformers-h200")
    field = "packed_sdpa_efficiency_graphs" if cuda_graph else "packed_sdpa_efficiency"
    p = p.model_copy(update={field: p.graph_capture_forwards.model_copy(update={"value": eff})})
    host = EngineHost(p, 32, cuda_graph=cuda_graph, async_batching=async_batching)
    host.padding = PAD
    return host


def test_a_long_prefill_costs_its_packed_attention(built):
    plain = StepClock(built, host=EngineHost(load_engine_host("hf-transformers-h200"), 32))
    host = packed_host()
    host.attention = PackedAttention.of(built.model, built.chip)
    packed = StepClock(built, host=host)
    batch = [(1, 800)] * 30 + [(8162, 0)]
    t0, t1 = plain.time(batch), packed.time(batch)
    dense = host.attention.seconds(host.attention.shape(batch), 0.124)
    own = t0.breakdown_s["attention_compute"] + t0.breakdown_s["kv_read"]
    assert t1.device_s == pytest.approx(t0.device_s - own + dense)
    assert t1.device_s > 2 * t0.device_s                     # 8192 x 32,192 dense, not 8162^2 / 2 causal


def test_graphs_first_prefill_of_a_new_padded_shape_costs_a_capture(built):
    host = packed_host(cuda_graph=True)
    host.attention = PackedAttention.of(built.model, built.chip)
    clock = StepClock(built, host=host)
    eager = (46 * 32 + 26) * 45.6e-6
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
    eager = (46 * 32 + 26) * 45.6e-6
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
