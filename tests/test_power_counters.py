"""Board power reads the device's units' counters (issue 32, item 1): a pass's work is the
difference of the units' readings before and after it (hwsim/hw/device.py Device.work). Held
here to the work counted from the pass's kernels, the model power used before (kept in this
file as the reference), on one GPU and per GPU of a multi-GPU pass."""

import pytest

from hwsim.pipeline import system
from hwsim.config.load import load_scenario
from hwsim.hw.power import Activity
from hwsim.model.kernel import ExpertBlock, Kernel, PrefetchLoad
from hwsim.model.schedule import StepShape
from hwsim.step import plan_pass, simulate_pass


def counted_work(items) -> Activity:
    """The reference: a pass's work counted from its kernels' fields (tiles x per-tile flops and
    bytes; L2 hits are the kernels' L2 reads and writes; HBM bytes also the copies' reads)."""
    flops = l2 = hbm = 0.0
    for item in items:
        for k in (item.kernels if type(item) is ExpertBlock else (item,)):
            if isinstance(k, PrefetchLoad):
                hbm += sum(nbytes for _, _, nbytes, _ in k.loads)
            elif type(k) is Kernel:
                flops += k.tiles * k.tensor_flops
                l2 += k.tiles * (k.l2_read + k.l2_write)
                hbm += k.tiles * (k.hbm_read + k.hbm_write)
    return Activity(flops, l2, hbm)


def passes_and_plans(cfg):
    """A one-GPU run's passes (its prefill, if any, then its decode steps), each with its plan."""
    b = system(cfg)
    w = cfg.workload
    shapes = ([(StepShape("prefill", 1, w.prompt_tokens, 0), -1)] if w.prompt_tokens else [])
    shapes += [(StepShape("decode", w.batch_size, w.batch_size, w.context_tokens + i), i)
               for i in range(w.decode_steps)]
    out = []
    for shape, step in shapes:
        plan = plan_pass(b, shape, step)
        out.append((simulate_pass(b, shape, step, None, plan=plan), plan))
    return b, out


def assert_same_work(got: Activity, expected: Activity) -> None:
    for kind in ("tensor_flops", "l2_bytes", "hbm_bytes"):
        assert getattr(got, kind) == pytest.approx(getattr(expected, kind), rel=1e-12, abs=0), kind


@pytest.mark.parametrize("scenario, sets", [
    (None, ["workload.prompt_tokens=256", "workload.decode_steps=2"]),
    ("scenarios/weights-fp8.yaml", ["workload.decode_steps=1"]),
    ("scenarios/moe-prefetch.yaml", ["workload.batch_size=64", "workload.context_tokens=1024",
                                     "workload.decode_steps=2"]),
])
def test_a_pass_power_reads_is_the_work_of_its_kernels(scenario, sets):
    """Each pass's work, read off the units, is its kernels' counted work (to summation order):
    a prefill, decode steps, fp8 weights, an expert-prefetching run (copies' HBM reads)."""
    _, passes = passes_and_plans(load_scenario(scenario, sets))
    for result, plan in passes:
        assert result.activity.hbm_bytes > 0
        assert_same_work(result.activity, counted_work(plan.items))


def test_copies_landing_in_the_l2_are_not_hits_power_counts():
    """An expert-prefetching run's copies land in the L2's lines set aside as SRAM: the L2
    serves their bytes, but power's L2 bytes are its hits alone (the copies are HBM energy)."""
    sets = ["workload.batch_size=64", "workload.context_tokens=1024", "workload.decode_steps=2"]
    b, passes = passes_and_plans(load_scenario("scenarios/moe-prefetch.yaml", sets))
    l2 = b.device.l2
    copied = sum(r.bytes["expert_prefetch"] for r, _ in passes)
    assert copied > 0
    assert l2.served - l2.hit_bytes == pytest.approx(copied, rel=1e-12)
    assert sum(r.activity.l2_bytes for r, _ in passes) == pytest.approx(l2.hit_bytes, rel=1e-12)


def test_a_multi_gpu_pass_reads_each_gpus_units_and_keeps_each_kinds_busiest(monkeypatch):
    """Expert parallelism over 4 GPUs: each GPU's work read off its own units is its own
    segments' counted work, and the pass's power work is each kind's maximum over the GPUs."""
    from hwsim.parallel import multi

    micro, per_gpu = [], []
    make_micro, busiest = multi._micro_batch, multi._busiest_work
    monkeypatch.setattr(multi, "_micro_batch", lambda *a: micro.append(make_micro(*a)) or micro[-1])
    monkeypatch.setattr(multi, "_busiest_work", lambda work: per_gpu.append(work) or busiest(work))
    cfg = load_scenario("scenarios/qwen3-235b-ep4.yaml", ["workload.batch_size=32", "workload.context_tokens=512",
                                                          "workload.decode_steps=1", "workload.prompt_tokens=0"])
    b = system(cfg)
    shape = StepShape("decode", 32, 32, 512)
    result = simulate_pass(b, shape, 0, None)
    (work,) = per_gpu
    gpus = len(micro[0].segments)
    assert gpus == 4 == len(work)
    for g in range(gpus):
        items = [k for mb in micro for segment, _ in mb.segments[g] for k in segment]
        assert_same_work(work[g], counted_work(items))
    assert len({w.tensor_flops for w in work}) > 1            # expert parallelism: the GPUs differ
    assert result.activity == Activity(max(w.tensor_flops for w in work), max(w.l2_bytes for w in work),
                                       max(w.hbm_bytes for w in work))


def test_a_probe_that_keeps_the_memory_totals_draws_the_watts_of_a_run_locked_at_its_clock(monkeypatch):
    """A throttled run's probe at a lower clock takes the maximum clock's HBM and L2 totals
    and charges those units no more (Device.keep_memory_totals_of): its passes' work is the
    maximum clock's run's, and its watts those of a run locked at its clock, which counts its
    own (were the probe's work read off its own units, its HBM and L2 bytes would be 0)."""
    import hwsim.run as run
    from hwsim.pipeline import run_config

    kept = []
    keep = run._memory_totals_kept
    monkeypatch.setattr(run, "_memory_totals_kept", lambda *a: kept.append(keep(*a)) or kept[-1])
    sets = ["workload.batch_size=256", "workload.context_tokens=1024", "workload.decode_steps=2"]
    settled = run_config(load_scenario(None, sets), intervals=False).summary["power"]
    assert settled["throttled"] and kept == [True]
    locked = run_config(load_scenario(None, sets + [f"runtime.sm_clock={settled['sm_clock_mhz']}"]),
                        intervals=False).summary["power"]
    assert settled["watts"] == pytest.approx(locked["watts"], rel=1e-9)
    assert settled["joules_per_token"] == pytest.approx(locked["joules_per_token"], rel=1e-9)
