"""Checks a scenario meets only as a system, above the loader: its weight formats against the
profile's tensor rates and decoder (hwsim/model/weight_format.py), and its disaggregated tiers
placed in a topology (hwsim/parallel/tiers.py).

The loader (hwsim/config/load.py) only parses and validates a scenario against its profile's
and model's numbers. These checks need what build makes the system of (the formats a kernel
runs, a topology's nodes), so they sit above the loader, as the cost check does
(hwsim/cost.py): the pipeline checks the scenario it loaded (hwsim/pipeline.py check) before
its cost, its error at the scenario's file:line:key exactly as the loader gives its own; a
scenario not loaded from a file (a sweep's point, a test's) is checked by the same stage before
it is built (pipeline.checked_build), build() checking nothing again; a sweep spec checks each of
its points (hwsim/sweep/spec.py).
"""

from __future__ import annotations

from hwsim.config import engine_install
from hwsim.config.profile import HardwareProfile
from hwsim.config.scenario import Scenario
from hwsim.model import weight_format
from hwsim.model.shapes import ModelShape
from hwsim.parallel import draft_checks, tiers


def problems(cfg: Scenario, profile: HardwareProfile, model: ModelShape, draft: ModelShape | None = None):
    """(key, message) of each way the scenario's system cannot be built as asked."""
    yield from weight_format.problems(weight_format.plan(cfg.weights, model.weights), profile)
    yield from tiers.problems(cfg, profile.name)     # tiers that do not fit their topology
    yield from engine_install.problems(cfg)               # a real engine not installed, or misconfigured
    yield from draft_checks.problems(cfg, profile, model, draft)   # a speculative draft that cannot be one

