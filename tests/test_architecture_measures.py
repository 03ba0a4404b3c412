"""The code-shape measures of benchmarks/architecture.py find what they claim to find."""

import importlib.util
import sys
from pathlib import Path

SPEC = importlib.util.spec_from_file_location(
    "architecture", Path(__file__).resolve().parents[1] / "benchmarks" / "architecture.py")
architecture = importlib.util.module_from_spec(SPEC)
sys.modules["architecture"] = architecture          # its dataclasses look their module up
SPEC.loader.exec_module(architecture)


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    pkg = tmp_path / "hwsim"
    for name, text in files.items():
        path = pkg / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return pkg


def test_a_lazy_import_does_not_hide_a_circle(tmp_path):
    pkg = _package(tmp_path, {
        "__init__.py": "",
        "a.py": "from hwsim.b import g\n",
        "b.py": "def g():\n    from hwsim import c\n",
        "c.py": "from .a import *\n",
        "d.py": "import hwsim.a\n",
    })
    modules = architecture.load_modules(pkg)
    assert architecture.import_circles(modules) == [["hwsim.a", "hwsim.b", "hwsim.c"]]
    assert modules["hwsim.b"].imports == {"hwsim.c": True}      # lazy
    assert modules["hwsim.a"].imports == {"hwsim.b": False}


def test_the_walk_follows_the_config_through_aliases_and_imports(tmp_path):
    pkg = _package(tmp_path, {
        "__init__.py": "",
        "run.py": ("from hwsim.build import build\nfrom hwsim import util\n"
                   "def run_scenario(cfg):\n    rt = cfg.runtime\n    build(rt)\n    util.unrelated(1)\n"),
        "build.py": "from hwsim.util import deep\ndef build(runtime):\n    deep(x=runtime.clock)\n",
        "util.py": "def deep(x):\n    return x\ndef unrelated(y):\n    return y\n",
    })
    walk = architecture.scenario_walk(architecture.load_modules(pkg), ("hwsim.run", "run_scenario", "cfg"))
    assert walk["files"] == 3 and walk["functions"] == 3 and walk["entries"] == 2


def test_the_walk_follows_objects_that_carry_the_config_and_their_methods(tmp_path):
    """`b = build(cfg)` carries it, `b.sched.step()` hands it on through the declared types, and a
    receiver of no declared type resolves only to a method one class defines."""
    pkg = _package(tmp_path, {
        "__init__.py": "",
        "run.py": ("from hwsim.build import build\n"
                   "def run_scenario(cfg):\n    b = build(cfg)\n    b.sched.step(1)\n"
                   "    thing = object()\n    thing.shared(b)\n"),
        "build.py": ("from hwsim.sched import Sched\nclass Built:\n    sched: Sched\n"
                     "    def __init__(self, sched):\n        self.sched = sched\n"
                     "def build(cfg) -> Built:\n    return Built(Sched(cfg.model))\n"),
        "sched.py": ("from hwsim.util import deep\nclass Sched:\n    def __init__(self, model):\n"
                     "        self.model = model\n    def step(self, n):\n        return deep(self.model)\n"
                     "    def shared(self, x):\n        return x\n"
                     "class Other:\n    def shared(self, x):\n        return x\n"),
        "util.py": "def deep(x):\n    return x\n",
    })
    walk = architecture.scenario_walk(architecture.load_modules(pkg), ("hwsim.run", "run_scenario", "cfg"))
    assert walk["file_list"] == ["hwsim/build.py", "hwsim/run.py", "hwsim/sched.py", "hwsim/util.py"]
    assert walk["functions"] == 6        # run_scenario, build, Built.__init__, Sched.__init__, step, deep


def test_imports_back_up_follow_the_layer_order(tmp_path):
    pkg = _package(tmp_path, {
        "__init__.py": "", "hw/__init__.py": "", "engine/__init__.py": "",
        "hw/device.py": "def f():\n    from hwsim.engine import timer\n",
        "engine/timer.py": "from hwsim.hw import device\n",
    })
    up = architecture.imports_back_up(architecture.load_modules(pkg))
    assert up["list"] == ["hwsim.hw.device -> hwsim.engine.timer"] and up["package_pairs"] == 1


def test_forks_count_parallel_tests_and_string_choices(tmp_path):
    """A string compared is a config choice where a schema's key can be set to it: a file's
    suffix or a step's phase is none."""
    pkg = _package(tmp_path, {
        "__init__.py": "",
        "x.py": ("def f(b, cfg, p, shape):\n    if b.parallel:\n        pass\n"
                 "    if cfg.moe.schedule == 'grouped' or cfg.kind in ('lru', 'lfu'):\n        pass\n"
                 "    if p.suffix in ('.yaml', '.yml') or shape.phase == 'decode':\n        pass\n"
                 "    return 1 if cfg.n == 2 else 0\n"),
    })
    counted = architecture.forks(architecture.load_modules(pkg))
    assert counted["if_parallel"] == 1 and counted["string_choice_comparisons"] == 2
    assert counted["string_choice_at"] == ["hwsim/x.py:4", "hwsim/x.py:4"]


def test_the_config_choices_are_the_schemas_words():
    """Literal fields of union members and of Literals generated from a registry count too."""
    words = architecture.config_choices()
    assert {"poisson", "gamma", "fused", "cudnn", "pinned-hot", "even", "settled"} <= words
    assert not {"decode", "prefill", ".yaml", "memcpy"} & words


def test_hwsim_itself_has_no_import_circle_and_no_long_engine_or_hw_function():
    """Issue 32: the loader does not reach build (lazily or not), the sweep's runner and groups
    do not import each other, and no function of hwsim/engine or hwsim/hw is over 60 lines."""
    modules = architecture.load_modules()
    assert architecture.import_circles(modules) == []
    assert architecture.long_functions(modules) == []


def test_hwsim_imports_nothing_back_up_the_layers():
    """Issue 42 (item 1): packages are layers. None left since session 21 (the SGLang import stubs
    sit with the engine install check, on the ground). hw/ imports neither the engine nor the model."""
    modules = architecture.load_modules()
    up = architecture.imports_back_up(modules)
    assert up["imports"] == 0, up["list"]
    for name, mod in modules.items():
        if name.startswith("hwsim.hw."):
            assert not [t for t in mod.imports if t.startswith(("hwsim.engine", "hwsim.model"))], name


def test_the_config_walk_never_climbs_to_a_higher_layer():
    """Issue 42 (session 21): the serving loop's speculation is the serving layer's own
    (serving/speculation.py), on a step's drafts and verification that sit below serving
    (hwsim/speculative.py): no call of a run climbs into a higher layer's file."""
    walk = architecture.scenario_walk(architecture.load_modules())
    assert walk["climbs_list"] == []
    assert architecture.layer_of("hwsim.speculative") < architecture.layer_of("hwsim.serving.loop")
