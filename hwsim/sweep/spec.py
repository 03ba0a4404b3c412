"""Sweep specs: a base scenario plus factors; their Cartesian product, filtered, is the study.

    name: subbyte-decoder
    base: kv-quant-sweep-base.yaml        # a path (relative to this file) or an inline mapping
    factors:
      - key: kv_cache.bits                # one dotted key ...
        values: [16, 8, 4, 2]
      - keys: [hardware, kv_cache.dequant]  # ... or several keys that vary together
        values: [[h200-sxm, software], [h200-decoder, decoder]]
    filter: "p['kv_cache.bits'] < 16 or hardware == 'h200-sxm'"   # optional (hwsim.config.safe_expr)

Each point is identified by a stable hash of its fully resolved scenario and of the content of
every input (the profile and model as loaded and shipped to the workers, the trace files, the
simulator's version and source; hwsim.config.fingerprint), so a resumed sweep recognises the
points it already has and an edited profile or model makes old points stale.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from hwsim import pipeline
from hwsim.config.fingerprint import fingerprint, point_key, sha256_bytes, sha256_file
from hwsim.config.load import apply_hardware_overrides, load_model, load_profile, validate
from hwsim.config.names import SafeName
from hwsim.config.safe_expr import ExprError, Filter
from hwsim.config.scenario import Scenario
from hwsim.config.strict import Strict
from hwsim.config.yaml_lines import LoadedYaml, load_yaml_file
from hwsim.errors import ConfigError


class Factor(Strict):
    key: str | None = None
    keys: list[str] | None = None
    values: list[Any] = Field(min_length=1)

    @model_validator(mode="after")
    def _check(self):
        if (self.key is None) == (self.keys is None):
            raise ValueError("a factor has either key or keys")
        if self.keys is not None:
            for v in self.values:
                if not isinstance(v, list) or len(v) != len(self.keys):
                    raise ValueError(f"each value of a coupled factor lists {len(self.keys)} values")
        return self

    @property
    def names(self) -> list[str]:
        return [self.key] if self.key else list(self.keys)

    def settings(self) -> list[dict[str, Any]]:
        if self.key:
            return [{self.key: v} for v in self.values]
        return [dict(zip(self.keys, v, strict=True)) for v in self.values]


class SweepSpec(Strict):
    name: SafeName = "sweep"
    description: str = ""
    base: str | dict = Field(description="base scenario: a path relative to the sweep file, or a mapping")
    factors: list[Factor] = Field(min_length=1)
    filter: str | None = None


def _set(data: dict, dotted: str, value, path: Path, doc: LoadedYaml) -> None:
    node = data
    parts = dotted.split(".")
    for i, part in enumerate(parts[:-1]):
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"'{'.'.join(parts[:i + 1])}' of the base scenario is not a mapping",
                              file=str(path), line=doc.line_of(["factors"]), key=dotted)
    node[parts[-1]] = value


# A study of more points is a typo or a job for several sweeps: at about a second a point it
# is hours of simulation, and checking its points before any starts takes ~1.3 ms each.
MAX_SWEEP_POINTS = 20_000


def load_sweep(path: Path, cost_limits: tuple | None = None) -> tuple[SweepSpec, list[dict]]:
    """The spec and its points: [{"hash", "factors", "scenario" (resolved dict), "inputs",
    "profile", "model"}]. Every point is checked here as a single run's scenario is at load
    (schema, hardware overrides, profile and model names, cross-checks), so a bad one fails the
    spec before any worker starts. The profile (with its overrides) and the model are read once
    here and shipped with the point: every worker simulates what was hashed, even if a file is
    edited while the sweep runs. With `cost_limits` (max wall s, max GB) a point estimated above
    them is refused."""
    doc = load_yaml_file(path)
    spec = validate(SweepSpec, doc)
    base_doc = _base(spec, path, doc)
    n = math.prod(len(f.values) for f in spec.factors)
    if n > MAX_SWEEP_POINTS:
        raise ConfigError(f"{n:,} combinations of factor values (at most {MAX_SWEEP_POINTS:,}); "
                          "split the study", file=str(path), line=doc.line_of(["factors"]), key="factors")
    keep = _filter(spec, path, doc)
    resolver = _Resolver(path, doc)
    points = []
    for combo in itertools.product(*(f.settings() for f in spec.factors)):
        factors: dict[str, Any] = {}
        for setting in combo:
            factors.update(setting)
        if keep is not None and not _keep(keep, factors, path, doc):
            continue
        data = json.loads(json.dumps(base_doc.data or {}))
        for key, value in factors.items():
            _set(data, key, value, path, doc)
        point_doc = LoadedYaml(data, base_doc.key_lines, base_doc.source)
        try:
            cfg = validate(Scenario, point_doc)
        except ConfigError as exc:
            where = f" (factors {factors})"
            raise ConfigError(exc.message + where, file=str(path), line=doc.line_of(["factors"]),
                              key=exc.key) from None
        resolved = cfg.model_dump(mode="json")
        loaded, profile, model, content = resolver.inputs(cfg, factors)
        inputs = fingerprint(resolved, sha_of=resolver.file_sha)
        points.append({"hash": point_key(resolved, content, inputs), "factors": factors, "scenario": resolved,
                       "inputs": inputs, "profile": profile, "model": model, "loaded": loaded})
    if not points:
        raise ConfigError("the filter drops every point", file=str(path), line=doc.line_of(["filter"]),
                          key="filter")
    if cost_limits is not None:
        _check_costs(points, cost_limits, path, doc)
    for p in points:
        del p["loaded"]
    return spec, points


def _base(spec: SweepSpec, path: Path, doc: LoadedYaml) -> LoadedYaml:
    """The base scenario, a mapping, read from its file (relative to the spec) or inline."""
    if isinstance(spec.base, str):
        base_path = (path.parent / spec.base) if not Path(spec.base).is_absolute() else Path(spec.base)
        if not base_path.exists():
            raise ConfigError(f"base scenario not found: {base_path}", file=str(path),
                              line=doc.line_of(["base"]), key="base")
        base_doc = load_yaml_file(base_path)
    else:
        base_doc = LoadedYaml(spec.base, {}, str(path))
    if base_doc.data is not None and not isinstance(base_doc.data, dict):
        raise ConfigError(f"the base scenario {base_doc.source} is not a YAML mapping of scenario keys",
                          file=str(path), line=doc.line_of(["base"]), key="base")
    return base_doc


class _Resolver:
    """Each distinct profile (with its overrides) and model of a sweep, loaded, checked against
    each point's scenario, and hashed once; and each input file hashed once."""

    def __init__(self, path: Path, doc: LoadedYaml):
        self.path, self.doc = path, doc
        self.profiles: dict[tuple, tuple] = {}
        self.models: dict[str, tuple] = {}
        self.files: dict[str, str | None] = {}

    def file_sha(self, path: Path) -> str | None:
        if str(path) not in self.files:
            self.files[str(path)] = sha256_file(path)
        return self.files[str(path)]

    def _fail(self, exc: ConfigError, factors: dict, key: str | None = None):
        line = self.doc.line_of(["factors"]) or self.doc.line_of(["base"])
        return ConfigError(f"{exc.message} (factors {factors})", file=str(self.path), line=line,
                           key=key or exc.key)

    def inputs(self, cfg: Scenario, factors: dict) -> tuple[pipeline.LoadedScenario, dict, dict, dict]:
        """The point as the pipeline takes it, checked; its profile and model as shipped to the
        workers, and the hash of their content."""
        overrides = tuple(sorted(cfg.hardware_overrides.items()))
        try:
            if (cfg.hardware, overrides) not in self.profiles:
                profile = apply_hardware_overrides(load_profile(cfg.hardware), cfg.hardware_overrides)
                self.profiles[cfg.hardware, overrides] = (profile, _content(profile))
            if cfg.model not in self.models:
                model = load_model(cfg.model)
                self.models[cfg.model] = (model, _content(model))
        except ConfigError as exc:
            if exc.file is not None:          # a problem inside the profile or model file itself
                raise
            raise self._fail(exc, factors) from None
        (profile, profile_dump), (model, model_dump) = self.profiles[cfg.hardware, overrides], self.models[cfg.model]
        try:
            loaded = pipeline.LoadedScenario(cfg, profile, model)     # its draft model read here
        except ConfigError as exc:
            raise self._fail(exc, factors) from None
        for key, problem in pipeline.problems(loaded):
            raise self._fail(ConfigError(problem, key=key), factors)
        return loaded, profile_dump[0], model_dump[0], {"profile": profile_dump[1], "model": model_dump[1]}


def _content(obj) -> tuple[dict, str]:
    dump = obj.model_dump(mode="json")
    return dump, sha256_bytes(json.dumps(dump, sort_keys=True).encode())


def _check_costs(points: list[dict], cost_limits: tuple, path: Path, doc: LoadedYaml) -> None:
    """Refuse a point that alone would take hours or many GB (hwsim.cost)."""
    for p in points:
        try:
            pipeline.cost(p["loaded"], cost_limits)
        except ConfigError as exc:
            raise ConfigError(f"point {p['factors']}: {exc.message}", file=str(path),
                              line=doc.line_of(["factors"]), key=exc.key) from None


def _filter(spec: SweepSpec, path: Path, doc: LoadedYaml) -> Filter | None:
    """The spec's filter, parsed and checked against the factor names (never eval'd)."""
    if spec.filter is None:
        return None
    names = {n for f in spec.factors for n in f.names}
    try:
        return Filter(spec.filter, names)
    except ExprError as exc:
        raise ConfigError(f"filter: {exc}", file=str(path), line=doc.line_of(["filter"]), key="filter") from None


def _keep(keep: Filter, factors: dict, path: Path, doc: LoadedYaml) -> bool:
    try:
        return keep(factors)
    except ExprError as exc:
        raise ConfigError(f"filter failed on factors {factors}: {exc}", file=str(path),
                          line=doc.line_of(["filter"]), key="filter") from None
