"""The YAML files hwsim reads by name: where profiles, models and scenarios are found, and the
validated profile or model of a file, read once. Below the scenario loader (hwsim/config/load.py)
and the topologies (hwsim/parallel/topology.py), which both read files this way.

Every user error becomes one ConfigError naming the file, the line and the dotted key path.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from hwsim.config.limits import model_problems, profile_problems, value_problems
from hwsim.config.profile import HardwareProfile
from hwsim.config.variants import TAG_MARK
from hwsim.config.yaml_lines import LoadedYaml, load_yaml_text
from hwsim.errors import ConfigError
from hwsim.io.bounded import LIMITS, read_text
from hwsim.model import hf_import
from hwsim.model.shapes import MODEL_DIR, ModelShape

REPO_ROOT = Path(__file__).resolve().parents[2]


# hwsim/data: the models, and in an installed wheel copies of the repository's scenarios/ and
# hardware_profiles/ (setup.py copies them at build time; the top-level folders stay the source)
PACKAGE_DATA = Path(__file__).resolve().parents[1] / "data"


def search_dirs(kind: str) -> list[Path]:
    """Where profiles and scenarios named without a path are looked up, first match wins:
    $HWSIM_HOME/<kind>, ./<kind>, the source tree's <kind> (a clone or an editable install),
    and the copies an installed wheel ships in hwsim/data/<kind>. README, "Installing"."""
    roots = [Path(os.environ["HWSIM_HOME"])] if os.environ.get("HWSIM_HOME") else []
    roots += [Path.cwd(), REPO_ROOT, PACKAGE_DATA]
    return [r / kind for r in roots]


def _find(name: str, kind: str) -> Path | None:
    p = Path(name)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return p
    for d in search_dirs(kind):
        cand = d / f"{name}.yaml"
        if cand.exists():
            return cand
    return None


def scenario_path(arg: str | Path) -> Path:
    """A scenario or sweep spec given on the command line: a path to a file, or the name of
    one that hwsim ships (`voice-agent`, or `voice-agent.yaml`), looked up like a profile."""
    p = Path(arg)
    if p.exists() or len(p.parts) != 1:
        return p                         # a path: load_yaml_file reads it or says what is wrong
    found = _find(p.stem if p.suffix in (".yaml", ".yml") else p.name, "scenarios")
    if found is None:
        raise ConfigError("file not found, and no scenario of that name (`hwsim list` shows them)",
                          file=str(p))
    return found


def named_yaml(kind: str) -> dict[str, Path]:
    """Every <name>.yaml of `kind` found by search_dirs, name -> the file a lookup picks."""
    found: dict[str, Path] = {}
    for d in search_dirs(kind):
        if d.is_dir():
            for path in sorted(d.glob("*.yaml")):
                found.setdefault(path.stem, path)
    return dict(sorted(found.items()))


def default_scenario_path() -> Path:
    found = _find("default", "scenarios")
    if found is None:
        raise ConfigError("no scenarios/default.yaml found (run from the repository or set HWSIM_HOME)")
    return found


def validate(model: type[BaseModel], doc: LoadedYaml) -> Any:
    if not isinstance(doc.data, dict):
        raise ConfigError("expected a mapping at the top level", file=doc.source, line=1)
    try:
        obj = model.model_validate(doc.data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = [str(p) for p in err["loc"] if not str(p).startswith(("function-after", TAG_MARK))]
        msg = err["msg"]
        kind = next((str(p)[len(TAG_MARK):] for p in reversed(err["loc"]) if str(p).startswith(TAG_MARK)), None)
        if err["type"] == "extra_forbidden":
            msg = f"unknown key of {kind.replace('=', ' ')}" if kind else "unknown key"
        elif err["type"] == "missing":
            msg = "required key is missing"
        if "input" in err and err["type"] not in ("missing", "extra_forbidden") and not isinstance(err["input"], dict):
            msg += f" (got {err['input']!r})"
        more = f" (and {len(exc.errors()) - 1} more problem(s))" if len(exc.errors()) > 1 else ""
        # a key missing at the top level is written nowhere: the file's first line stands for it
        line = doc.line_of(loc) or (1 if err["type"] == "missing" else None)
        raise ConfigError(msg + more, file=doc.source, line=line, key=".".join(loc)) from None
    for key, problem in value_problems(obj):
        raise error_at(doc, key, problem)
    return obj


def error_at(doc: LoadedYaml, key: str, message: str) -> ConfigError:
    """An error about `key` of a loaded file, at the line of the key or of its nearest written
    parent; a key the file does not write at all (its default applies) is said so, at line 1."""
    line = doc.line_of(key.split("."))
    if line is None:
        top = key.split(".")[0]
        return ConfigError(f"{message} ({top} is not written in this file: its default applies)",
                           file=doc.source, line=1, key=key)
    return ConfigError(message, file=doc.source, line=line, key=key)


def profile_path(name: str) -> Path | None:
    return _find(name, "hardware_profiles")


def model_path(name: str) -> Path:
    p = Path(name)
    if hf_import.is_hf_path(name):                      # a Hugging Face config.json (issue 46)
        return p / hf_import.CONFIG if p.is_dir() else p
    return p if p.suffix in (".yaml", ".yml") and p.exists() else MODEL_DIR / f"{name}.yaml"


# Validated profiles and models by (kind, path, file bytes), at most _LOADED_MAX: a command
# reads the same ones several times (the scenario's checks, build, each validate row), and
# parsing and validating one takes 20-40 ms. Keyed by the content, an edited file is read anew.
# The objects are shared: nothing changes one once loaded (overrides make a copy).
# Process-wide by decision (issue 32): a pure function of the file's bytes, it holds no state
# of a run, and the callers that ask again (checks, build, cost, validate's rows, a sweep's
# points) share no object to own it; bounded by _LOADED_MAX.
_LOADED: dict[tuple, Any] = {}
_LOADED_MAX = 64


def _once(kind: str, path: Path, load):
    """load(doc) of the file's text, read once: what is parsed is what the key holds, even if
    the file is edited meanwhile (a sweep's profile, edited while it runs)."""
    text = read_text(path, LIMITS["yaml"])
    key = (kind, str(path), text)
    if key not in _LOADED:
        if len(_LOADED) >= _LOADED_MAX:
            _LOADED.clear()
        _LOADED[key] = load(load_yaml_text(text, str(path)))
    return _LOADED[key]


def load_profile(name: str) -> HardwareProfile:
    path = profile_path(name)
    if path is None:
        known = ", ".join(builtin_profiles()) or "none found"
        raise ConfigError(f"unknown hardware profile '{name}' (known: {known})", key="hardware")
    return _once("profile", path, _load_profile)


def _load_profile(doc: LoadedYaml) -> HardwareProfile:
    profile = validate(HardwareProfile, doc)
    for key, problem in profile_problems(profile.model_dump(mode="python")):
        raise error_at(doc, key, problem)
    return profile


def load_model(name: str) -> ModelShape:
    if hf_import.is_hf_path(name):                      # read afresh: a JSON parse takes a millisecond
        return hf_import.load(name)
    path = model_path(name)
    if not path.exists():
        from hwsim.model.shapes import builtin_models
        raise ConfigError(f"unknown model '{name}': give a built-in name ({', '.join(builtin_models())}) "
                          f"or a model-shape YAML file (.yaml: layers, hidden, vocab, attention, ffn or moe, "
                          f"source: docs/models.md; hwsim/data/models/ holds examples), not a "
                          f"Hugging Face config.json", key="model")
    return _once("model", path, _load_model)


def _load_model(doc: LoadedYaml) -> ModelShape:
    for key, problem in model_problems(doc.data if isinstance(doc.data, dict) else {}):
        raise error_at(doc, key, problem)
    return validate(ModelShape, doc)


def builtin_profiles() -> list[str]:
    return list(named_yaml("hardware_profiles"))
