"""run_scenario(cfg) -> RunResult: the simulation, as pure data. Never touches the disk."""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from hwsim import __version__
from hwsim.build import Built
from hwsim.config.scenario import Scenario
from hwsim.errors import ConfigError
from hwsim.hw.power import Activity, PowerModel, Settled, clock_choice, settle
from hwsim.engine.records import RecordLog
from hwsim.metrics import percentiles
from hwsim.model import dequant_kernels
from hwsim.model.expert_sram import pooled_hit_rates
from hwsim.model.schedule import StepShape
from hwsim.results import RunResult, cyclic_gc_paused
from hwsim.speedups.kv import attention_speedups
from hwsim.speedups.gemlite_choice import GEMLITE_FITTED_ON
from hwsim.speedups.weights import expert_gemm_speedup_by_kernel
from hwsim.step import PassPlan, StepResult, simulate_pass
from hwsim.summary import (HostSummary, KVSummary, MemorySummary, MoECache, MoEPrefetch, MoESummary,
                           ParallelSummary, PowerSummary, RunSummary, SimSummary, TensorFormat,
                           TraceSummary, WeightsSummary)
from hwsim.workload.kv_fidelity import attention_rel_error
from hwsim.workload.kv_format import BF16_KV, max_context_fitting
from hwsim.workload.router import expected_distinct


def lanes_of(b: Built) -> dict[str, list]:
    """Every unit's recorded busy intervals, in lane order (units the chip lacks have none);
    on several GPUs, a lane group per GPU (hwsim/parallel/multi.py)."""
    return b.gpus.lanes()


def run_scenario(cfg: Scenario, built: Built, progress=None,
                 every_interval: bool = True, intervals: bool = True,
                 plans: dict | None = None) -> RunResult:
    """Simulate the scenario on its system `built` (hwsim/pipeline.py builds it: run, run_config):
    fixed-batch decode steps, or (workload.arrivals) a serving run.
    `progress(done, total)` is called as work completes (requests or steps).
    `every_interval=False`: the units' busy intervals (RunResult.lanes) in full for the step
    the Gantt chart draws only (drawn_step); of the other steps, each item's first run, which
    keeps every lane that was ever busy (the chart's rows). The same chart, at a fraction of
    the cost: a DeepSeek-V3 batch-64 run recorded 4.6 million intervals over 8 steps.
    `intervals=False`: none at all (RunResult.lanes empty), for a run that draws no chart and
    writes no trace; every other result is the same.
    `plans`: the passes' plans (routing and kernels) by (shape, step), replayed where present and
    kept there where made: runs that differ only in numbers no plan is made from share them
    (hwsim/whatif/reuse.py); one GPU, fixed batch only."""
    with cyclic_gc_paused():
        return _run_scenario(cfg, built, progress, every_interval, intervals, plans)


def drawn_step(cfg: Scenario) -> int:
    """The step the Gantt chart draws (hwsim/io/bundle.py): the last whose kernel records are
    kept (runtime.kernel_records), or the prefill (-1) when no decode step's are."""
    keep, steps = cfg.runtime.kernel_records, cfg.workload.decode_steps
    return steps - 1 if keep < 0 else min(steps, keep) - 1


def _run_scenario(cfg: Scenario, built: Built, progress, every_interval: bool,
                  intervals: bool, plans: dict | None = None) -> RunResult:
    """The run at the SM clock `runtime.sm_clock` asks for: under `settled`, first at the
    maximum clock, then, if its repeated passes draw more than the power limit, again at the
    clock the limit settles at (hwsim/hw/power.py)."""
    wall0 = time.perf_counter()
    b = built                          # at a locked runtime.sm_clock, if one is set (build)
    power = power_model(b)
    latest: list[RunResult] = []       # only the last probe's run is kept (a serving run is large):
                                       # settle() always ends on its last probe
    # each pass's plan, built at the first probe's clock and replayed at the others' (issue 33:
    # the schedule never reads the clock, plan_pass; building them was half of every probe)
    probe_plans = {} if plans is None else plans
    top_steps: list[StepResult] = []   # the first probe's (maximum clock's) passes

    def simulate(clock_hz: float) -> tuple[float, Activity]:
        probe = b.at_sm_clock(clock_hz)
        kept = False
        if probe_plans and probe is not b:
            # what is on chip is the planning's (b's) state: routing statistics, expert SRAM
            # contents, all made by plan_pass, which this probe replays
            probe = dataclasses.replace(probe, onchip=b.onchip)
            kept = _memory_totals_kept(b, probe, latest[0])
        # summarized once settled: the probes before the last are not the run's
        latest[:] = [_simulate(cfg, probe, wall0, progress, every_interval, intervals, probe_plans,
                               summarized=False), probe]
        if kept and not probe.stream.all_alone:      # never met: the same plans run alone at any clock
            probe = dataclasses.replace(b.at_sm_clock(clock_hz), onchip=b.onchip)
            latest[:] = [_simulate(cfg, probe, wall0, progress, every_interval, intervals, probe_plans,
                                   summarized=False), probe]
        elif kept:
            # its HBM and L2 charged no more, its passes' work is the planning run's (the same
            # kernels: work does not depend on the clock)
            for mine, planned in zip(latest[0].steps, top_steps):
                mine.activity = planned.activity
        if not top_steps:
            top_steps[:] = latest[0].steps
        return steady_work(latest[0])

    def breakdown_at_max() -> dict[str, float]:
        # called right after the first probe (the maximum clock): its time by component, which
        # settle() re-scales to guess the settled clock (issue 33)
        return steady_breakdown(latest[0])

    settled = None
    if power is None or not clock_choice(cfg.runtime.sm_clock).settles:
        result = _simulate(cfg, b, wall0, progress, every_interval, intervals, plans)
    else:
        settled = settle(power, simulate, breakdown_at_max)
        result, probe = latest
        if result.run_summary is None:
            result.run_summary = _summary(cfg, probe, result, wall0)
    result.run_summary = result.run_summary.replace(power=power_summary(power, result, settled, b.chip.clock_hz),
                                                    wall_s=time.perf_counter() - wall0)
    return result


def _memory_totals_kept(top: Built, probe: Built, planned: RunResult) -> bool:
    """Whether the probe's device takes the HBM, bus and L2 totals of `top`'s run (the
    maximum clock's) instead of charging them again (Device.keep_memory_totals_of): one GPU
    whose stream ran every kernel of that run alone, and nothing before it (as many kernels as
    `planned`, a run of the same plans), as the probe will run the same plans (nothing else in
    flight, at any clock). Not under speculative decoding: its verification passes are planned
    afresh by every probe (hwsim/speculative.py), on what the last left on chip, so a probe's
    kernels may differ from the maximum clock's."""
    stream = top.stream
    ran_alone = stream.all_alone and stream.kernels == sum(s.kernels for s in planned.steps)
    if len(top.gpus.streams) > 1 or not ran_alone or top.scenario.workload.speculative is not None:
        return False
    probe.device.keep_memory_totals_of(top.device)
    return True


def steady_work(result: RunResult) -> tuple[float, Activity]:
    """Time and work of the passes a run repeats: its decode steps, or its serving iterations,
    or (a prefill alone) its prefill; the power limit settles the clock on these."""
    passes = _steady_passes(result)
    # a serving run's time is its iterations' (an engine's step also holds its host's time, the
    # device idle: hwsim/serving/engines/results.py); the built-in loop's iteration is its pass
    timed = result.iterations or passes
    return (sum(s.duration_s for s in timed),
            sum((s.activity for s in passes), Activity()))


def _steady_passes(result: RunResult) -> list[StepResult]:
    passes = [s for s in result.steps if s.phase != "prefill"] or result.steps
    return [it.step for it in result.iterations] or passes


def steady_breakdown(result: RunResult) -> dict[str, float]:
    """Where the time of the passes steady_work counts went, summed by component."""
    out: dict[str, float] = {}
    for p in _steady_passes(result):
        for comp, secs in p.breakdown_s.items():
            out[comp] = out.get(comp, 0.0) + secs
    return out


def power_model(b: Built) -> PowerModel | None:
    if b.profile.power is None:
        return None
    return PowerModel.from_profile(b.profile.power, b.profile.sm.clock_mhz.value)


def power_summary(power: PowerModel | None, result: RunResult, settled: Settled | None,
                  clock_hz: float) -> PowerSummary | None:
    """The summary's `power` (docs/metrics.md): None where the profile has no power block."""
    if power is None:
        return None
    seconds, work = steady_work(result)
    clock_hz = settled.clock_hz if settled else clock_hz
    watts = power.watts(work, seconds, clock_hz)
    tokens = result.run_summary.sim.simulated_tokens
    sp = result.run_summary.speculative
    if sp and result.run_summary.serving is None:   # a fixed batch's step yields E accepted tokens a sequence
        tokens *= sp.expected_tokens_per_step       # (a serving run counts the tokens it gave out)
    return PowerSummary(watts=watts, limit_w=power.limit_w, sm_clock_mhz=clock_hz / 1e6,
                        max_clock_mhz=power.max_clock_hz / 1e6,
                        watts_at_max_clock=settled.watts_at_max if settled else None,
                        throttled=bool(settled and settled.clock_hz < power.max_clock_hz),
                        joules_per_token=watts * seconds / tokens if tokens else None)


def _simulate(cfg: Scenario, b: Built, wall0: float, progress, every_interval: bool = True,
              intervals: bool = True, plans: dict | None = None, summarized: bool = True) -> RunResult:
    """One run at b's clock. `plans`: the passes' plans by (shape, step) (_kept_plan), filled on
    the first call and replayed by later ones, at other clocks or in what-ifs (one GPU; several
    GPUs plan inside their pass, b.gpus.plans_ahead). `summarized=False`: a fixed-batch run
    without speculation leaves its run_summary None, for _summary to make later (a power
    governor's probe: only the last is the run)."""
    if cfg.workload.serving:
        return _run_serving(cfg, b, wall0, progress)
    w = cfg.workload
    records = RecordLog()
    steps: list[StepResult] = []
    prefill = None
    drawn = drawn_step(cfg)
    if w.prompt_tokens:
        shape = StepShape("prefill", 1, w.prompt_tokens, 0)
        prefill = simulate_pass(b, shape, -1, records, every_interval or drawn == -1, intervals=intervals,
                                plan=_kept_plan(plans, b, shape, -1))
    spec = _speculation(cfg, b)
    for i in range(w.decode_steps):
        if spec:
            steps.append(spec.simulate_step(b, i, records, every_interval or i == drawn, intervals))
        else:
            shape = StepShape("decode", w.batch_size, w.batch_size, w.context_tokens + i)
            steps.append(simulate_pass(b, shape, i, records, every_interval or i == drawn, intervals=intervals,
                                       plan=_kept_plan(plans, b, shape, i)))
        if progress:
            progress(i + 1, w.decode_steps)
    summary = None
    if spec:
        summary = summarize(cfg, b, steps, prefill, time.perf_counter() - wall0)
        summary = summary.replace(speculative=spec.summary(steps))
    all_steps = ([prefill] if prefill else []) + steps
    result = RunResult(scenario=cfg, steps=all_steps, records=records, run_summary=summary,
                       channel_bytes=b.device.channel_bytes.tolist(),
                       channels_per_stack=b.chip.hbm_channels_per_stack,
                       sms=b.chip.sms, stacks=b.chip.hbm_stacks, lanes=lanes_of(b))
    if summarized and summary is None:
        result.run_summary = _summary(cfg, b, result, wall0)
    return result


def _summary(cfg: Scenario, b: Built, result: RunResult, wall0: float) -> RunSummary:
    """The summary of a fixed-batch run on b (not speculative: its summary is made with it)."""
    prefill = result.steps[0] if cfg.workload.prompt_tokens else None
    steps = result.steps[1:] if prefill else result.steps
    return summarize(cfg, b, steps, prefill, time.perf_counter() - wall0)


def _speculation(cfg: Scenario, b: Built):
    """workload.speculative's drafts and verification steps (hwsim/speculative.py), or None."""
    if cfg.workload.speculative is None:
        return None
    from hwsim.speculative import Speculation
    return Speculation(cfg, b)


def _kept_plan(plans: dict | None, b: Built, shape: StepShape, step: int) -> PassPlan | None:
    """The pass's plan from `plans` (made and kept there when new); None without `plans` (or on
    several GPUs, whose passes plan themselves: b.gpus.plans_ahead): simulate_pass makes its own."""
    if plans is None or not b.gpus.plans_ahead:
        return None
    dispatch = b.onchip.dispatch
    kept = plans.get((shape, step))
    if kept is None:               # the plan, and what its making left in the expert dispatch
        plan = b.gpus.plan(b, shape, step)
        plans[shape, step] = kept = (plan, dispatch.planned() if dispatch else None)
    elif dispatch:
        dispatch.restore(kept[1])
    return kept[0]


def _run_serving(cfg: Scenario, b: Built, wall0: float, progress) -> RunResult:
    if not cfg.workload.engine.builtin:       # a real engine's scheduler (hwsim/serving/engines/)
        from hwsim.serving.engines.run import serve_with_engine
        return _served_result(cfg, b, wall0, *serve_with_engine(cfg, b))
    from hwsim.serving.disaggregation import serving_loop
    from hwsim.serving.metrics import request_rows, serving_summary

    loop = serving_loop(b, progress)
    loop.run()
    served = serving_summary(loop, cfg.budget_ms)
    if not loop.iterations:
        raise ConfigError(f"none of the {len(loop.rejected)} requests can run: each one's KV cache "
                          f"(prompt + output) is larger than the HBM the weights leave free",
                          key="workload.prompt")
    # the gaps are the summary's: left in place in ms, 8 bytes a gap, in no order
    result = _served_result(cfg, b, wall0, served, request_rows(loop), loop.iterations, loop.gaps.ms(),
                            sum(r.tokens for r in loop.finished))
    if spec := getattr(loop, "spec", None):        # measured acceptance, the drafts' share
        result.run_summary = result.run_summary.replace(speculative=spec.summary(loop.iterations))
    return result


def _served_result(cfg: Scenario, b: Built, wall0: float, served, rows: list[dict], iters: list,
                   gaps_ms, tokens: int) -> RunResult:
    """A serving run's result: its iterations' passes summarized, the serving figures in place of
    a fixed batch's."""
    # every per-step figure (breakdown, bytes, kernels, experts) weighted by the iterations run
    steps = [it.step for it in iters]
    summary = summarize(cfg, b, steps, None, time.perf_counter() - wall0)
    # a serving run has no one batch or context: iterations batch what is running
    summary = summary.replace(batch_size=None, context_tokens=None, itl_ms=served.itl_ms, ttft_ms=served.ttft_ms,
                              within_budget=served.serving.slo_attainment, serving=served.serving,
                              simulated_tokens=tokens, wall_s=time.perf_counter() - wall0)
    result = RunResult(scenario=cfg, steps=[], records=RecordLog(), run_summary=summary,
                       channel_bytes=b.device.channel_bytes.tolist(),
                       channels_per_stack=b.chip.hbm_channels_per_stack,
                       requests=rows, iterations=iters)
    result.gaps_ms = gaps_ms
    return result


def weights_summary(b: Built) -> WeightsSummary:
    """Stored format of each tensor class and the bytes of all weights (docs/weights.md)."""
    from hwsim.model.weight_format import TENSOR_CLASSES
    sched = b.schedule
    classes = {c: TensorFormat(**sched.wplan.of(c).summary()) for c in TENSOR_CLASSES}
    stored = sched.stored_weight_bytes()
    return WeightsSummary(**classes, moe_schedule=sched.moe_schedule, bytes=stored,
                          bits_per_weight=8 * stored / max(sched.weight_elements_total(), 1),
                          dequant={c: classes[c].dequant for c in TENSOR_CLASSES},
                          kernel={c: sched.wplan.of(c).kernel_family for c in TENSOR_CLASSES},   # issue 31
                          **expert_kernel_summary(b))


def expert_kernel_summary(b: Built) -> dict:
    """The spread of the experts' GEMM speed over dequant kernel families (issue 31)."""
    families = b.families
    by, kernels = expert_gemm_speedup_by_kernel(b.schedule, b.chip, b.scenario.workload.batch_size, families)
    basis = {f: dequant_kernels.basis(families, f) for f, v in (by or {}).items()
             if f in dequant_kernels.FAMILIES and v is not None}
    if kernels.get("fast") == "gemlite":        # its costs were fitted on the H100 alone
        basis["fast"] = "measured" if b.chip.name == GEMLITE_FITTED_ON else "h100-fitted"
    family = b.schedule.wplan.experts.kernel_family if by else None        # issue 44: the verdicts
    return {"expert_gemm_speedup_by_kernel": by, "kernel_basis": basis, "kernel_family": family,
            "expert_gemm_speedup": by.get(family) if by else None, "expert_gemm_kernel": kernels or None,
            "verdicts": dequant_kernels.verdicts(by, basis, kernels or None)}


def moe_summary(cfg: Scenario, b: Built, steps: list[StepResult]) -> MoESummary | None:
    """Routing, dispatch, SRAM residency, prefetch and channel balance of the run."""
    m = b.model
    if not m.moe:
        return None
    d = b.onchip.dispatch
    st = d.stats
    # every GPU's SRAM (b.onchip: the first's, or a power governor's probe's state for one GPU)
    caches = [o.dispatch.cache for o in b.gpus.onchips[1:]] + [d.cache]
    hit_rate, hit_rate_by_layer = pooled_hit_rates(caches)
    n = len(steps)
    tokens = round(float(np.mean([s.tokens for s in steps])))
    return MoESummary(
        routing=cfg.moe.routing.kind,
        distinct_experts_per_layer=float(np.mean([s.active_experts_per_layer for s in steps])),
        expected_distinct_uniform=expected_distinct(m.moe.experts, m.moe.top_k, tokens),
        active_param_fraction=float(np.mean([s.active_weight_fraction for s in steps])),
        placement=cfg.moe.placement,
        channel_imbalance=b.device.imbalance(),
        expert_stack_imbalance=d.expert_stack_imbalance(),
        router_in_sram=b.onchip.router_on_chip,
        cache=MoECache(policy=cfg.moe.cache.policy, capacity_mb=d.cache.capacity / 1e6,
                       expert_mb=b.schedule.expert_bytes() / 1e6, hit_rate=hit_rate,
                       hit_rate_by_layer=hit_rate_by_layer),
        prefetch=MoEPrefetch(
            enabled=cfg.moe.prefetch.enabled,
            predictor=cfg.moe.prefetch.predictor,
            precision=st.predicted_needed / st.predicted if st.predicted else None,
            recall=st.predicted_needed / st.needed if st.needed else None,
            bytes_per_step=st.prefetched_bytes / n,
            wasted_bytes_per_step=st.wasted_bytes / n,
            expert_load_wait_ms=float(np.mean([s.breakdown_s["expert_load_wait"] for s in steps])) * 1e3,
        ),
    )


def parallel_summary(cfg: Scenario, b: Built, steps: list[StepResult]) -> ParallelSummary:
    """The layout, one GPU's memory, and where the decode steps' time went between GPUs
    (docs/metrics.md, docs/multi_gpu.md); one GPU reports no communication."""
    p, mem = cfg.parallel, b.memory
    stats = [s.parallel for s in steps if s.parallel is not None]
    mean_ms = lambda f: float(np.mean([f(x) for x in stats])) * 1e3 if stats else 0.0      # noqa: E731
    imbalance = [x for st in stats for x in st.imbalance]
    return ParallelSummary(
        gpus=p.gpus, tp=b.gpus.layout.tp, ep=p.ep,
        dp_attention=p.dp_attention, per_gpu_memory_gb=mem.total / 1e9, fits=mem.fits,
        comm_ms_per_step=mean_ms(lambda st: st.comm_wall_s),
        all_to_all_ms=mean_ms(lambda st: st.comm_s["dispatch"] + st.comm_s["combine"]),
        all_reduce_ms=mean_ms(lambda st: st.comm_s["all_reduce"]),
        gpu_load_imbalance=float(np.mean(imbalance)) if imbalance else 1.0,
        wait_for_slowest_ms=mean_ms(lambda st: st.wait_s),
        overlap_fraction=float(np.mean([st.overlap_fraction for st in stats])) if stats else 0.0,
    )


def memory_summary(b: Built) -> MemorySummary:
    m = b.memory
    return MemorySummary(weights=m.weights / 1e9, kv_cache=m.kv_cache / 1e9, activations=m.activations / 1e9,
                         total=m.total / 1e9, capacity=m.capacity / 1e9)


def kv_summary(cfg: Scenario, b: Built) -> KVSummary:
    """What the KV format stores, saves, and costs in accuracy, at the scenario's context, per
    GPU: its shard of the heads, its sequences, what its weights leave (one GPU: all of them)."""
    fmt, m = b.schedule.kv, b.model
    context = cfg.workload.context_tokens
    bits = fmt.bits_per_element(context)
    a = b.schedule.model.attention
    batch = max(b.gpus.layout.tokens_per_group(cfg.workload.batch_size))
    free = b.memory.kv_room
    heads = a.cached_heads
    stored = b.schedule.kv_token_bytes(context)
    bf16 = BF16_KV.bytes_per_token(a.kv_elements_per_token(), heads, context)
    families = b.families
    variants = dequant_kernels.kv_variants(cfg.kv_cache, families, b.chip.decoder_formats)
    speedup, by_kernel = attention_speedups(b.schedule, b.chip, batch, context, variants)
    return KVSummary(
        effective_bits_per_element=bits,
        bytes_per_token=m.layers * stored,
        effective_bandwidth_multiplier=16.0 / bits,    # kept for scripts; byte_ratio says what it is
        byte_ratio=bf16 / stored,
        attention_speedup=speedup,
        attention_rel_error=attention_rel_error(fmt, cfg.seed),
        max_context_tokens_fitting=max_context_fitting(
            free, batch, m.layers, a.kv_elements_per_token(), heads, fmt),
        dequant=b.schedule.dequant,
        # the dequant kernel family this cache is read by, the spread over families (issue 31),
        # and whether each family's cost is measured, predicted or a what-if
        kernel=dequant_kernels.kv_family(cfg.kv_cache, families),
        attention_speedup_by_kernel=by_kernel,
        kernel_basis=(basis := {f: dequant_kernels.basis(families, f) for f, v in variants.items() if v}),
        # issue 44: the family attention_speedup came from (None where no family reads codes,
        # as by_kernel says: a bf16 cache, or widths set on classes that hold no token)
        kernel_family=dequant_kernels.kv_family(cfg.kv_cache, families) if by_kernel else None,
        verdicts=dequant_kernels.verdicts(by_kernel, basis),
    )


def device_busy_ms(steps: list[StepResult]) -> float:
    """The device's busy time a step (the union of its kernels), in ms (docs/traces.md)."""
    return sum(s.host.device_busy_s for s in steps) / len(steps) * 1e3


def host_summary(steps: list[StepResult]) -> HostSummary:
    """The host's busy time, its launches and syncs a step, and its share of the critical path
    (the device waiting on it) (docs/traces.md)."""
    n = len(steps)
    mean = lambda f: sum(f(s) for s in steps) / n      # noqa: E731
    waited = mean(lambda s: s.breakdown_s.get("host", 0.0) + s.breakdown_s.get("launch_overhead", 0.0))
    step_s = mean(lambda s: s.duration_s)
    return HostSummary(busy_ms=mean(lambda s: s.host.busy_s) * 1e3,
                       launches=mean(lambda s: s.host.launches), syncs=mean(lambda s: s.host.syncs),
                       critical_path_ms=waited * 1e3,
                       critical_share=waited / step_s if step_s else 0.0)


def trace_summary(cfg: Scenario, b: Built) -> TraceSummary | None:
    """An imported kernel trace's report, where it was traced and what is not rescaled
    (docs/traces.md); None for the built-in schedule."""
    kt = cfg.workload.kernel_trace
    if kt is None:
        return None
    w = cfg.workload
    return TraceSummary(report=b.schedule.traced.report(), path=kt.path, host_profile=kt.host,
                        traced_point={"batch_size": kt.batch_size, "context_tokens": kt.context_tokens},
                        not_rescaled=b.schedule.not_rescaled(w.batch_size, w.context_tokens),
                        collectives=b.schedule.collectives())


def summarize(cfg: Scenario, b: Built, steps: list[StepResult], prefill: StepResult | None,
              wall_s: float) -> RunSummary:
    """The run's summary, composed of each subsystem's part (hwsim/summary.py)."""
    n = len(steps)
    itl = [s.duration_s for s in steps]
    breakdown = {k: sum(s.breakdown_s[k] for s in steps) / n * 1e3 for k in steps[0].breakdown_s}
    moved = {k: sum(s.bytes[k] for s in steps) / n for k in steps[0].bytes}
    budget_s = cfg.budget_ms * 1e-3
    return RunSummary(
        scenario=cfg.name,
        hardware=cfg.hardware,
        hardware_uncertainty=b.profile.uncertainty,
        model=cfg.model,
        seed=cfg.seed,
        budget_ms=cfg.budget_ms,
        batch_size=cfg.workload.batch_size,
        context_tokens=cfg.workload.context_tokens,
        launch=cfg.runtime.launch,
        itl_ms=percentiles(itl),
        ttft_ms=percentiles([prefill.duration_s]) if prefill else None,
        within_budget=float(np.mean([t <= budget_s for t in itl])),
        breakdown_ms=breakdown,
        bytes=moved,
        kernels_per_step=float(np.mean([s.kernels for s in steps])),
        active_experts_per_layer=float(np.mean([s.active_experts_per_layer for s in steps])),
        weights_gb=b.schedule.weight_bytes_total() / 1e9,
        kv=kv_summary(cfg, b),
        moe=moe_summary(cfg, b, steps),
        weights=weights_summary(b),
        parallel=parallel_summary(cfg, b, steps),
        topology=b.gpus.topology,          # the system of several GPUs (one GPU: None)
        memory_per_gpu_gb=memory_summary(b),
        warnings=b.warnings,
        device_busy_ms=device_busy_ms(steps),
        host=host_summary(steps),
        trace=trace_summary(cfg, b),
        sim=SimSummary(events=b.env.processed, kernels=sum(st.kernels for st in b.gpus.streams),
                       replayed_kernels=sum(st.replayed for st in b.gpus.streams), wall_s=wall_s,
                       simulated_tokens=n * cfg.workload.batch_size, version=__version__),
    )
