"""The numbers a what-if can change: every sourced number of the hardware profile (by its path
in the profile, `hbm.peak_bandwidth_gbps`) and the scenario's numeric keys (by their scenario
path, `workload.context_tokens`), with the bounds the schemas give them, and one run of the
scenario with some of them changed.

The scenario, its profile (its own hardware_overrides applied) and its model are loaded once
(Base) and shared by every evaluation: a profile number changed is a copy of the profile with
that number replaced (apply_hardware_overrides, its source saying so); a scenario key changed
is the scenario validated again. The model object is the same throughout, so the schedule's
weight layout, laid out once per model, is reused by every run."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ValidationError

from hwsim.config.profile import HardwareProfile
from hwsim.config.scenario import Scenario
from hwsim.config.sourced import Count, Fraction, Positive
from hwsim import pipeline
from hwsim.errors import ConfigError
from hwsim.pipeline import LoadedScenario

# Goal-seek never leaves this factor either side of a number's present value: two decades
# cover every what-if of docs/whatif.md and keep a runaway bracket to a few runs
SEARCH_DECADES = 2.0
PROFILE_BLOCKS = ("sm", "l2", "hbm", "bus", "launch", "kernel", "gemm", "cudnn_fprop", "decoder",
                  "dequant_kernels", "interconnect", "power", "cuda")


@dataclass(frozen=True)
class Number:
    """One number a what-if can change."""
    key: str                  # its path: in the profile (hbm.peak_bandwidth_gbps) or the scenario
    where: str                # "profile" or "scenario"
    value: float
    integer: bool
    low: float                # the schema's bounds (exclusive low when low_open)
    high: float
    low_open: bool
    source: str = ""

    def search_bounds(self) -> tuple[float, float]:
        """The values goal-seek may try: the schema's bounds, and at most SEARCH_DECADES decades
        from the present value."""
        span = 10 ** SEARCH_DECADES
        lo = max(self.value / span, self.low)
        if self.low_open and lo <= self.low:          # an open bound: just inside it
            lo = self.low + (1 if self.integer else self.value / span)
        hi = min(self.value * span, self.high)
        if self.integer:
            lo, hi = max(1.0, math.ceil(lo)), math.floor(hi)
        return lo, hi

    def allowed(self, value: float) -> bool:
        return (value > self.low if self.low_open else value >= self.low) and value <= self.high

    def cast(self, value: float) -> float | int:
        return int(round(value)) if self.integer else float(value)


# A scenario loaded once: what every evaluation starts from (its profile with the scenario's
# hardware_overrides applied, its model, where its keys are written).
Base = LoadedScenario


def load_base(scenario: Path | None, sets: list[str]) -> Base:
    return pipeline.load(scenario, sets)


def profile_numbers(profile: HardwareProfile) -> list[Number]:
    """Every sourced number of the profile, in schema order."""
    out: list[Number] = []

    def walk(prefix: str, node):
        if isinstance(node, (Positive, Fraction, Count)):
            integer = isinstance(node, Count)
            high = 1.0 if isinstance(node, Fraction) else math.inf
            out.append(Number(prefix, "profile", node.value, integer, 1.0 if integer else 0.0, high,
                              not integer, node.source))
        elif isinstance(node, dict):
            for k, v in node.items():
                walk(f"{prefix}.{k}", v)
        elif isinstance(node, BaseModel):
            for name in type(node).model_fields:
                walk(f"{prefix}.{name}" if prefix else name, getattr(node, name))
    walk("", profile)
    return out


def scenario_number(cfg: Scenario, key: str) -> Number:
    """The scenario's numeric key `key` (dotted), with its schema bounds."""
    node: object = cfg
    parts = key.split(".")
    for i, part in enumerate(parts):
        if not isinstance(node, BaseModel) or part not in type(node).model_fields:
            raise ConfigError(f"'{key}' is not a number of the hardware profile or a key of the scenario",
                              key=key)
        owner, node = node, getattr(node, part)
    field = type(owner).model_fields[parts[-1]]
    if isinstance(node, bool) or not isinstance(node, (int, float)):
        raise ConfigError(f"'{key}' is not numeric (it is {node!r}); only a number can be varied", key=key)
    low, high, low_open = -math.inf, math.inf, False
    for m in field.metadata:
        if getattr(m, "ge", None) is not None:
            low = m.ge
        if getattr(m, "gt", None) is not None:
            low, low_open = m.gt, True
        if getattr(m, "le", None) is not None:
            high = m.le
    if key == "runtime.sm_clock":         # a locked clock in MHz: above 0
        low, low_open = 0.0, True
    if key == "workload.speculative.acceptance":    # a probability (its validator, not its Field)
        low, high = 0.0, 1.0
    if low == -math.inf:                  # a count or a rate without a bound: above 0
        low, low_open = 0.0, True
    return Number(key, "scenario", float(node), isinstance(node, int), float(low), float(high), low_open)


def find_number(base: Base, key: str) -> Number:
    """A number by its key: a profile path or a scenario path (one clear error if neither)."""
    if key.split(".")[0] in PROFILE_BLOCKS:
        for n in profile_numbers(base.profile):
            if n.key == key:
                return n
        node = _profile_node(base.profile, key)
        if node is not None and not isinstance(node, (BaseModel, dict)):
            raise ConfigError(f"'{key}' is not numeric (it is {node!r}); only a sourced number of the "
                              f"profile can be varied", key=key)
        raise ConfigError(f"'{key}' is not a number of the hardware profile '{base.profile.name}'", key=key)
    return scenario_number(base.cfg, key)


def _profile_node(profile: HardwareProfile, key: str):
    node: object = profile
    for part in key.split("."):
        if isinstance(node, BaseModel) and part in type(node).model_fields:
            node = getattr(node, part)
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return None
    return node


def changed(base: Base, changes: dict[str, float]) -> tuple[Scenario, HardwareProfile]:
    """The scenario and profile with `changes` (key -> value) applied."""
    from hwsim.config.load import apply_hardware_overrides
    hardware = {k: v for k, v in changes.items() if k.split(".")[0] in PROFILE_BLOCKS}
    scenario = {k: v for k, v in changes.items() if k not in hardware}
    cfg, profile = base.cfg, base.profile
    if hardware:
        profile = apply_hardware_overrides(profile, hardware)
        # the resolved scenario says what was changed, as a what-if in the scenario would
        cfg = cfg.model_copy(update={"hardware_overrides": {**cfg.hardware_overrides, **hardware}})
    if scenario:
        data = cfg.model_dump(mode="python")
        for key, value in scenario.items():
            node = data
            *path, leaf = key.split(".")
            for part in path:
                node = node[part]
            node[leaf] = value
        try:
            cfg = Scenario.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            raise ConfigError(err["msg"], key=".".join(str(p) for p in err["loc"])) from None
    return cfg, profile


def evaluate(base: Base, changes: dict[str, float], shared=None) -> dict:
    """The run's summary with `changes` applied (no busy intervals: nothing is drawn).
    `shared` (hwsim/whatif/reuse.py SharedPlans): the base run's plans, replayed where only
    numbers no plan reads changed."""
    cfg, profile = changed(base, changes)
    plans = shared.for_profile(profile) if shared is not None and _only_hardware(changes) else None
    return pipeline.summary(Base(cfg, profile, base.model, base.file), plans)


def _only_hardware(changes: dict) -> bool:
    return all(k.split(".")[0] in PROFILE_BLOCKS for k in changes)


def metric(summary: dict, path: str) -> float | None:
    """A summary number by its dotted path (itl_ms.p50), None where the run has none."""
    node: object = summary
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return float(node) if isinstance(node, (int, float)) and not isinstance(node, bool) else None


def dominant(summary: dict) -> tuple[str, float]:
    """The component of the breakdown that takes the most of the token, and its share."""
    parts = summary["breakdown_ms"]
    total = sum(parts.values()) or 1.0
    name = max(parts, key=parts.get)
    return name, parts[name] / total
