"""Issue 33: work that identical GPUs repeat is done once, and the shortcuts give what the long
way gives, to the bit.

- The streams of a cluster share one book of timed effects (hwsim/engine/replay.py); each
  device keeps the shares and lanes it derives from an effect. A run with the book shared must
  equal one where every GPU times its own kernels, with collectives beside the kernels (two
  micro-batches: kernels ask the arbiter for their device's units) and busy intervals kept.
- A private stream's pass of kernels that all run alone goes through one loop
  (Stream._run_kernels_alone); the general loop must give the same numbers. So does one GPU's
  pass when nothing else is scheduled, its kernel records included.
"""

from pathlib import Path

import pytest

from hwsim.pipeline import run_config, system
from hwsim.config.load import load_scenario
from hwsim.engine.stream import Stream

REPO = Path(__file__).resolve().parents[1]
VOLATILE = {"wall_s"}


def _scenario(name: str, *sets: str):
    return load_scenario(REPO / "scenarios" / f"{name}.yaml", ["workload.decode_steps=2", *sets])


def _same(a, b) -> bool:
    """Equal to the bit, but for the simulator's own wall clock."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(k in VOLATILE or _same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _lanes(result) -> dict:
    return {name: [(s, e, share) for s, e, _, share in spans] for name, spans in result.lanes.items()}


@pytest.mark.parametrize("sram", [False, True])
def test_a_shared_book_of_effects_gives_what_each_gpu_timing_its_own_gives(sram):
    """With expert SRAM too (issue 32): its devices' memory levels hold nothing of a device, so
    their effects stay shared, and each device's SRAM lane is its own."""
    cfg = _scenario("qwen3-235b-ep4", "parallel.micro_batches=2", *["moe.cache.policy=pinned-hot"] * sram)
    shared = system(cfg)
    separate = system(cfg)
    for stream in separate.gpus.streams:          # each GPU its own book, as before issue 33
        stream.replay.book = {}
    books = {id(s.replay.book) for s in shared.gpus.streams}
    assert len(books) == 1 and len(shared.gpus.streams) == 4

    a, b = run_config(cfg, shared), run_config(cfg, separate)

    assert _same(a.summary, b.summary)
    assert _lanes(a) == _lanes(b) and any(_lanes(a).values())
    assert any(spans for name, spans in a.lanes.items() if name.endswith("expert SRAM")) == sram
    timed_shared = sum(s.replay.misses for s in shared.gpus.streams)
    timed_separate = sum(s.replay.misses for s in separate.gpus.streams)
    assert timed_shared < timed_separate / 2          # each kernel timed once, not once a GPU
    # kernels ran beside the collectives: the per-device shares were asked for
    assert any(s.device._shares for s in shared.gpus.streams[1:])


def _one_loop_and_general_loop(monkeypatch, cfg):
    """(the run through the one loop of alone kernels, the run through the general loop, the
    kernels each call of the one loop took)."""
    taken = []
    fast = Stream._run_kernels_alone

    def counted(self, p, kernels, *args, **kwargs):
        taken.append(len(kernels))
        return fast(self, p, kernels, *args, **kwargs)

    monkeypatch.setattr(Stream, "_run_kernels_alone", counted)
    a = run_config(cfg, intervals=False)
    monkeypatch.setattr(Stream, "_alone_throughout", lambda self, p, items, owners=False: None)
    return a, run_config(cfg, intervals=False), taken


def test_the_one_loop_of_alone_kernels_gives_what_the_general_loop_gives(monkeypatch):
    a, b, taken = _one_loop_and_general_loop(monkeypatch, _scenario("deepseek-v3-ep8"))
    assert taken and sum(taken) > a.summary["sim"]["kernels"] / 2     # most kernels took it
    assert _same(a.summary, b.summary)
    assert [s.breakdown_s for s in a.steps] == [s.breakdown_s for s in b.steps]
    assert a.records.rows == b.records.rows and len(a.records) > 0     # GPU 0's records too


def test_one_gpus_pass_alone_gives_what_the_general_loop_gives_records_included(monkeypatch):
    """One GPU, nothing else scheduled (no copies): every kernel runs alone, and the one loop
    gives the general loop's steps, records (each kernel's clocks, parts and owner) and HBM
    channel totals, to the bit."""
    cfg = load_scenario(None, ["workload.batch_size=64", "workload.context_tokens=512", "workload.decode_steps=2"])
    a, b, taken = _one_loop_and_general_loop(monkeypatch, cfg)
    assert sum(taken) == a.summary["sim"]["kernels"] and len(a.records) == sum(taken)
    assert _same(a.summary, b.summary)
    assert [(s.t_start, s.t_end, s.breakdown_s, s.bytes, s.host) for s in a.steps] == \
           [(s.t_start, s.t_end, s.breakdown_s, s.bytes, s.host) for s in b.steps]
    assert a.records.rows == b.records.rows and a.channel_bytes == b.channel_bytes
    assert any(row[-1] is not None for row in a.records.rows)          # experts' kernels name their block
