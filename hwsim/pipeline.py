"""One pipeline for every command, sweep point, what-if and validation row:

    load -> check -> cost -> build -> run -> manifest

as desmod's `simulate(config, top)` is the one path every caller of a simulation goes through.
A scenario is loaded once into a LoadedScenario: the validated config, its profile (its
hardware_overrides applied), its model, and where its keys are written (ScenarioSource: the
YAML line map and the keys --set gave), so an error any later stage finds names the file, the
line and the key path. A scenario made in code (a sweep point, a validation row, a what-if's
changed one) carries no source: its errors name the key, and the caller says where it came
from. Each stage is a function of the LoadedScenario; nothing is kept at module level.

The manifests every command writes are made here (run_manifest, whatif_manifest,
sweep_manifest) and written by one writer (hwsim/io/bundle.py write_manifest).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from hwsim import checks
from hwsim.config.fingerprint import fingerprint
from hwsim.config.load import (ScenarioSource, apply_hardware_overrides, cross_checks, draft_model,
                               load_model, load_profile, read_scenario, scenario_path)
from hwsim.config.profile import HardwareProfile
from hwsim.config.scenario import Scenario
from hwsim.cost import Cost, check_cost
from hwsim.errors import ConfigError
from hwsim.model.blocks import moe_schedule_problems
from hwsim.model.shapes import ModelShape
from hwsim.provenance import provenance

DEFAULT_FILE = "scenarios/default.yaml"      # what a manifest names when no scenario was given


@dataclass(frozen=True)
class LoadedScenario:
    """A scenario and what it was resolved against, loaded once and handed to every stage."""
    cfg: Scenario
    profile: HardwareProfile             # its hardware_overrides applied
    model: ModelShape
    file: str = ""                       # the scenario file as a manifest names it ("": made in code)
    sets: tuple[str, ...] = ()           # the --set overrides it was loaded with
    source: ScenarioSource | None = None     # where its keys are written (None: made in code)
    # its speculative draft model, read once here (None: no draft model): build and run open no
    # file by name (session 21)
    draft: ModelShape | None = field(default=None, init=False)

    def __post_init__(self):
        try:
            object.__setattr__(self, "draft", draft_model(self.cfg))
        except ConfigError as exc:
            raise self.locate(exc) from None

    def locate(self, exc: ConfigError) -> ConfigError:
        """`exc` (found after loading, naming a key alone) at this scenario's file and line."""
        return self.source.locate(exc) if self.source is not None else exc

    @contextmanager
    def located(self):
        """Every ConfigError raised inside, located in this scenario (LoadedScenario.locate)."""
        try:
            yield self
        except ConfigError as exc:
            raise self.locate(exc) from None

    def _at(self, exc: ConfigError) -> ConfigError:
        return self.source.at(exc) if self.source is not None else exc


def load(path: str | Path | None, sets: list[str] | tuple[str, ...] = ()) -> LoadedScenario:
    """A scenario file (None: scenarios/default.yaml) with --set overrides, validated against
    its profile and model (hwsim/config/load.py)."""
    cfg, profile, model, source = read_scenario(path, list(sets))
    file = str(scenario_path(path)) if path else DEFAULT_FILE
    return LoadedScenario(cfg, profile, model, file, tuple(sets), source)


def from_config(cfg: Scenario, profile: HardwareProfile | None = None,
                model: ModelShape | None = None) -> LoadedScenario:
    """A scenario made in code; its profile and model read from their files unless given."""
    profile = profile or apply_hardware_overrides(load_profile(cfg.hardware), cfg.hardware_overrides)
    return LoadedScenario(cfg, profile, model or load_model(cfg.model))


def problems(loaded: LoadedScenario):
    """(key, message) of each way the scenario cannot run: against its profile's and model's
    numbers (the loader's cross-checks), then as a system (hwsim/checks.py)."""
    yield from cross_checks(loaded.cfg, loaded.profile, loaded.model)
    yield from checks.problems(loaded.cfg, loaded.profile, loaded.model, loaded.draft)


def check(loaded: LoadedScenario) -> None:
    """The system checks of a loaded scenario (the loader made the others; a scenario made in
    code, which no loader saw, has its MoE schedule checked here too): the first problem as a
    ConfigError at the scenario's line of its key (or --set). build() checks nothing again."""
    for key, problem in moe_schedule_problems(loaded.cfg):
        raise loaded._at(ConfigError(problem, key=key))
    for key, problem in checks.problems(loaded.cfg, loaded.profile, loaded.model, loaded.draft):
        raise loaded._at(ConfigError(problem, key=key))


def cost(loaded: LoadedScenario, limits: tuple[float | None, float | None] = (None, None)) -> Cost:
    """The run's estimated cost (hwsim/cost.py), refused above `limits` (max wall s, max GB;
    None: the default or the environment's) at the scenario's line of the key. A large serving
    run is rehearsed (hwsim/serving/rehearse.py) on a system this pipeline builds."""
    def rehearsal_system(cfg: Scenario):
        return checked_build(from_config(cfg, loaded.profile, loaded.model))
    try:
        return check_cost(loaded.cfg, loaded.model, *limits, build=rehearsal_system)
    except ConfigError as exc:
        if exc.file is not None:        # a file it read (a kernel trace, priced) names itself
            raise
        raise loaded._at(exc) from None


def build(loaded: LoadedScenario, **options):
    """The simulated system (hwsim/build.py build; `options`: sm_clock_hz, weights_layout)."""
    from hwsim.build import build as build_system, generate
    built = build_system(loaded.cfg, loaded.profile, loaded.model, draft=loaded.draft, **options)
    if generate(loaded.cfg.workload):       # transformers' generate() issues the steps (a serving-layer host)
        from hwsim.serving.engines.generate_host import issue_from_generate
        built.warnings.insert(0, issue_from_generate(loaded.cfg, built.model, built.schedule, built.gpus.streams))
    return built


def checked_build(loaded: LoadedScenario, **options):
    """The check stage, then the build (a scenario no command checked: a sweep point's, a
    what-if's changed one, a validation row's, a rehearsal's)."""
    check(loaded)
    return build(loaded, **options)


def run(loaded: LoadedScenario, built=None, **options):
    """The simulation (hwsim/run.py run_scenario; `options`: progress, every_interval,
    intervals, plans), on `built` or a system checked and built for it."""
    from hwsim.run import run_scenario
    return run_scenario(loaded.cfg, built if built is not None else checked_build(loaded), **options)


def system(cfg: Scenario, profile: HardwareProfile | None = None, model: ModelShape | None = None,
           **options):
    """A scenario made in code, loaded (from_config), checked and built: its refusals are
    ConfigErrors naming the key, as the checks word them."""
    return checked_build(from_config(cfg, profile, model), **options)


def run_config(cfg: Scenario, built=None, **options):
    """A scenario made in code run: on `built`, or on a system checked and built for it."""
    if built is not None:
        from hwsim.run import run_scenario
        return run_scenario(cfg, built, **options)
    return run(from_config(cfg), **options)


def summary(loaded: LoadedScenario, plans: dict | None = None) -> dict:
    """A run's summary alone, no busy intervals kept (a sweep point's, a what-if's): `plans`
    replayed where given (hwsim/whatif/reuse.py)."""
    return run(loaded, intervals=False, plans=plans).summary


def run_manifest(loaded: LoadedScenario, result, built, started_unix: float) -> dict:
    """A run bundle's manifest.json (hwsim/io/bundle.py adds its files and marker)."""
    resolved = loaded.cfg.model_dump(mode="json")
    return {
        "summary": result.summary,
        "scenario_file": loaded.file,
        "overrides": list(loaded.sets),
        "resolved_config": resolved,
        "hardware_profile": built.profile.model_dump(mode="json"),
        "model_shape": built.model.model_dump(mode="json"),
        "seed": loaded.cfg.seed,
        "started_unix": started_unix,
        "wall_s": result.run_summary.sim.wall_s,
        "inputs": fingerprint(resolved),
        "provenance": provenance(),
        "error": None,
    }


def whatif_manifest(loaded: LoadedScenario, result: dict, summary: dict | None) -> dict:
    """A what-if's manifest.json: the result, the unchanged run's summary, the resolved
    scenario, profile and provenance (`hwsim report` renders it)."""
    manifest = {**result, "scenario_file": loaded.file, "overrides": list(loaded.sets),
                "resolved_config": loaded.cfg.model_dump(mode="json"),
                "hardware_profile": loaded.profile.model_dump(mode="json"), "seed": loaded.cfg.seed,
                "provenance": provenance()}
    if summary is not None:
        manifest["summary"] = summary
    return manifest


def sweep_manifest(spec, spec_file: Path, summary: dict, plots: dict, points: list[dict]) -> dict:
    """A sweep folder's manifest.json: the spec, its points' factors and inputs, the figures."""
    return {"sweep": spec.model_dump(mode="json"), "spec_file": str(spec_file),
            "summary": summary, "plots": [str(p) for p in plots.values()],
            "points": {p["hash"]: {"factors": p["factors"], "inputs": p["inputs"]} for p in points},
            "provenance": provenance()}
