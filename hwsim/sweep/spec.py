"""Sweep specs: a base scenario plus factors; their Cartesian product, filtered, is the study.

    name: subbyte-decoder
    base: kv-quant-sweep-base.yaml        # a path (relative to this file) or an inline mapping
    factors:
      - key: kv_cache.bits                # one dotted key ...
        values: [16, 8, 4, 2]
      - keys: [hardware, kv_cache.dequant]  # ... or several keys that vary together
        values: [[h200-sxm, software], [h200-decoder, decoder]]
    filter: "p['kv_cache.bits'] < 16 or p['hardware'] == 'h200-sxm'"   # optional

Each point is identified by a stable hash of its fully resolved scenario, so a resumed sweep
recognises the points it already has.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from hwsim.config.load import load_model, load_profile, validate
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
    name: str = "sweep"
    description: str = ""
    base: str | dict = Field(description="base scenario: a path relative to the sweep file, or a mapping")
    factors: list[Factor] = Field(min_length=1)
    filter: str | None = None


def point_hash(resolved: dict) -> str:
    return hashlib.sha256(json.dumps(resolved, sort_keys=True).encode()).hexdigest()[:16]


def _set(data: dict, dotted: str, value) -> None:
    node = data
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def load_sweep(path: Path) -> tuple[SweepSpec, list[dict]]:
    """The spec and its points: [{"hash", "factors", "scenario" (resolved dict)}]."""
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
    points = []
    for combo in itertools.product(*(f.settings() for f in spec.factors)):
        factors: dict[str, Any] = {}
        for setting in combo:
            factors.update(setting)
        if spec.filter and not _keep(spec.filter, factors, path, doc):
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
        points.append({"hash": point_hash(resolved), "factors": factors, "scenario": resolved})
    if not points:
        raise ConfigError("the filter drops every point", file=str(path), line=doc.line_of(["filter"]),
                          key="filter")
    _check_names(points, path, doc)
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


def _keep(expr: str, factors: dict, path: Path, doc: LoadedYaml) -> bool:
    try:
        return bool(eval(expr, {"__builtins__": {}}, {"p": factors}))   # noqa: S307 (a user's own spec)
    except Exception as exc:   # noqa: BLE001 - any error in the user's expression is reported
        raise ConfigError(f"filter failed: {exc!r}", file=str(path), line=doc.line_of(["filter"]),
                          key="filter") from None
