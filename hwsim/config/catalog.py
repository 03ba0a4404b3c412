"""`hwsim list`: what can be named without a path, found where a run looks names up
(hwsim.config.files.search_dirs; the models ship inside the package)."""

from __future__ import annotations

from pathlib import Path


def _is_sweep(path: Path) -> bool:
    """A sweep spec (docs/sweeps.md) has top-level `factors:`; a scenario never does."""
    try:
        with open(path, encoding="utf-8") as fh:
            return any(line.startswith("factors:") for line in fh)
    except (OSError, UnicodeDecodeError):
        return False


def catalog() -> dict[str, list[str]]:
    from hwsim.config.files import builtin_profiles, named_yaml
    from hwsim.config.scenario import KV_PRESETS
    from hwsim.model.shapes import builtin_models

    specs = named_yaml("scenarios")
    topologies = named_yaml("hardware_profiles/topologies")
    return {"profiles": builtin_profiles(), "topologies": list(topologies), "models": builtin_models(),
            "scenarios": [n for n, p in specs.items() if not _is_sweep(p)],
            "sweeps": [n for n, p in specs.items() if _is_sweep(p)],
            "presets": sorted(KV_PRESETS)}
