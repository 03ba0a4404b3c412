"""`hwsim sensitivity`: how much each number the run reads moves the token.

Each number is changed alone, by STEP either way (a central difference), and its elasticity is
    e = (ln m(x(1+STEP)) - ln m(x(1-STEP))) / (ln(1+STEP) - ln(1-STEP)),
m the mean decode step (ITL; in a speculative run the ms per accepted token, the step over the
tokens it yields) or the prefill (TTFT): -1 for a step wholly bound by the number
(a bandwidth), 0 for one it never limits. The ms gained by +10% is read off the elasticity,
m (1 - 1.1^e) (the log-linear extrapolation; positive = faster). Where a step either way would
leave the number's schema bounds (a fraction at 1, a count of 1) the difference is one-sided;
integers move by at least 1, and the elasticity is taken over the values actually run.

Which profile numbers a run reads is found by the perturbation itself: a number whose change
either way leaves every metric bit-identical is listed under `no_effect` (not read, or read
where it never limits), not ranked."""

from __future__ import annotations

import math
import time

from hwsim.config.scenario import NoArrivals
from hwsim.errors import ConfigError
from hwsim.whatif.numbers import Base, Number, evaluate, find_number, metric, profile_numbers, scenario_number
from hwsim.whatif.reuse import SharedPlans

STEP = 0.05
# The scenario's numeric keys a decode step depends on (the rest are serving or reporting keys)
SCENARIO_KEYS = ("workload.batch_size", "workload.context_tokens", "workload.prompt_tokens",
                 "runtime.sm_clock", "workload.speculative.acceptance")
METRICS = {"itl": "itl_ms.mean", "ttft": "ttft_ms.p50"}
# a speculative run's token is the accepted one: its step over the tokens a step yields
SPECULATIVE_ITL = "speculative.ms_per_accepted_token"


def metrics_of(base: Base) -> dict[str, str]:
    """A serving run's itl_ms is per accepted token already; a fixed batch's is per step."""
    w = base.cfg.workload
    return {**METRICS, "itl": SPECULATIVE_ITL} if w.speculative and isinstance(w.arrivals, NoArrivals) else METRICS


def numbers_of(base: Base) -> list[Number]:
    """The profile's sourced numbers, then the scenario's numeric keys this run has."""
    out = profile_numbers(base.profile)
    for key in SCENARIO_KEYS:
        try:
            n = scenario_number(base.cfg, key)
        except ConfigError:          # runtime.sm_clock 'settled', no workload.speculative
            continue
        if n.value > 0:              # workload.prompt_tokens 0: the run has no prefill
            out.append(n)
    return out


def probes(n: Number, step: float = STEP) -> tuple[float, float]:
    """The values below and above `n` its difference is taken over (one of them `n`'s own
    where the other way leaves its bounds)."""
    v = n.value
    lo, hi = n.cast(v * (1 - step)), n.cast(v * (1 + step))
    if n.integer:
        lo, hi = (v - 1 if lo == v else lo), (v + 1 if hi == v else hi)
    if not n.allowed(lo):
        lo = v
    if not n.allowed(hi):
        hi = n.high if n.high > v else v
    return n.cast(lo), n.cast(hi)      # an integer key as an int: the strict schema refuses 2.0


def run_changes(base: Base, jobs: list[tuple[str, float]], shared: SharedPlans | None = None,
                progress=None) -> list[dict]:
    """Each job's metrics (or its error), one change at a time, replaying the base run's plans
    where they still hold. `progress(done)`, if given, after each."""
    shared = shared or SharedPlans(base)
    out = []
    for done, (key, value) in enumerate(jobs, 1):
        if progress is not None and done > 1:
            progress(done - 1)
        try:
            s = evaluate(base, {key: value}, shared)
            out.append({name: metric(s, path) for name, path in metrics_of(base).items()})
        except ConfigError as exc:          # the change makes the profile inconsistent
            out.append({"error": exc.message})
    if progress is not None and jobs:
        progress(len(jobs))
    return out


def _run_chunk(cfg_json: dict, profile_json: dict, scenario_file: str, jobs: list) -> list[dict]:
    """run_changes on a Dask worker: the base rebuilt there once per chunk."""
    from hwsim.config.load import load_model
    from hwsim.config.profile import HardwareProfile
    from hwsim.config.scenario import Scenario
    cfg = Scenario.model_validate(cfg_json)
    base = Base(cfg, HardwareProfile.model_validate(profile_json), load_model(cfg.model), scenario_file)
    return run_changes(base, jobs)


def _run_all(base: Base, shared: SharedPlans, jobs: list, workers: int | None,
             scheduler: str | None, progress=None) -> list[dict]:
    if (workers or 1) <= 1 and not scheduler:
        return run_changes(base, jobs, shared, progress)
    from hwsim.io.dask_client import dask_client
    n = max(1, workers or 1)
    chunks = [jobs[i::n] for i in range(n)]             # interleaved: similar work per chunk
    cfg_json, profile_json = base.cfg.model_dump(mode="json"), base.profile.model_dump(mode="json")
    with dask_client(scheduler, workers) as client:
        futures = [client.submit(_run_chunk, cfg_json, profile_json, base.file, c, pure=False)
                   for c in chunks if c]
        results = client.gather(futures)
    by_job: dict[int, dict] = {}
    for i, chunk_result in enumerate(results):
        for j, r in enumerate(chunk_result):
            by_job[i + j * n] = r
    return [by_job[i] for i in range(len(jobs))]


def _elasticity(m_lo: float | None, m_hi: float | None, lo: float, hi: float) -> float | None:
    if not m_lo or not m_hi or lo == hi:
        return None
    return (math.log(m_hi) - math.log(m_lo)) / (math.log(hi) - math.log(lo))


def _progress_lines(say, runs: int, numbers: int, base_s: float, t0: float):
    """`say` told the cost before the runs (the base run's wall time a run: an upper bound, the
    runs replay its plans where they hold) and, every 10 s, how many are done."""
    say(f"sensitivity: {numbers} numbers, {runs} runs, about {_duration(base_s * runs)} "
        f"(the unchanged run took {base_s:.2f} s)")
    last = [time.perf_counter()]

    def done(n: int) -> None:
        now = time.perf_counter()
        if n == runs or now - last[0] >= 10:
            last[0] = now
            left = (now - t0) / n * (runs - n)
            say(f"sensitivity: {n} of {runs} runs done" + (f", about {_duration(left)} left" if n < runs else ""))
    return done


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


def sensitivity(base: Base, *, step: float = STEP, workers: int | None = None,
                scheduler: str | None = None, keys: list[str] | None = None,
                progress=None) -> tuple[dict, dict]:
    """Every number's elasticity and ms gained by +10%, sorted by |ITL elasticity|; and the
    unchanged run's summary. `keys`: only these numbers (default: all, numbers_of).
    `progress(line)`: told the cost before the runs, then how far they are."""
    t0 = time.perf_counter()
    shared = SharedPlans(base)
    summary = shared.summary
    paths = metrics_of(base)
    base_m = {name: metric(summary, path) for name, path in paths.items()}
    nums = [find_number(base, k) for k in keys] if keys else numbers_of(base)
    jobs, plan = [], []
    for n in nums:
        lo, hi = probes(n, step)
        plan.append((n, lo, hi))
        jobs += [(n.key, v) for v in (lo, hi) if v != n.value]
    done = None
    if progress is not None:
        done = _progress_lines(progress, len(jobs), len(nums), time.perf_counter() - t0, time.perf_counter())
    results = dict(zip(jobs, _run_all(base, shared, jobs, workers, scheduler, done)))
    rows, no_effect, failed = [], [], []
    for n, lo, hi in plan:
        got = {v: (results[n.key, v] if v != n.value else base_m) for v in (lo, hi)}
        errors = [r["error"] for r in got.values() if "error" in r]
        if errors:
            failed.append({"key": n.key, "error": errors[0]})
            continue
        if all(got[v][m] == base_m[m] for v in (lo, hi) for m in METRICS):
            no_effect.append(n.key)
            continue
        row = {"key": n.key, "where": n.where, "value": n.value, "low": lo, "high": hi,
               "difference": "central" if lo != n.value and hi != n.value else
               ("forward" if lo == n.value else "backward"), "source": n.source}
        for name in METRICS:
            e = _elasticity(got[lo][name], got[hi][name], lo, hi)
            row[f"{name}_elasticity"] = e
            row[f"{name}_ms_gained_10pct"] = (base_m[name] * (1 - 1.1 ** e)
                                              if e is not None and base_m[name] else None)
        # each side's own: far apart, the metric steps rather than slopes here (a library's
        # heuristic switching: FlashAttention's context splits, cuBLAS's split-K)
        row["itl_elasticity_below"] = _elasticity(got[lo]["itl"], base_m["itl"], lo, n.value)
        row["itl_elasticity_above"] = _elasticity(base_m["itl"], got[hi]["itl"], n.value, hi)
        rows.append(row)
    rows.sort(key=lambda r: -abs(r["itl_elasticity"] or 0.0))
    return {
        "scenario": base.cfg.name, "hardware": base.cfg.hardware, "model": base.cfg.model,
        "itl_ms": base_m["itl"], "ttft_ms": base_m["ttft"],
        "step": step,
        "method": (f"one number at a time, x (1 -/+ {step:g}); elasticity = d ln metric / d ln value "
                   f"(central difference; one-sided at a schema bound); ms gained by +10% = "
                   f"metric (1 - 1.1^elasticity); ITL = {paths['itl']}, TTFT = {paths['ttft']}"),
        "rows": rows, "no_effect": no_effect, "failed": failed,
        "numbers": len(nums), "runs": len(jobs) + 1,
        "plans_replayed": "the base run's kernels and routing replayed for numbers no plan reads "
                          f"(plans read: {', '.join(sorted(shared.fields))})" if shared.enabled else None,
        "wall_s": time.perf_counter() - t0,
    }, summary
