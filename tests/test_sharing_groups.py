"""The arbiter's unit groups (issue 33): an item asking a group (a device's HBM stacks, as a
collective's flow does) must get, to the bit, the rates and finish times it gets asking each
member alike, while other items ask the members one by one (kernels, copies): the group is
split when a member is asked on its own, and a group asked while members are asked on their
own is asked as its members."""

import random

import pytest

from hwsim.engine.environment import CountingEnvironment
from hwsim.engine.sharing import Arbiter
from hwsim.hw.units import Unit


def _group(name: str, n: int) -> Unit:
    members = tuple(Unit(f"{name}.{k}", "hbm", 1.0, "bytes") for k in range(n))
    group = Unit(name, "hbm", float(n), "bytes", members=members)
    for m in members:
        m.group = group
    return group


def _expanded(shares: dict) -> dict:
    """The shares with each group asked as its members, alike (the arbiter without groups)."""
    out = {}
    for unit, f in shares.items():
        for m in unit.members or (unit,):
            out[m] = out.get(m, 0.0) + f
    return out


def _simulate(arrivals, expand: bool):
    env = CountingEnvironment()
    arbiter = Arbiter(env)
    items = [None] * len(arrivals)
    splits = []
    split = arbiter._split

    def counted(group):
        splits.append(group)
        split(group)

    arbiter._split = counted

    def starter(i, start, seconds, shares):
        yield env.timeout(start)
        items[i] = arbiter.submit(f"item{i}", seconds, _expanded(shares) if expand else dict(shares))

    for i, a in enumerate(arrivals):
        env.process(starter(i, *a))
    env.run()
    assert not arbiter._units and not arbiter._direct      # every record gone with its items
    return [it.done.value for it in items], splits


def _random_case(rng: random.Random):
    groups = [_group(f"g{k}", rng.randint(2, 6)) for k in range(rng.randint(1, 3))]
    plain = [Unit(f"port{k}", "scaleup", 1.0, "bytes") for k in range(rng.randint(1, 3))]
    instants = [0.0] + sorted(rng.uniform(0.0, 2.0) for _ in range(rng.randint(1, 4)))
    arrivals = []
    for _ in range(rng.randint(2, 14)):
        shares = {u: rng.uniform(0.05, 1.0) for u in rng.sample(plain, rng.randint(0, len(plain)))}
        for g in rng.sample(groups, rng.randint(1, len(groups))):
            if rng.random() < 0.5:                     # a flow: the group, alike on every member
                shares[g] = rng.uniform(0.05, 0.9)
            else:                                      # a kernel or copy: some members, each its own
                for m in rng.sample(g.members, rng.randint(1, len(g.members))):
                    shares[m] = rng.uniform(0.05, 1.0)
        arrivals.append((rng.choice(instants), rng.uniform(0.1, 2.0), shares))
    return sorted(arrivals, key=lambda a: a[0])


@pytest.mark.parametrize("seed", range(60))
def test_a_group_finishes_as_its_members_asked_alike(seed):
    arrivals = _random_case(random.Random(seed))
    grouped, _ = _simulate(arrivals, expand=False)
    alone, _ = _simulate(arrivals, expand=True)
    assert grouped == alone                            # to the bit


def test_a_member_asked_on_its_own_splits_the_group_it_contends_with():
    g = _group("hbm", 3)
    port = Unit("port", "scaleup", 1.0, "bytes")
    arrivals = [(0.0, 1.0, {g: 0.6, port: 0.2}), (0.0, 1.0, {g: 0.3}),     # flows
                (0.25, 0.5, {g.members[1]: 0.7}),                          # a kernel on one stack
                (0.5, 1.0, {g: 0.5, port: 0.9})]                           # a flow while it runs
    grouped, splits = _simulate(arrivals, expand=False)
    alone, _ = _simulate(arrivals, expand=True)
    assert splits == [g]
    assert grouped == alone
    assert grouped[2] > 0.25 + 0.5          # the kernel shared its stack: slower than alone
