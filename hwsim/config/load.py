"""Load a scenario (with --set overrides), its hardware profile and its model shape.

Every user error becomes one ConfigError naming the file, the line and the dotted key path.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from hwsim.config.files import (default_scenario_path, error_at, load_model, load_profile, scenario_path,
                                validate)
from hwsim.config.kernel_checks import kernel_problems
from hwsim.config.limits import profile_problems, value_problems
from hwsim.config.profile import HardwareProfile
from hwsim.config.scenario import Scenario
from hwsim.config.yaml_lines import LoadedYaml, load_yaml_file, load_yaml_text
from hwsim.errors import ConfigError
from hwsim.model import hf_import
from hwsim.model.hf_import.context import longest as longest_context
from hwsim.model.blocks import moe_schedule_problems
from hwsim.model.shapes import ModelShape


def parse_set(item: str) -> tuple[list[str], Any]:
    """`a.b=value` -> (['a', 'b'], value parsed as YAML so numbers and booleans keep their type)."""
    if "=" not in item:
        raise ConfigError(f"--set expects dotted.key=value, got '{item}'", file="--set")
    key, raw = item.split("=", 1)
    parts = key.strip().split(".")
    if not all(parts):
        raise ConfigError(f"bad key '{key}'", file="--set", key=key)
    try:
        value = load_yaml_text(raw, "--set").data if raw.strip() else ""
    except ConfigError as exc:
        raise ConfigError(exc.message, file="--set", key=key) from None
    return parts, value


SWITCH_TAGS = ("kind", "method", "predictor")    # the keys that pick a block's kind (hwsim/config/variants.py)
MAX_SWITCHED_KEYS = 64


def apply_overrides(data: dict, sets: list[str], doc: LoadedYaml) -> None:
    doc.switched = set()           # blocks whose kind a --set changed (_validated)
    for item in sets:
        parts, value = parse_set(item)
        node = data
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"'{'.'.join(parts[:i + 1])}' is not a mapping", file="--set",
                                  key=".".join(parts))
            node = child
        if parts[-1] in SWITCH_TAGS and node.get(parts[-1], value) != value:
            doc.switched.add(".".join(parts[:-1]))
        node[parts[-1]] = value
        doc.key_lines.setdefault(".".join(parts), 0)
    doc.overridden = {".".join(parse_set(s)[0]) for s in sets}


def _validated(doc: LoadedYaml) -> Scenario:
    """The scenario validated. A key the file wrote in a block whose kind --set switched, which the
    new kind does not have, gives way to the switch (`--set workload.arrivals.kind=trace` on a
    poisson block drops its rate_per_s); a key the new kind lacks that --set itself wrote stays an
    error."""
    for _ in range(MAX_SWITCHED_KEYS):
        try:
            return validate(Scenario, doc)
        except ConfigError as exc:
            block, _, leaf = (exc.key or "").rpartition(".")
            if block not in doc.switched or exc.key in doc.overridden or "unknown key" not in exc.message:
                raise
            node = doc.data
            for part in block.split("."):
                node = node[part]
            node.pop(leaf)
    return validate(Scenario, doc)


@dataclass(frozen=True)
class ScenarioSource:
    """Where a loaded scenario's keys are written: its YAML line map, and the keys --set gave.
    Carried with the scenario (hwsim/pipeline.py LoadedScenario), never kept by this module, so
    an error found after loading names the file, line and key path of the scenario it is about."""
    doc: LoadedYaml
    overridden: frozenset[str] = frozenset()

    def at(self, exc: ConfigError) -> ConfigError:
        """An error about a key of this scenario found by a check made after loading (the
        system's, the cost): at the key's line, or --set, as load_scenario says its own."""
        return _from_set(error_at(self.doc, exc.key, exc.message), self.overridden)

    def locate(self, exc: ConfigError) -> ConfigError:
        """An error about a scenario key that was found after loading (by build, a topology or
        layout check, the run), which sees only the validated scenario and so names the key
        alone: the same error naming the file and line where this scenario writes that key (or
        its nearest parent), or --set when an override gave it."""
        if exc.file is not None or not exc.key:
            return exc
        parts = exc.key.split(".")
        if parts[0] not in Scenario.model_fields:
            return exc
        located = _from_set(exc, self.overridden)
        if located is not exc:
            return located
        if self.doc.line_of(parts) is None and any(o.split(".")[0] == parts[0] for o in self.overridden):
            return ConfigError(exc.message, file="--set", key=exc.key)     # its block came from --set
        return error_at(self.doc, exc.key, exc.message)


def read_scenario(path: str | Path | None, sets: list[str] | None = None
                  ) -> tuple[Scenario, HardwareProfile, ModelShape, ScenarioSource]:
    """The validated scenario, its profile (hardware_overrides applied), its model, and where
    its keys are written. What needs a built system is checked above the loader, by the
    pipeline (hwsim/pipeline.py: check, then cost, which rehearses serving)."""
    doc = load_yaml_file(scenario_path(path) if path else default_scenario_path())
    if doc.data is None:
        doc.data = {}
    if not isinstance(doc.data, dict):
        raise ConfigError("expected a mapping at the top level", file=doc.source, line=1)
    apply_overrides(doc.data, sets or [], doc)
    overridden = frozenset(getattr(doc, "overridden", set()))
    try:
        cfg = _validated(doc)
        # Elaborate names now, so a misspelt profile or model points at its scenario line.
        loaded = {}
        for key, loader in (("hardware", load_profile), ("model", load_model)):
            try:
                loaded[key] = loader(getattr(cfg, key))
            except ConfigError as exc:
                if exc.key != key:
                    raise
                raise ConfigError(exc.message, file=doc.source, line=doc.line_of([key]), key=key) from None
        try:
            loaded["hardware"] = apply_hardware_overrides(loaded["hardware"], cfg.hardware_overrides)
        except ConfigError as exc:
            raise error_at(doc, exc.key, exc.message) from None
        for key, problem in cross_checks(cfg, loaded["hardware"], loaded["model"]):
            raise error_at(doc, key, problem)
        return cfg, loaded["hardware"], loaded["model"], ScenarioSource(doc, overridden)
    except ConfigError as exc:
        raise _from_set(exc, overridden) from None


def load_scenario(path: str | Path | None, sets: list[str] | None = None) -> Scenario:
    """The validated scenario alone (read_scenario's first part)."""
    return read_scenario(path, sets)[0]


def _from_set(exc: ConfigError, overridden: frozenset[str]) -> ConfigError:
    """`exc`, said of --set when the key it is about came from an override."""
    if exc.key and any(o == exc.key or o.startswith(exc.key + ".") for o in overridden):
        return ConfigError(exc.message, file="--set", key=exc.key)
    return exc


MIN_LOCKED_CLOCK_MHZ = 100      # a profile without a power block: no SM clock is set lower
WHAT_IF_SOURCE = "what-if override in the scenario (hardware_overrides)"


def draft_model(cfg: Scenario) -> ModelShape | None:
    """The model a speculative scenario's draft names (workload.speculative.draft), read once when
    the scenario is loaded; None where it names none. A bad name is said at that key."""
    from hwsim.config.scenario import DraftSpeculation
    spec = cfg.workload.speculative
    if not isinstance(spec, DraftSpeculation) or not spec.tokens:
        return None
    try:
        return load_model(spec.draft)
    except ConfigError as exc:
        raise ConfigError(exc.message, key="workload.speculative.draft") from None


def apply_hardware_overrides(profile: HardwareProfile, overrides: dict[str, float]) -> HardwareProfile:
    """The profile with some numbers replaced (what-if studies); each keeps a `source` saying so."""
    if not overrides:
        return profile
    data = profile.model_dump(mode="python")
    for path, value in overrides.items():
        node = data
        parts = path.split(".")
        for part in parts[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
            if node is None:
                break
        leaf = node.get(parts[-1]) if isinstance(node, dict) else None
        if not isinstance(leaf, dict) or "value" not in leaf:
            raise ConfigError(f"{path!r} is not a number of the hardware profile",
                              key=f"hardware_overrides.{path}")
        if isinstance(leaf["value"], int) and isinstance(value, float) and value.is_integer():
            value = int(value)          # overrides are read as numbers; a count stays a whole one
        leaf["value"] = value
        leaf["source"] = WHAT_IF_SOURCE
    try:
        profile = HardwareProfile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"] if p != "value")
        raise ConfigError(f"{err['msg']}", key=f"hardware_overrides.{loc}") from None
    for key, problem in [*profile_problems(data), *value_problems(profile)]:
        raise ConfigError(problem, key=f"hardware_overrides.{key}" if key in overrides else "hardware_overrides")
    return profile


def cross_checks(cfg: Scenario, profile: HardwareProfile, model: ModelShape):
    """Problems that only show once the scenario meets its profile's and model's numbers: (key,
    message). What needs the system built (weight formats a kernel runs, disaggregated tiers in
    a topology, the cost) is checked above the loader: hwsim/checks.py, hwsim/cost.py."""
    kv = cfg.kv_cache
    head_dim = getattr(model.attention, "kv_lora_rank", 0) or model.attention.head_dim
    clock = cfg.runtime.sm_clock
    if not isinstance(clock, str):
        top = profile.sm.clock_mhz.value
        low = profile.power.min_clock_mhz.value if profile.power else MIN_LOCKED_CLOCK_MHZ
        if not low <= clock <= top:
            yield "runtime.sm_clock", (f"a locked clock of {clock:g} MHz is outside what '{profile.name}' "
                                       f"can run at ({low:g} to {top:g} MHz)")
    yield from kernel_problems(cfg, profile)
    yield from moe_schedule_problems(cfg)
    yield from hf_import.context_problems(cfg.model, longest_context(cfg.workload))   # a config.json's own limit
    if not cfg.workload.serving and kv.bits < 16:
        longest = cfg.workload.context_tokens + cfg.workload.decode_steps
        kept = kv.sinks.tokens + kv.recent.tokens
        if kept >= longest and kept > 0:
            yield "kv_cache.sinks.tokens", (f"{kv.sinks.tokens} sink and {kv.recent.tokens} recent tokens "
                                            f"keep every one of the {longest} tokens of the context at full "
                                            "width: nothing would be stored at kv_cache.bits")
    yield from kv.problems(head_dim, profile.sm.shared_memory_kib.value * 1024)


def dump_yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False)
