"""Issue 33, item 4: a power governor's probe re-times each kernel from its walk at
the maximum clock (KernelTimer.retimed: its memory time kept, its fixed cost and compute at the
probe's clock) instead of walking the memory path again. Re-timed must equal walked: the same
time and parts (to a rounding), the same demand of every unit."""

import pytest

from hwsim.pipeline import run_config, system
from hwsim.config.load import load_scenario
from hwsim.engine.timer import KernelTimer
from hwsim.hw.device import Device

SETS = ["workload.batch_size=256", "workload.context_tokens=1024", "workload.decode_steps=1"]


def _timed_kernels(cfg):
    """The system at the maximum clock after one run, and each distinct kernel it timed."""
    b = system(cfg)
    result = run_config(cfg, b, intervals=False)
    kernels = {}
    for row in result.records.rows:
        kernels.setdefault(row[2].replay_key, row[2])
    return b, kernels


def _close(a: float, b: float) -> bool:
    return a == pytest.approx(b, rel=1e-12, abs=1e-24)


@pytest.mark.parametrize("scenario, mhz, sets", [
    (None, 1500.0, []), (None, 1800.0, []), ("scenarios/weights-fp8.yaml", 1200.0, []),
    (None, 1500.0, ["workload.batch_size=8", "workload.prompt_tokens=2048"]),    # a prefill: many waves
    ("scenarios/moe-prefetch.yaml", 1500.0, [])])      # expert SRAM: a level of the memory path
def test_a_kernel_retimed_at_a_lower_clock_equals_it_walked_there(scenario, mhz, sets):
    """Below and above the tensor clock (1755 MHz: tensor work slows only below it): every
    kernel, memory- or compute-bound, in one wave or many, re-timed from its walk at the
    maximum clock equals the same kernel walked through the memory path at the lower clock,
    with its demand of each unit (what each level served, and when it was done)."""
    cfg = load_scenario(scenario, SETS + sets + ["runtime.sm_clock=max"])
    b, kernels = _timed_kernels(cfg)
    book = b.stream.replay.book
    chip = b.chip.at_sm_clock(mhz * 1e6)
    sram = b.device.sram.capacity if b.device.sram else 0.0
    walked, retimer = (KernelTimer(chip, "kernel", device=Device(chip, sram_bytes=sram)) for _ in range(2))
    retimed = charged = waves = 0
    for key, k in kernels.items():
        faster = book[key]
        got = retimer.retimed(k, faster) if faster.walk is not None else None
        if got is None:
            continue
        want = walked.at_once(k)
        retimed += 1
        assert _close(got.duration, want.duration), k.name
        assert list(got.parts) == list(want.parts), k.name          # the same components, in order
        assert all(_close(got.parts[c], want.parts[c]) for c in want.parts), k.name
        assert got.demand.keys() == want.demand.keys() and got.waves == want.waves
        for kind, d in want.demand.items():
            if kind == "hbm":
                assert (got.demand[kind][0] == d[0]).all() and (got.demand[kind][1] == d[1]).all()
                assert (got.demand[kind][2] == d[2]).all()
                assert got.demand[kind][3] == pytest.approx(d[3], rel=1e-12)
            elif kind in ("bus", "l2", "sram"):
                assert got.demand[kind][:2] == d[:2] and _close(got.demand[kind][2], d[2])
            else:
                assert got.demand[kind] == pytest.approx(d, rel=1e-12)
        charged += got.duration > faster.duration
        waves = max(waves, len(faster.walk))
    assert retimed == len(kernels) and charged > 0           # every kernel, some of them slower
    assert waves > 1


def test_a_kernel_timed_at_a_lower_clock_is_not_retimed_at_a_higher_one():
    cfg = load_scenario(None, SETS + ["runtime.sm_clock=1200"])
    b, kernels = _timed_kernels(cfg)
    timer = KernelTimer(b.chip.at_sm_clock(1500e6), "kernel")
    key, k = next((key, k) for key, k in kernels.items() if b.stream.replay.book[key].walk is not None)
    assert timer.retimed(k, b.stream.replay.book[key]) is None


def test_a_governors_probe_retimes_its_kernels_and_equals_a_run_locked_at_its_clock(monkeypatch):
    """The default scenario at batch 256 throttles: its confirming simulation re-times most of
    its kernels, and its result is a run locked at the clock it settled at, to the bit here
    (the re-timed memory time is the walked one up to one rounding)."""
    calls = []
    retimed = KernelTimer.retimed

    def counted(self, k, faster):
        out = retimed(self, k, faster)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(KernelTimer, "retimed", counted)
    settled = run_config(load_scenario(None, SETS), intervals=False)
    power = settled.summary["power"]
    assert power["throttled"] and sum(calls) > 100
    monkeypatch.setattr(KernelTimer, "retimed", retimed)
    locked = run_config(load_scenario(None, SETS + [f"runtime.sm_clock={power['sm_clock_mhz']}"]),
                          intervals=False)
    for got, want in zip(settled.steps, locked.steps, strict=True):
        assert got.breakdown_s == pytest.approx(want.breakdown_s, rel=1e-12)
    assert [r[5] for r in settled.records.rows] == pytest.approx([r[5] for r in locked.records.rows], rel=1e-12)
    assert power["watts"] == pytest.approx(locked.summary["power"]["watts"], rel=1e-12)


def test_a_probe_keeps_the_memory_totals_a_run_locked_at_its_clock_charges(monkeypatch):
    """One GPU, every kernel alone at both clocks: the confirming probe takes the HBM, bus and
    L2 totals of the maximum-clock run instead of charging them again, and they are, to the
    bit, what a run locked at the settled clock charges; the SM pool's (duration-weighted) are
    charged at the probe's clock."""
    import hwsim.run as run

    kept = []
    keep = run._memory_totals_kept

    def seen(top, probe, planned):
        out = keep(top, probe, planned)
        kept.append((out, probe))
        return out

    monkeypatch.setattr(run, "_memory_totals_kept", seen)
    settled = run_config(load_scenario(None, SETS), intervals=False)
    assert [k for k, _ in kept] == [True]
    probe = kept[0][1].device
    mhz = settled.summary["power"]["sm_clock_mhz"]
    cfg = load_scenario(None, SETS + [f"runtime.sm_clock={mhz}"])
    locked = system(cfg)
    run_config(cfg, locked, intervals=False)
    d = locked.device
    assert (probe.hbm_all.channel_bytes == d.hbm_all.channel_bytes).all()
    assert (probe.hbm_all.channel_busy == d.hbm_all.channel_busy).all()
    assert settled.channel_bytes == d.channel_bytes.tolist()
    assert (probe.hbm_read_bytes, probe.hbm_write_bytes) == (d.hbm_read_bytes, d.hbm_write_bytes)
    for name in ("bus", "l2"):
        assert (getattr(probe, name).busy_s, getattr(probe, name).served) == \
               (getattr(d, name).busy_s, getattr(d, name).served), name
    assert probe.sm.busy_s == pytest.approx(d.sm.busy_s, rel=1e-12) and probe.sm.busy_s > 0
    assert [u.served for u in probe.hbm_stacks] == [u.served for u in d.hbm_stacks]


def test_a_probe_whose_passes_do_not_all_run_alone_is_run_again_charging_every_unit(monkeypatch):
    """Should a probe's pass not run alone after all (here forced: the general loop at any
    clock but the maximum), the totals it took are not its own: it is run again, charged in
    full, and still equals a run locked at its clock."""
    import hwsim.run as run
    from hwsim.engine.stream import Stream

    alone, simulate, clocks = Stream._alone_throughout, run._simulate, []
    monkeypatch.setattr(Stream, "_alone_throughout", lambda self, p, items, owners=False:
                        alone(self, p, items, owners) if self.device.chip.clock_hz == 1980e6 else None)

    def counted(cfg, b, *args, **kwargs):
        clocks.append(b.chip.clock_hz)
        return simulate(cfg, b, *args, **kwargs)

    monkeypatch.setattr(run, "_simulate", counted)
    settled = run_config(load_scenario(None, SETS), intervals=False)
    mhz = settled.summary["power"]["sm_clock_mhz"]
    assert clocks == [1980e6, mhz * 1e6, mhz * 1e6]               # the probe, run again
    cfg = load_scenario(None, SETS + [f"runtime.sm_clock={mhz}"])
    locked = system(cfg)
    locked_run = run_config(cfg, locked, intervals=False)
    assert settled.channel_bytes == locked.device.channel_bytes.tolist()
    assert settled.summary["itl_ms"] == pytest.approx(locked_run.summary["itl_ms"], rel=1e-12)


def test_a_speculative_runs_probes_are_charged_in_full_as_they_plan_afresh(monkeypatch):
    """Speculative decoding plans its verification passes again at every probe, on what the
    last left on chip (an LRU expert cache here), so a probe may run other kernels than the
    maximum clock's run: it keeps none of that run's memory totals, and settles where a run
    charging every unit settles."""
    from hwsim import run as run_module
    sets = ["workload.batch_size=64", "workload.context_tokens=512", "workload.decode_steps=3",
            "workload.prompt_tokens=128", "moe.cache.policy=lru", "moe.cache.capacity_mib=200",
            "workload.speculative={method: mtp, tokens: 1}", "hardware_overrides={power: {limit_w: 200}}"]
    cfg = load_scenario("scenarios/moe-hotspots.yaml", sets)
    kept = run_config(cfg, intervals=False).summary["power"]
    monkeypatch.setattr(run_module, "_memory_totals_kept", lambda *a: False)
    full = run_config(cfg, intervals=False).summary["power"]
    assert kept["throttled"]
    assert (kept["sm_clock_mhz"], kept["watts"]) == (full["sm_clock_mhz"], full["watts"])
