"""The arbiter's batched, contended-units-only solve (issue 33) against the solver it replaced:
progressive filling over every unit and every item in flight, re-solved at every arrival. The
finish times of random sets of items (arrivals at shared instants, units asked for more or less
than they have) agree to 1e-9."""

import random

import pytest

from hwsim.engine.environment import CountingEnvironment
from hwsim.engine.sharing import DONE, Arbiter
from hwsim.hw.units import Unit


def reference_rates(items: list[dict]) -> list[float]:
    """Max-min fair rates by progressive filling, every unit and item summed afresh each round
    (the arbiter's solver before issue 33)."""
    free = {u: 1.0 for shares in items for u in shares}
    rates = [None] * len(items)
    while any(r is None for r in rates):
        open_ = [i for i, r in enumerate(rates) if r is None]
        asked = {u: sum(items[i].get(u, 0.0) for i in open_) for u in free}
        level = min([1.0] + [free[u] / a for u, a in asked.items() if a > 0])
        saturated = {u for u, a in asked.items() if a > 0 and free[u] <= level * a * (1 + 1e-12)}
        for i in open_:
            if level >= 1.0 or saturated & items[i].keys():
                rates[i] = level
                for u, f in items[i].items():
                    free[u] = max(0.0, free[u] - f * level)
    return rates


def reference_finish(arrivals: list[tuple[float, float, dict]]) -> list[float]:
    """Finish times of items (start, seconds alone, shares) under the reference rates."""
    remaining = [1.0] * len(arrivals)
    done = [None] * len(arrivals)
    t = 0.0
    while None in done:
        active = [i for i, (s, _, _) in enumerate(arrivals) if s <= t and done[i] is None]
        rates = dict(zip(active, reference_rates([arrivals[i][2] for i in active])))
        later = [s for s, _, _ in arrivals if s > t]
        finish = min((remaining[i] * arrivals[i][1] / rates[i] for i in active), default=float("inf"))
        dt = min([finish] + [s - t for s in later])
        for i in active:
            remaining[i] -= dt * rates[i] / arrivals[i][1]
        t += dt
        for i in active:
            if remaining[i] <= DONE:
                done[i] = t
    return done


def _random_case(rng: random.Random):
    units = [Unit(f"u{k}", "hbm", 1.0, "bytes") for k in range(rng.randint(1, 6))]
    instants = [0.0] + sorted(rng.uniform(0.0, 2.0) for _ in range(rng.randint(0, 3)))
    arrivals = []
    for _ in range(rng.randint(1, 12)):
        used = rng.sample(units, rng.randint(0, len(units)))
        arrivals.append((rng.choice(instants), rng.uniform(0.1, 2.0), {u: rng.uniform(0.05, 1.0) for u in used}))
    return sorted(arrivals, key=lambda a: a[0])


def _simulate(arrivals) -> list[float]:
    env = CountingEnvironment()
    arbiter = Arbiter(env)
    items = [None] * len(arrivals)

    def starter(i, start, seconds, shares):
        yield env.timeout(start)
        items[i] = arbiter.submit(f"item{i}", seconds, shares)

    for i, a in enumerate(arrivals):
        env.process(starter(i, *a))
    env.run()
    return [it.done.value for it in items]


@pytest.mark.parametrize("seed", range(40))
def test_batched_solver_matches_the_full_resolve(seed):
    arrivals = _random_case(random.Random(seed))
    assert _simulate(arrivals) == pytest.approx(reference_finish(arrivals), rel=1e-9, abs=1e-12)


def test_arrivals_of_one_instant_are_solved_once():
    """Eight items submitted at one instant (a collective's senders): one solve, not eight."""
    env = CountingEnvironment()
    arbiter = Arbiter(env)
    solves = []
    solve = arbiter._solve
    arbiter._solve = lambda: (solves.append(env.now), solve())[1]
    port = Unit("port in", "scaleup", 1.0, "bytes")
    items = [arbiter.submit(f"send{i}", 1.0, {port: 0.5, Unit(f"out{i}", "scaleup", 1.0, "bytes"): 0.9})
             for i in range(8)]
    env.run()
    assert solves.count(0.0) == 1
    assert [it.done.value for it in items] == pytest.approx([4.0] * 8)     # 8 x 0.5 of one port


def test_uncontended_units_do_not_slow_anything():
    """Units asked for at most all of themselves never hold an item back: every item runs as
    fast as alone, whatever else shares those units."""
    env = CountingEnvironment()
    arbiter = Arbiter(env)
    u, v = Unit("u", "hbm", 1.0, "bytes"), Unit("v", "bus", 1.0, "bytes")
    items = [arbiter.submit("a", 1.0, {u: 0.5, v: 0.3}), arbiter.submit("b", 2.0, {u: 0.5, v: 0.7})]
    env.run()
    assert [it.done.value for it in items] == [1.0, 2.0]
