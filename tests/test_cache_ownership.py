"""Caches belong to the objects whose life they share, are bounded, and none is keyed by id()
(issue 32): the only process-wide ones are the two kept by decision, and the Kernel's copier,
written out by hand, copies every field."""

import ast
import dataclasses
from pathlib import Path

from hwsim.config.load import load_model
from hwsim.metrics import Component
from hwsim.model import kernel as kernel_module
from hwsim.model.kernel import Kernel, Role, copy_kernel, relocated, timing_of
from hwsim.workload.kv_format import BF16_KV
from hwsim.model.l2_residency import L2Residency
from hwsim.model.schedule import Schedule

HWSIM = Path(__file__).resolve().parents[1] / "hwsim"
# pure functions of immutable values that no run, schedule or command owns (their comments say why)
PROCESS_WIDE = {"config/files.py:_LOADED", "model/kernel.py:_timing_keys"}
# the locks this process holds, and what the command leaves for the exit to free: its own state
NOT_CACHES = {"io/folder_lock.py:_held", "cli.py:_kept"}


def _module_caches() -> set[str]:
    """Module-level names bound to an empty dict, list or set (a cache, or a command's state such
    as a loaded scenario's line map, filled as the process runs)."""
    found = set()
    for path in HWSIM.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            empty = (isinstance(value, ast.Dict) and not value.keys) or (
                isinstance(value, (ast.List, ast.Set)) and not value.elts) or (
                isinstance(value, ast.Call) and getattr(value.func, "id", "") in ("dict", "OrderedDict", "list", "set")
                and not value.args)
            if empty:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                found |= {f"{path.relative_to(HWSIM)}:{t.id}" for t in targets if isinstance(t, ast.Name)}
    return found


def test_no_module_holds_a_cache_but_those_kept_process_wide_by_decision():
    assert _module_caches() == PROCESS_WIDE | NOT_CACHES


def test_the_copier_copies_every_field_and_none_of_what_is_kept_on_the_original():
    values = {"name": "L3.expert1.silu", "layer": 3, "tiles": 5, "dtype": "fp8", "mma_sync": True,
              "balanced": True, "reads": ("a",), "writes": ("b",), "partial": ("a",),
              "data": Component.EXPERT_READ, "compute": Component.GEMM_COMPUTE, "code": "mul",
              "role": Role.ROUTED, "item": None, "smem_bytes": 7, "block_threads": 9, "address": 11,
              "channel_group": 2}
    compared = [f for f in dataclasses.fields(Kernel) if f.compare]
    for i, f in enumerate(compared):          # every other field: a number of its own
        values.setdefault(f.name, 0.5 + i)
    k = Kernel(**values)
    timing_of(k)
    k.replay_key, k.l2_variants = 12, {}
    copy = copy_kernel(k)
    assert {f.name: getattr(copy, f.name) for f in compared} == values
    assert copy.replay_key is copy.timing is copy.l2_variants is None
    assert copy == k and copy is not k
    replaced = dataclasses.replace(k, tiles=6)          # a memo is never handed to another kernel
    assert replaced.replay_key is replaced.timing is replaced.l2_variants is None


def test_timing_keys_are_interned_by_value_and_bounded(monkeypatch):
    monkeypatch.setattr(kernel_module, "_timing_keys", {})
    monkeypatch.setattr(kernel_module, "TIMING_KEYS_LIMIT", 10)
    k = Kernel(name="a", layer=0, tiles=1)
    assert timing_of(k) is timing_of(relocated(Kernel(name="a", layer=0, tiles=1), "b", 2, 64))
    for tiles in range(1, 40):
        timing_of(Kernel(name="a", layer=0, tiles=tiles))
        assert len(kernel_module._timing_keys) <= 10


def test_an_l2_residency_keeps_its_rounded_shares_bounded_and_its_own(monkeypatch):
    from hwsim.model import l2_residency
    monkeypatch.setattr(l2_residency, "ROUNDED_LIMIT", 4)
    one, other = L2Residency(1e6, spill_address=1 << 30), L2Residency(1e6, spill_address=1 << 30)
    for i in range(1, 30):
        one._rounded(i / 7)
        assert len(one.rounded) <= 4
    assert one.rounded and other.rounded == {}


def test_a_schedule_lays_out_its_own_weights_and_hands_them_to_its_kv_copies(h200):
    model, chip = load_model("mixtral-8x7b"), h200
    first, second = Schedule(model, chip), Schedule(model, chip)
    assert first.layout is not second.layout
    assert first.layout.mem.regions == second.layout.mem.regions
    assert first.with_kv(BF16_KV).layout is first.layout
    assert first.weight_bytes_total() == second.weight_bytes_total()


def test_a_replay_cache_and_its_book_keep_at_most_their_limit(h200, monkeypatch):
    from hwsim.engine import replay
    from hwsim.engine.timer import KernelTimer
    monkeypatch.setattr(replay, "REPLAY_LIMIT", 3)
    cache = replay.ReplayCache(KernelTimer(h200, "kernel"))
    kernels = [Kernel(name="ew", layer=0, tiles=tiles, hbm_read=4096.0) for tiles in range(1, 11)]
    first = [cache.effect(k)[0].duration for k in kernels]
    assert len(cache.effects) <= 3 and len(cache.book) <= 3
    again = [cache.effect(copy_kernel(k))[0].duration for k in kernels]    # timed anew, alike
    assert again == first and cache.misses > len(kernels)


def test_a_layout_placed_a_layer_at_a_time_is_the_one_placed_region_by_region(h200):
    from hwsim.model.memory_map import MemoryMap
    schedule = Schedule(load_model("qwen3-30b-a3b"), h200)
    one_by_one = MemoryMap()
    for layer in range(schedule.model.layers):
        for name, nbytes in schedule._layer_weights(layer).items():
            one_by_one.place(f"L{layer}.{name}", nbytes)
    laid_out = schedule.layout.mem.regions
    assert list(laid_out.items())[:len(one_by_one.regions)] == list(one_by_one.regions.items())


def test_a_device_keeps_at_most_its_limit_of_shares_and_lanes_per_effect(h200, monkeypatch):
    from hwsim.engine.timer import KernelTimer
    from hwsim.hw import device as device_module
    from hwsim.hw.device import Device
    monkeypatch.setattr(device_module, "DERIVED_LIMIT", 3)
    d = Device(h200)
    d.record_intervals(True)
    timer = KernelTimer(h200, "kernel", device=d)
    effects = [timer.at_once(Kernel(name="ew", layer=0, tiles=tiles, hbm_read=4096.0)) for tiles in range(1, 11)]
    first = [d.shares(e) for e in effects]
    for e in effects:
        d.record(e, 0.0, e.duration, "ew")
    assert len(d._shares) <= 3 and len(d._lanes_of) <= 3
    assert [d.shares(e) for e in effects] == first          # derived again, alike
