"""`hwsim goal`: the value of one number that brings a metric to a target, and (two numbers) the
frontier of the pairs that do.

The search (docs/whatif.md): from the number's present value, probes a factor 2, 8, 32 and
100 either way (nearest first; DIRECTION_PROBES) find which way moves the metric toward the
target (a number that limits only far from its value moves nothing nearby); the bracket then grows by a factor
BRACKET_GROWTH that way, every sample checked to move the metric the same way (monotone),
until the metric crosses the target or the number reaches its bounds (the schema's, at most
SEARCH_DECADES decades from its value: hwsim/whatif/numbers.py). Inside the bracket,
scipy.optimize.brentq finds the crossing to a relative XTOL. A bracket given by the user is
checked the same way: its ends on either side of the target and INTERIOR_SAMPLES samples in
between monotone. Every run is reported, in order, as a step."""

from __future__ import annotations

import math

from hwsim.errors import ConfigError
from hwsim.whatif.numbers import Base, Number, changed, dominant, evaluate, find_number, metric
from hwsim.whatif.reuse import SharedPlans

BRACKET_GROWTH = 4.0
# the probes that find which way moves the metric toward the target, nearest first
DIRECTION_PROBES = (2.0, 0.5, 8.0, 1 / 8, 32.0, 1 / 32, 100.0, 1 / 100)
XTOL = 1e-5            # relative, on the number
INTERIOR_SAMPLES = 3
MAX_ITER = 60


class Unreachable(ConfigError):
    """No value within the bounds meets the target; `report` says how close it came and why."""

    def __init__(self, message: str, report: dict):
        super().__init__(message)
        self.report = report


def parse_target(text: str) -> tuple[str, float]:
    """`itl_ms.p50=10` -> ('itl_ms.p50', 10.0)."""
    path, sep, raw = text.partition("=")
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not sep or not path.strip() or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"expected METRIC=VALUE with a positive value, e.g. itl_ms.p50=10; got '{text}'",
                          key="--target")
    return path.strip(), value


class _Search:
    """Runs of the scenario with one number changed, each kept as a step."""

    def __init__(self, base: Base, n: Number, target_path: str, target: float):
        self.base, self.n, self.path, self.target = base, n, target_path, target
        self.steps: list[dict] = []
        self.summaries: dict[float, dict] = {}
        # a profile number: the base run's plans replayed where they hold (hwsim/whatif/reuse.py)
        self.shared = SharedPlans(base) if n.where == "profile" else None
        if self.shared:
            self.summaries[n.value] = self.shared.summary

    def metric_at(self, x: float, phase: str) -> float:
        x = self.n.cast(x)
        if x not in self.summaries:
            self.summaries[x] = evaluate(self.base, {self.n.key: x}, self.shared)
        m = metric(self.summaries[x], self.path)
        if m is None:
            raise ConfigError(f"the run reports no number '{self.path}' (e.g. itl_ms.p50, itl_ms.mean, "
                              f"ttft_ms.p50, speculative.ms_per_accepted_token)", key="--target")
        self.steps.append({"phase": phase, "value": x, "metric": m})
        return m

    def gap(self, x: float, phase: str) -> float:
        return self.metric_at(x, phase) - self.target


def _not_monotone(n: Number, path: str, pts: list[tuple[float, float]]) -> ConfigError:
    shown = ", ".join(f"{x:.4g} -> {m:.4g}" for x, m in pts)
    return ConfigError(f"{path} is not monotone in {n.key} over the bracket ({shown}); give a narrower "
                       f"--bracket where it is", key="--bracket")


def _check_monotone(n: Number, path: str, pts: list[tuple[float, float]]) -> None:
    pts = sorted(pts)
    diffs = [b[1] - a[1] for a, b in zip(pts, pts[1:])]
    tol = 1e-9 * max(abs(m) for _, m in pts)
    if any(d > tol for d in diffs) and any(d < -tol for d in diffs):
        raise _not_monotone(n, path, pts)


def _bracket(s: _Search, lo_b: float, hi_b: float) -> tuple[float, float]:
    """Grow a bracket from the present value toward the target (see the module's docstring)."""
    n, v0 = s.n, s.n.value
    m0 = s.metric_at(v0, "start")
    if m0 == s.target:
        return v0, v0
    want = math.copysign(1.0, s.target - m0)          # the way the metric must move
    best = None
    for factor in DIRECTION_PROBES:                   # a number that limits only far from its
        x = n.cast(min(max(v0 * factor, lo_b), hi_b))  # value moves nothing nearby: look further
        if x == v0 or x in s.summaries:
            continue
        m = s.metric_at(x, "direction")
        if (m - m0) * want > 0:
            best = (factor, x, m)
            break
    if best is None:
        _unreachable(s, v0, lo_b, hi_b, f"{n.key} does not move {s.path} toward {s.target:g} "
                                           f"either way from {v0:g}")
    factor, x, m = best
    pts = [(v0, m0), (x, m)]
    bound = hi_b if factor > 1 else lo_b
    while (m - s.target) * want < 0:                  # not yet across the target
        if x == bound:
            _unreachable(s, x, lo_b, hi_b, None)
        x = n.cast(min(x * BRACKET_GROWTH, bound) if factor > 1 else max(x / BRACKET_GROWTH, bound))
        m = s.metric_at(x, "bracket")
        pts.append((x, m))
        _check_monotone(n, s.path, pts)
    prev = pts[-2][0]
    return (min(prev, x), max(prev, x))


def _unreachable(s: _Search, x: float, lo_b: float, hi_b: float, why: str | None):
    summary = s.summaries[s.n.cast(x)]
    comp, share = dominant(summary)
    m = metric(summary, s.path)
    side = "below" if m < s.target else "above"
    why = why or f"it stays {side} {s.target:g} over the whole range ({m:.4g} at {x:g}, its bound)"
    message = (f"no value of {s.n.key} in [{lo_b:.4g}, {hi_b:.4g}] brings {s.path} to {s.target:g}: {why}; "
               f"there {comp} takes {share:.0%} of the token")
    raise Unreachable(message, {"reachable": False, "key": s.n.key, "bounds": [lo_b, hi_b],
                                "best_value": x, "best_metric": m, "side": side, "dominant": comp,
                                "dominant_share": share, "steps": s.steps})


def _user_bracket(s: _Search, bracket: tuple[float, float]) -> tuple[float, float]:
    lo, hi = sorted(bracket)
    n = s.n
    for x in (lo, hi):
        if not n.allowed(x):
            raise ConfigError(f"{x:g} is outside the bounds of {n.key}", key="--bracket")
    xs = [lo * (hi / lo) ** (i / (INTERIOR_SAMPLES + 1)) for i in range(INTERIOR_SAMPLES + 2)] if lo > 0 else \
        [lo + (hi - lo) * i / (INTERIOR_SAMPLES + 1) for i in range(INTERIOR_SAMPLES + 2)]
    pts = [(x, s.metric_at(x, "bracket")) for x in xs]
    _check_monotone(n, s.path, pts)
    if (pts[0][1] - s.target) * (pts[-1][1] - s.target) > 0:
        comp, share = dominant(s.summaries[n.cast(hi)])
        raise Unreachable(f"no value of {n.key} in the bracket [{lo:g}, {hi:g}] brings {s.path} to "
                          f"{s.target:g} ({pts[0][1]:.4g} to {pts[-1][1]:.4g}); at {hi:g} {comp} takes "
                          f"{share:.0%} of the token",
                          {"reachable": False, "key": n.key, "bounds": [lo, hi], "steps": s.steps})
    return lo, hi


# keys that are no quantity a target is sought over (a random draw; the seed that ran is one
# sample, and a search over it picks the luckiest), and metrics that are the simulator's own
NOT_VARIED = {"seed": "the random seed is a draw, not a quantity: a search over it picks a lucky sample"}
NOT_TARGETS = ("sim.",)


def _check_goal(key: str, target_path: str) -> None:
    if key in NOT_VARIED:
        raise ConfigError(f"{key}: {NOT_VARIED[key]}", key="--vary")
    if target_path.startswith(NOT_TARGETS):
        raise ConfigError(f"{target_path} is the simulator's own figure (its wall time, events), not a "
                          f"simulated one; target e.g. itl_ms.p50 or ttft_ms.p50", key="--target")


def goal(base: Base, key: str, target_path: str, target: float,
         bracket: tuple[float, float] | None = None) -> dict:
    """The value of `key` at which `target_path` equals `target` (module docstring)."""
    from scipy.optimize import brentq
    _check_goal(key, target_path)
    n = find_number(base, key)
    s = _Search(base, n, target_path, target)
    lo_b, hi_b = n.search_bounds()
    a, b = _user_bracket(s, bracket) if bracket else _bracket(s, lo_b, hi_b)
    iterations = 0
    if a == b:
        root = a
    elif n.integer:
        root, iterations = _integer_root(s, int(a), int(b))
    else:
        root, info = brentq(lambda x: s.gap(x, "brentq"), a, b, xtol=XTOL * max(abs(a), abs(b)),
                            rtol=XTOL, maxiter=MAX_ITER, full_output=True)
        iterations = info.iterations
    value = n.cast(root)
    m = s.metric_at(value, "result")
    comp, share = dominant(s.summaries[value])
    return {"reachable": True, "key": key, "where": n.where, "present_value": n.value, "value": value,
            "change": value / n.value if n.value else None,
            "target": {"metric": target_path, "value": target}, "metric": m,
            "bracket": [a, b], "bounds": [lo_b, hi_b], "iterations": iterations, "runs": len(s.summaries),
            "dominant": comp, "dominant_share": share, "steps": s.steps,
            "method": f"monotone bracket grown x{BRACKET_GROWTH:g} from the present value, then "
                      f"scipy.optimize.brentq (xtol {XTOL:g} relative)" + (
                          "; an integer: bisection to the first integer across" if n.integer else "")}


def _integer_root(s: _Search, a: int, b: int) -> tuple[int, int]:
    """The integer next to the crossing on the side that meets the target (bisection)."""
    ga = s.gap(a, "bisection")
    steps = 0
    while b - a > 1:
        mid = (a + b) // 2
        gm = s.gap(mid, "bisection")
        a, b, ga = (mid, b, gm) if gm * ga > 0 else (a, mid, ga)
        steps += 1
    return (a if ga <= 0 else b), steps


def frontier(base: Base, key_a: str, key_b: str, target_path: str, target: float,
             points: int = 7, span: float = 2.0) -> dict:
    """For `points` values of `key_a` (geometric, its value / span to x span, within its bounds),
    the value of `key_b` that meets the target (None where none can)."""
    _check_goal(key_a, target_path)
    _check_goal(key_b, target_path)
    na = find_number(base, key_a)
    find_number(base, key_b)            # a bad second key fails before any run
    lo_b, hi_b = na.search_bounds()
    lo, hi = max(na.value / span, lo_b), min(na.value * span, hi_b)
    xs = sorted({na.cast(lo * (hi / lo) ** (i / (points - 1))) for i in range(points)})
    rows = []
    for x in xs:
        cfg, profile = changed(base, {key_a: x})
        moved = Base(cfg, profile, base.model, base.file)
        try:
            r = goal(moved, key_b, target_path, target)
            rows.append({key_a: x, key_b: r["value"], "metric": r["metric"], "dominant": r["dominant"]})
        except Unreachable as exc:
            rows.append({key_a: x, key_b: None, "metric": exc.report.get("best_metric"),
                         "dominant": exc.report.get("dominant")})
    return {"keys": [key_a, key_b], "target": {"metric": target_path, "value": target},
            "present": {key_a: na.value, key_b: find_number(base, key_b).value}, "points": rows}
