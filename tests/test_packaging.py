"""After `pip install .`, profiles and scenarios are found from any working folder."""

import ast
import functools
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import hwsim.config.files as files
import hwsim.config.load as load

REPO = Path(__file__).resolve().parents[1]


def test_profiles_are_found_in_the_package_data(tmp_path, monkeypatch):
    data = tmp_path / "site" / "hwsim" / "data"
    shutil.copytree(REPO / "hardware_profiles", data / "hardware_profiles")
    monkeypatch.setattr(files, "REPO_ROOT", tmp_path / "no-source-tree")
    monkeypatch.setattr(files, "PACKAGE_DATA", data)
    monkeypatch.delenv("HWSIM_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    assert files.load_profile("h200-sxm").name
    assert "h200-sxm" in files.builtin_profiles()
    from hwsim.parallel.topology import load_topology
    assert load_topology("hgx-h200-8").chip == "h200-sxm"        # topologies too (issue 18)
    monkeypatch.setattr(files, "PACKAGE_DATA", tmp_path / "empty")
    with pytest.raises(files.ConfigError, match="known: none found"):
        files.load_profile("h200-sxm")


def test_a_scenario_is_found_by_name_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("HWSIM_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    assert load.scenario_path("voice-agent") == REPO / "scenarios" / "voice-agent.yaml"
    assert load.scenario_path("voice-agent.yaml") == REPO / "scenarios" / "voice-agent.yaml"
    assert load.load_scenario("voice-agent").name == "voice-agent"
    with pytest.raises(files.ConfigError, match="no scenario of that name"):
        load.scenario_path("no-such-scenario")
    with pytest.raises(files.ConfigError, match="file not found"):
        load.load_scenario("sub/voice-agent.yaml")      # a path is never looked up by name


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to list the tracked files")
def test_the_wheel_ships_the_profiles_scenarios_and_models(tmp_path):
    src = tmp_path / "src"
    files = subprocess.run(["git", "-C", str(REPO), "ls-files", "pyproject.toml", "setup.py", "MANIFEST.in",
                            "README.md", "hwsim", "hardware_profiles", "scenarios"],
                           capture_output=True, text=True).stdout.split()
    assert "setup.py" in files
    for f in files:
        if (REPO / f).is_file():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO / f, src / f)
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                          "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    wheel = zipfile.ZipFile(next((tmp_path / "dist").glob("hwsim-*.whl")))
    names = wheel.namelist()
    for folder in ("hardware_profiles", "hardware_profiles/topologies", "scenarios"):
        shipped = {Path(n).name for n in names if n.startswith(f"hwsim/data/{folder}/") and n.count("/") ==
                   folder.count("/") + 3}
        assert shipped >= {p.name for p in (REPO / folder).glob("*.yaml")}, folder
    assert "hwsim/data/models/mixtral-8x7b.yaml" in names
    assert not (src / "hwsim" / "data" / "scenarios").exists()     # copied into the build, not the source
    # installed (a pure-python wheel unpacked on the path) and run from a folder without
    # scenarios/: a scenario is found by name (issue 28)
    site = tmp_path / "site"
    wheel.extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "HWSIM_HOME"} | {"PYTHONPATH": str(site)}
    res = subprocess.run([sys.executable, "-m", "hwsim.cli", "run", "voice-agent", "--dry-run", "--json"],
                         cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    assert plan["scenario_file"] == str(site / "hwsim" / "data" / "scenarios" / "voice-agent.yaml")
    assert plan["resolved_config"]["name"] == "voice-agent"
    assert not any(elsewhere.iterdir())                             # a dry run writes nothing


# The imports a fresh `pip install '.[test]'` must satisfy (issue 28: a test imported scipy and
# another built a wheel, and CI passed only because its machine had both).
LOCAL_FOLDERS = ("calibration", "validation", "benchmarks", "docs", "tests")
SCRIPT_PATH = re.compile(r"(?:calibration|validation|benchmarks|docs)/\w+\.py")


def _imports(path: Path) -> tuple[set[str], set[str]]:
    """The top-level names `path` imports (not those a `try` falls back from: optional), and
    the repo's scripts it loads by path."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    guarded = {id(n) for t in ast.walk(tree) if isinstance(t, ast.Try) and any(
        h.type is None or isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError",
                                                                         "Exception") for h in t.handlers)
        for stmt in t.body for n in ast.walk(stmt)}
    names, scripts = set(), set()
    for node in ast.walk(tree):
        if id(node) in guarded:
            continue
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            scripts |= set(SCRIPT_PATH.findall(node.value))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):   # REPO / "calibration" / "x.py"
            parts = [n.value for n in (getattr(node.left, "right", None), node.right)
                     if isinstance(n, ast.Constant) and isinstance(n.value, str)]
            if len(parts) == 2 and parts[0] in LOCAL_FOLDERS and parts[1].endswith(".py"):
                scripts.add(f"{parts[0]}/{parts[1]}")
    return names, {s for s in scripts if (REPO / s).exists()}


def _third_party_imports(roots: list[Path], follow: bool = True) -> dict[str, set[str]]:
    """Every non-standard-library, non-local top-level import reachable from `roots`, with the
    files that import it; `follow`: through the repo's own scripts (calibration/, validation/, docs/,
    benchmarks/) that they import or load by path."""
    local = {"hwsim"} | {p.stem for folder in LOCAL_FOLDERS for p in (REPO / folder).glob("*.py")}
    todo, seen, found = list(roots), set(), {}
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        names, scripts = _imports(path)
        for name in names:
            if name in sys.stdlib_module_names or name == "__future__":
                continue
            if name not in local:
                found.setdefault(name, set()).add(str(path.relative_to(REPO)))
            elif follow:
                todo += [p for folder in LOCAL_FOLDERS if (p := REPO / folder / f"{name}.py").exists()]
        todo += [REPO / s for s in scripts] if follow else []
    return found


def _declared() -> dict[str, set[str]]:
    """The distributions pyproject.toml declares: `dependencies` and each extra, by name."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    groups = {"dependencies": project["dependencies"], **project["optional-dependencies"]}
    return {g: {_normal(re.match(r"[A-Za-z0-9._-]+", req).group()) for req in reqs} for g, reqs in groups.items()}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _distributions(module: str) -> set[str]:
    """The distributions that provide an import name (the name itself if none is installed)."""
    return {_normal(d) for d in _installed().get(module, [module])}


@functools.lru_cache(maxsize=1)
def _installed() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def test_every_import_of_hwsim_and_the_tests_is_declared():
    """hwsim/ imports only `dependencies`; tests/ (and the scripts they load) only those and
    the `test` extra, except a module a test skips without (pytest.importorskip), which an
    extra must name so the README can say how to run it."""
    declared = _declared()
    core, test = declared["dependencies"], declared["dependencies"] | declared["test"]
    extras = set().union(*declared.values())
    # the engine adapters (hwsim/serving/engines/) import their engine inside functions, behind its extra
    # (and the install check, hwsim/config/engine_install.py, which imports it lazily too)
    engines = REPO / "hwsim" / "serving" / "engines"
    install = REPO / "hwsim" / "config" / "engine_install.py"
    engine_files = sorted(engines.rglob("*.py")) + [install]
    core_files = [p for p in sorted((REPO / "hwsim").rglob("*.py")) if p not in engine_files]
    missing = {m: sorted(files) for m, files in _third_party_imports(core_files, follow=False).items()
               if not _distributions(m) & core}
    assert not missing, f"hwsim imports these undeclared in [project] dependencies: {missing}"
    missing = {m: sorted(files) for m, files in _third_party_imports(engine_files, follow=False).items()
               if not _distributions(m) & (core | declared["hf-engine"] | declared["sglang-engine"] | {"sglang"})}
    # (sglang itself is installed with --no-deps beside the sglang-engine extra: docs/serving.md)
    assert not missing, f"the engine adapters import these undeclared in the hf-engine or sglang-engine extra: {missing}"
    optional = {m for p in (REPO / "tests").glob("*.py")
                for m in re.findall(r"importorskip\(\"(\w+)", p.read_text(encoding="utf-8"))}
    missing = {m: sorted(files) for m, files in _third_party_imports(sorted((REPO / "tests").glob("*.py"))).items()
               if not _distributions(m) & (extras if m in optional else test)}
    assert not missing, f"the tests import these undeclared in the test extra: {missing}"
