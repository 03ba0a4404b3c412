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
every input (profile, model and trace files, the simulator's version and source;
hwsim.config.fingerprint), so a resumed sweep recognises the points it already has and an
edited profile or model makes old points stale.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from hwsim.config.cost import check_cost
from hwsim.config.fingerprint import fingerprint, point_key
from hwsim.config.load import load_model, load_profile, validate
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


def point_hash(resolved: dict) -> str:
    return point_key(resolved)


def _set(data: dict, dotted: str, value) -> None:
    node = data
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def load_sweep(path: Path, cost_limits: tuple | None = None) -> tuple[SweepSpec, list[dict]]:
    """The spec and its points: [{"hash", "factors", "scenario" (resolved dict), "inputs"}].
    With `cost_limits` (max wall s, max GB) a point estimated above them is refused."""
    doc = load_yaml_file(path)
    spec = validate(SweepSpec, doc)
    if isinstance(spec.base, str):
        base_path = (path.parent / spec.base) if not Path(spec.base).is_absolute() else Path(spec.base)
        if not base_path.exists():
            raise ConfigError(f"base scenario not found: {base_path}", file=str(path),
                              line=doc.line_of(["base"]), key="base")
        base_doc = load_yaml_file(base_path)
    else:
        base_doc = LoadedYaml(spec.base, {}, str(path))
    keep = _filter(spec, path, doc)
    points = []
    for combo in itertools.product(*(f.settings() for f in spec.factors)):
        factors: dict[str, Any] = {}
        for setting in combo:
            factors.update(setting)
        if keep is not None and not _keep(keep, factors, path, doc):
            continue
        data = json.loads(json.dumps(base_doc.data or {}))
        for key, value in factors.items():
            _set(data, key, value)
        point_doc = LoadedYaml(data, base_doc.key_lines, base_doc.source)
        try:
            cfg = validate(Scenario, point_doc)
        except ConfigError as exc:
            where = f" (factors {factors})"
            raise ConfigError(exc.message + where, file=str(path), line=doc.line_of(["factors"]),
                              key=exc.key) from None
        resolved = cfg.model_dump(mode="json")
        points.append({"hash": point_hash(resolved), "factors": factors, "scenario": resolved,
                       "inputs": fingerprint(resolved), "config": cfg})
    if not points:
        raise ConfigError("the filter drops every point", file=str(path), line=doc.line_of(["filter"]),
                          key="filter")
    _check_names(points, path, doc)
    if cost_limits is not None:
        _check_costs(points, cost_limits, path, doc)
    for p in points:
        del p["config"]
    return spec, points


def _check_names(points: list[dict], path: Path, doc: LoadedYaml) -> None:
    """A misspelt profile or model is an error in the spec, not a failed point."""
    for key, loader in (("hardware", load_profile), ("model", load_model)):
        for name in sorted({p["scenario"][key] for p in points}):
            try:
                loader(name)
            except ConfigError as exc:
                raise ConfigError(exc.message, file=str(path), line=doc.line_of(["factors"]) or doc.line_of(["base"]),
                                  key=key) from None


def _check_costs(points: list[dict], cost_limits: tuple, path: Path, doc: LoadedYaml) -> None:
    """Refuse a point that alone would take hours or many GB (hwsim.config.cost)."""
    models = {}
    for p in points:
        cfg = p["config"]
        if cfg.model not in models:
            models[cfg.model] = load_model(cfg.model)
        try:
            check_cost(cfg, models[cfg.model], *cost_limits)
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
