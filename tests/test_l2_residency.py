"""Activations evicted from L2 by the bytes streamed since they were written are re-read from HBM."""

import json
from pathlib import Path

import numpy as np
import pytest

from hwsim import operators as mb
from hwsim.config.load import load_model
from hwsim.metrics import Component
from hwsim.model.kernel import Kernel, named_kernels
from hwsim.model.l2_residency import L2Residency
from hwsim.model.schedule import Schedule, StepShape

CAUSE = Path(__file__).resolve().parents[1] / "calibration" / "data" / "h200_after_gemm_cause.jsonl"
MIB = 2**20


def stream(name, nbytes, writes=()):
    return Kernel(name=name, layer=0, tiles=1, hbm_read=nbytes, writes=writes)


def reader():
    return Kernel(name="add", layer=0, tiles=4, l2_read=100.0, reads=("a", "b"), writes=("c",))


def warm_data_walk(l2, k, clock):
    """k walked at `clock` (bytes streamed so far) with what it reads just written: only its
    code can be cold."""
    l2.clock = clock
    for name in k.reads:
        l2.last_use[name] = clock
    return l2.walk(k)


def test_a_read_after_more_than_the_capacity_streamed_goes_to_hbm():
    l2 = L2Residency(50 * MIB, spill_address=1 << 30)
    near = l2.place([stream("w1", 0, ("a", "b")), stream("w2", 40 * MIB), reader()])[-1]
    assert near.hbm_read == 0 and near.l2_read == 100.0
    # 'a' is written before a 60 MiB stream (its own: a GEMM's output is exposed to its whole
    # weight stream), 'b' after it: half of the reader's bytes come back from HBM
    far = l2.place([stream("w3", 60 * MIB, ("a",)), stream("tiny", 0, ("b",)), reader()])[-1]
    assert far.l2_read == 50.0 and far.hbm_read == 50.0
    assert far.miss_trips == far.input_trips == 1 and far.address == 1 << 30
    # reading refreshes: the same reader again finds both resident
    assert l2.place([reader()])[0].hbm_read == 0


def test_experts_weights_sweep_the_gather_input_out_of_l2(h200):
    """Mixtral (235 MB of gate+up weights an expert): the first expert's token gather finds the
    normed hidden state in L2, later experts' gathers and every SiLU (on a GEMM's output) do
    not. Qwen3 (6 MB): its SiLU still hits."""
    for model, silu_from_hbm in (("mixtral-8x7b", True), ("qwen3-30b-a3b", False)):
        m = load_model(model)
        s = Schedule(m, h200)
        layers = [layer for layer in range(m.layers) if m.is_moe_layer(layer)]
        routing = {layer: np.array([[0, 1]]) for layer in layers}
        ks = named_kernels(s.step(StepShape("decode", 1, 1, 512), routing))
        gathers = [k for k in ks if k.name.startswith("L0.") and k.name.endswith(".gather")]
        silus = [k for k in ks if k.name.startswith("L0.") and k.name.endswith(".silu")]
        assert gathers[0].hbm_read == 0
        assert (gathers[1].hbm_read > 0) == silu_from_hbm
        assert all((k.hbm_read > 0) == silu_from_hbm for k in silus)


def test_silu_after_a_streaming_gemm_is_slower_than_on_resident_data_as_measured(h200):
    """The direction the H200 shows (calibration/data/h200_after_gemm_cause.jsonl): SiLU on a
    tensor evicted by a 235 MB GEMM is slower than on a resident one, and the simulated penalty
    is positive but no larger than the measured one (the model carries only its HBM latency)."""
    rows = {(r["pattern"], r["rows"]): r["positions"] for r in map(json.loads, CAUSE.read_text().splitlines())
            if r["part"] == "after_gemm_cause"}
    s = Schedule(load_model("mixtral-8x7b"), h200)
    for n in (4, 16, 64):
        resident_us = rows[("tiny_gemm>silu(resident)", n)][-1]["us"]
        evicted_us = rows[("big_gemm>silu(evicted)", n)][-1]["us"]
        assert evicted_us > resident_us
        block = s._expert(0, "expert0", n, s.model.moe.expert_ffn, Component.EXPERT_READ, gather=True)
        silu = next(k for k in block if k.name.endswith(".silu"))
        sim_resident = mb.device_time_s(h200, [silu]) * 1e6
        sim_evicted = mb.device_time_s(h200, [s.cold_state().l2._variant(silu, 1, 0.0)]) * 1e6
        assert 0 < sim_evicted - sim_resident <= evicted_us - resident_us


CODE = CAUSE.parent / "h200_code_vs_data.jsonl"


def test_cold_code_costs_what_the_h200_shows(h200):
    """After an L2 flush, SiLU with its code cold but its data warm is slower than resident by
    what calibration/data/h200_code_vs_data.jsonl shows; the model's cold-code variant (fetched
    from HBM) is within 30% of that penalty at 1, 16 and 64 rows."""
    rows = {(r["pattern"], r["rows"]): r["positions"] for r in map(json.loads, CODE.read_text().splitlines())
            if r["part"] == "code_vs_data"}
    s = Schedule(load_model("qwen3-30b-a3b"), h200)
    for n in (1, 16, 64):
        resident_us = rows[("silu(resident)", n)][-1]["us"]
        code_cold_us = rows[("big_read>max(data)>silu(code cold, data warm)", n)][-1]["us"]
        block = s._expert(0, "expert0", n, s.model.moe.expert_ffn, Component.EXPERT_READ, gather=True)
        silu = next(k for k in block if k.name.endswith(".silu"))
        l2 = s.cold_state().l2
        code_cold = warm_data_walk(l2, silu, 0.0)        # never ran: its code comes from HBM
        assert code_cold.start_trips > silu.start_trips and code_cold.hbm_read == silu.hbm_read
        sim = (mb.device_time_s(h200, [code_cold]) - mb.device_time_s(h200, [silu])) * 1e6
        assert sim == pytest.approx(code_cold_us - resident_us, rel=0.3)


def test_code_is_warm_for_a_kernel_of_the_kind_just_run(h200):
    """A kernel right after one of its own kind keeps its code; after another kind it refetches
    it, from L2 while the L2 still holds it (a hit, not an HBM miss)."""
    s = Schedule(load_model("qwen3-30b-a3b"), h200)
    block = s._expert(0, "expert0", 4, s.model.moe.expert_ffn, Component.EXPERT_READ, gather=True)
    silu = next(k for k in block if k.name.endswith(".silu"))
    mul = next(k for k in block if k.name.endswith(".mul"))
    l2 = s.cold_state().l2

    def code_trips(k, clock):
        return warm_data_walk(l2, k, clock).start_trips - k.start_trips
    first = code_trips(silu, 0.0)
    assert code_trips(silu, 1.0) == 0                     # same kind again: warm
    code_trips(mul, 2.0)
    again = code_trips(silu, 3.0)                         # after a mul: cold, but in L2
    assert 0 < again < first
    code_trips(mul, 4.0)
    assert code_trips(silu, 5.0 + 2 * l2.capacity) == first   # streamed out of L2: from HBM


def test_atomics_take_l2_time_but_evict_nothing(h200):
    """index_add_'s atomics are written as L2 traffic (L2_ATOMIC_BYTES an element) so that they
    take the slices' time; they land no data, so an activation written before them is still
    resident after (it was not: Qwen3's 512-row experts each 'streamed' 67 MB of atomics, and
    every next expert re-read its inputs and its code from HBM)."""
    from hwsim.model import ops
    rows, d = 512, 2048
    atomics = rows * d * ops.L2_ATOMIC_BYTES
    assert atomics > 50 * MIB
    scatter = ops.elementwise("scatter_add", 0, 2 * rows * d * 2, rows * d * 2, 1.0, h200,
                              reads=("scaled",), writes=("acc",), atomic_bytes=atomics)
    assert scatter.tiles * scatter.l2_write == pytest.approx(rows * d * 2 + atomics)   # timed in full
    l2 = L2Residency(50 * MIB, spill_address=1 << 30)
    after = l2.place([stream("w", 0, ("a", "b")), scatter, reader()])[-1]
    assert after.hbm_read == 0
    plain = ops.elementwise("scatter_add", 0, 2 * rows * d * 2, rows * d * 2 + atomics, 1.0, h200,
                            reads=("scaled",), writes=("acc",))
    l2 = L2Residency(50 * MIB, spill_address=1 << 30)
    assert l2.place([stream("w", 0, ("a", "b")), plain, reader()])[-1].hbm_read > 0


def test_an_experts_gather_does_not_keep_the_other_tokens_resident():
    """Each expert's gather reads only its own tokens' rows of `h`; a row is read again only by
    the token's other top-k experts, far apart in a 128-expert loop. So after more than the L2
    has streamed since `h` was written, a later expert's rows come from HBM, however recently
    other experts read other rows (in-step small-index gathers at 16 rows: 6-12 us measured,
    7.4 us alone; validation/data/h200_general_kernels.csv.xz)."""
    def gather():
        return Kernel(name="gather", layer=0, tiles=4, l2_read=100.0, reads=("h",), writes=("xe",),
                      partial=("h",))
    l2 = L2Residency(50 * MIB, spill_address=1 << 30)
    first = l2.place([stream("norm", 0, ("h",)), gather()])[-1]
    assert first.hbm_read == 0
    experts = l2.place([stream("w1", 30 * MIB), gather(), stream("w2", 30 * MIB), gather()])
    assert experts[1].hbm_read == 0               # 30 MiB after h was written: resident
    assert experts[3].hbm_read == 100.0 and experts[3].l2_read == 0   # 60 MiB: evicted, whatever experts[1] read
    # a whole-tensor reader does refresh it
    l2 = L2Residency(50 * MIB, spill_address=1 << 30)
    whole = l2.place([stream("norm", 0, ("h",)), stream("w1", 30 * MIB), reader_of_h(),
                      stream("w2", 30 * MIB), reader_of_h()])
    assert whole[-1].hbm_read == 0


def reader_of_h():
    return Kernel(name="add", layer=0, tiles=4, l2_read=100.0, reads=("h",), writes=("y",))
