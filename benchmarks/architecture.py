"""Measures of the code's shape, read from the AST of hwsim/ (nothing of hwsim is run; the inert
rules are counted by importing hwsim.config.inert, the config choices by importing the schemas).

    python benchmarks/architecture.py [--json]

- imports back up: an import (lazy ones included) from a module to one of a higher layer, the
  layers being LAYERS below, ground first; counted as module pairs and as package pairs;
- import circles: strongly connected components of the graph of hwsim's own imports, lazy
  imports inside functions included (a lazy import hides a circle; it does not remove it);
- long functions: functions over 60 lines, in all of hwsim/ (and in hwsim/engine and hwsim/hw);
- forks: `if` tests that read something named `parallel`, and comparisons of an attribute with
  string constants of which one is a config choice (a word some schema key can be set to, read
  from the schemas' Literal fields: config_choices), compared by string rather than dispatched
  by type; a file's suffix, a numpy dtype's kind, a trace event's kind or a step's phase is no
  config choice (counted until session 20: 109 then, 70 of them choices);
- inert rules: the rules of hwsim/config/inert.py (a key that acts only under another's value);
- the pipeline written out: calls of its stages (load, system checks, cost, build, run; PIPELINE_STAGES)
  made outside hwsim/pipeline.py and the stages' own modules, by function; and the functions that
  write a manifest.json themselves (hwsim/io/bundle.py write_manifest is the one writer);
- the config walk: start at build's and run_scenario's `cfg` (the pipeline builds the system, then
  runs it: session 21 took the build out of run_scenario, and the walk keeps both, so that the
  measure stays the run's) and follow every call that hands the config on:
  an argument that reads it or anything derived from it (`rt = cfg.runtime`, `b = build(cfg)`,
  `self.schedule = Schedule(cfg, ...)`), and a method called on such a value (`b.gpus.simulate()`,
  `self.schedule.step()`: the method is entered with its `self` carrying the config). A callee is
  resolved through the caller's imports (functions, and classes: their `__init__`), and a method
  through the type the code declares for its receiver (`self`, an annotated parameter or field,
  a constructor's or an annotated function's result, `self.x` assigned one of those); a receiver
  of no declared type resolves only to a method name one class of hwsim defines. The measure
  issue 32 took followed only calls that received `cfg` by name, a lower bound.
  Reported: files and functions entered; entries (distinct calls from one file's function into
  another file's function, each returning to the file above it); re-entries (entries into a file
  beyond its first); climbs (calls into a file of a higher layer); the most entered files.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hwsim"
LONG_FUNCTION_LINES = 60
WALK_START = (("hwsim.build", "build", "cfg"), ("hwsim.run", "run_scenario", "cfg"))

# The layers, ground first: a module belongs to the layer of its longest prefix listed here.
# An import from a module to one of a higher layer runs back up (lazy imports counted: a lazy
# import hides the dependency, it does not remove it). Packages that hold two layers today
# (config/cost.py, io's bounding and atomic writes, the model's shapes and IR) are split by
# module, as the design wants them: the split is a statement of where each module belongs.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("ground: schemas, input bounding, atomic writes",
     ("hwsim", "hwsim.errors", "hwsim.rng", "hwsim.metrics", "hwsim.provenance", "hwsim.config",
      "hwsim.io.bounded", "hwsim.io.atomic", "hwsim.io.strict_json", "hwsim.io.folder_lock",
      "hwsim.model.shapes", "hwsim.model.hf_import",     # config.json -> ModelShape: a schema reader
      "hwsim.model.blocks")),     # the block registry: its names are the schema's choices
    ("model IR and formats", ("hwsim.model.kernel", "hwsim.model.ir", "hwsim.workload")),
    ("hw", ("hwsim.hw",)),
    ("engine", ("hwsim.engine",)),
    ("model schedule", ("hwsim.model",)),
    ("one GPU's pass", ("hwsim.step",)),               # many GPUs' pass (parallel/multi.py) uses its
    ("parallel", ("hwsim.parallel",)),                 # StepResult; a trace's collectives are
    ("trace import", ("hwsim.ktrace",)),               # re-timed with parallel's kernels
    ("build", ("hwsim.build", "hwsim.checks", "hwsim.summary", "hwsim.results", "hwsim.operators")),
    ("speculation", ("hwsim.speculative",)),           # a step's drafts and verification, on a
                                                       # Built: fixed-batch runs and serving ask it
    ("writers", ("hwsim.io", "hwsim.plots", "hwsim.report")),
    ("serving", ("hwsim.serving",)),
    ("run", ("hwsim.run", "hwsim.cost", "hwsim.speedups", "hwsim.pipeline")),
    ("what-if", ("hwsim.whatif",)),
    ("sweep and validation", ("hwsim.sweep", "hwsim.validate")),
    ("command line", ("hwsim.cli", "hwsim.launch")),
]


@dataclass
class Module:
    name: str
    path: Path
    rel: str                       # the path as the report shows it
    tree: ast.Module
    imports: dict[str, bool] = field(default_factory=dict)   # hwsim module -> lazy only
    names: dict[str, tuple[str, str]] = field(default_factory=dict)  # local name -> (module, attr)
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def load_modules(package: Path = PACKAGE) -> dict[str, Module]:
    modules = {}
    for path in sorted(package.rglob("*.py")):
        mod = Module(module_name(path, package.parent), path, str(path.relative_to(package.parent)),
                     ast.parse(path.read_text(), str(path)))
        modules[mod.name] = mod
    for mod in modules.values():
        _read_imports(mod, modules)
        mod.functions = {n.name: n for n in mod.tree.body
                         if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        mod.classes = {n.name: n for n in mod.tree.body if isinstance(n, ast.ClassDef)}
    return modules


def _resolve_from(mod: Module, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = mod.name.split(".")
    if mod.path.name != "__init__.py":
        base = base[:-1]
    base = base[:len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _read_imports(mod: Module, modules: dict[str, Module]) -> None:
    top_level = {id(n) for n in mod.tree.body}
    for node in ast.walk(mod.tree):
        lazy = id(node) not in top_level and not _under_type_checking(mod.tree, node)
        targets: list[str] = []
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("hwsim"):
                    targets.append(alias.name)
                    mod.names[alias.asname or alias.name] = (alias.name, "")
        elif isinstance(node, ast.ImportFrom):
            source = _resolve_from(mod, node)
            if not source.startswith("hwsim"):
                continue
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                target = sub if sub in modules else source
                targets.append(target)
                mod.names[alias.asname or alias.name] = (sub, "") if sub in modules \
                    else (source, alias.name)
        for target in targets:
            if target in modules and target != mod.name:
                mod.imports[target] = mod.imports.get(target, True) and lazy


def _under_type_checking(tree: ast.Module, node: ast.AST) -> bool:
    for stmt in tree.body:
        if isinstance(stmt, ast.If) and "TYPE_CHECKING" in ast.unparse(stmt.test):
            if any(child is node for child in ast.walk(stmt)):
                return True
    return False


def import_circles(modules: dict[str, Module]) -> list[list[str]]:
    """Tarjan's strongly connected components of size > 1."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in modules[v].imports:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(10_000)
    try:
        for v in modules:
            if v not in index:
                visit(v)
    finally:       # the caller's limit back (a test run in the same process parses deep input after)
        sys.setrecursionlimit(limit)
    return out


def long_functions(modules: dict[str, Module], packages=("hwsim.engine", "hwsim.hw")) -> list[dict]:
    """Functions over LONG_FUNCTION_LINES lines in `packages` (all of hwsim: ("hwsim",))."""
    found = []
    for mod in modules.values():
        if not (mod.name + ".").startswith(tuple(p + "." for p in packages)):
            continue
        for node in ast.walk(mod.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > LONG_FUNCTION_LINES:
                    found.append({"where": f"{mod.rel}:{node.lineno}",
                                  "function": node.name, "lines": lines})
    return sorted(found, key=lambda f: -f["lines"])


def _mentions(node: ast.AST, word: str) -> bool:
    return any((isinstance(n, ast.Name) and word in n.id) or
               (isinstance(n, ast.Attribute) and word in n.attr) for n in ast.walk(node))


# runtime.sm_clock's words: a validator of their own (hwsim/config/scenario.py _sm_clock), not a Literal
SM_CLOCK_WORDS = ("settled", "max")


def config_choices() -> frozenset[str]:
    """The words a config key can be set to: every Literal value of the schemas' fields (the
    scenario, a hardware profile, a model shape, a topology; union members and registries'
    generated Literals included), and runtime.sm_clock's."""
    import typing
    sys.path.insert(0, str(ROOT))
    from pydantic import BaseModel
    from hwsim.config.profile import HardwareProfile
    from hwsim.config.scenario import Scenario
    from hwsim.model.shapes import ModelShape
    from hwsim.parallel.topology import Topology
    words, seen = set(SM_CLOCK_WORDS), set()

    def walk(tp) -> None:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            if tp not in seen:
                seen.add(tp)
                for part in [*tp.__subclasses__(), *(f.annotation for f in tp.model_fields.values())]:
                    walk(part)
        elif typing.get_origin(tp) is typing.Literal:
            words.update(a for a in typing.get_args(tp) if isinstance(a, str))
        else:
            for a in typing.get_args(tp):
                walk(a)

    for root in (Scenario, HardwareProfile, ModelShape, Topology):
        walk(root)
    return frozenset(words)


def _is_string_choice(node: ast.Compare, choices: frozenset[str] | None = None) -> bool:
    """An attribute compared with string constants of which one is a config choice (`choices`,
    default config_choices()): a file's suffix, a trace event's kind or a step's phase is none."""
    sides = [node.left, *node.comparators]
    strings = [s for s in sides if isinstance(s, ast.Constant) and isinstance(s.value, str)
               or isinstance(s, (ast.Tuple, ast.Set, ast.List)) and s.elts
               and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in s.elts)]
    if not strings or not any(isinstance(s, ast.Attribute) for s in sides):
        return False
    words = {e.value for s in strings for e in ([s] if isinstance(s, ast.Constant) else s.elts)}
    return bool(words & (config_choices() if choices is None else choices))


def forks(modules: dict[str, Module]) -> dict:
    parallel_ifs, string_choices = [], []
    choices = config_choices()
    for mod in modules.values():
        rel = mod.rel
        for node in ast.walk(mod.tree):
            if isinstance(node, (ast.If, ast.IfExp)) and _mentions(node.test, "parallel"):
                parallel_ifs.append(f"{rel}:{node.lineno}")
            if isinstance(node, ast.Compare) and _is_string_choice(node, choices):
                string_choices.append(f"{rel}:{node.lineno}")
    return {"if_parallel": len(parallel_ifs), "string_choice_comparisons": len(string_choices),
            "if_parallel_at": parallel_ifs, "string_choice_at": string_choices}


# The pipeline's stages (hwsim/pipeline.py calls them; so may their own modules, a build
# rebuilding at another clock): a call from anywhere else is the pipeline written out again.
PIPELINE_STAGES = {("hwsim.config.load", "load_scenario"), ("hwsim.config.load", "read_scenario"),
                   ("hwsim.checks", "problems"), ("hwsim.cost", "check_cost"), ("hwsim.build", "build"),
                   ("hwsim.run", "run_scenario")}
PIPELINE_MODULES = {"hwsim.pipeline", *(m for m, _ in PIPELINE_STAGES)}
WRITE_CALLS = {"atomic_write", "write_text"}


def _stage_called(mod: Module, func: ast.expr) -> tuple[str, str] | None:
    """The stage a call's function names, through the module's imports (`build`, `checks.problems`)."""
    if isinstance(func, ast.Name):
        return mod.names.get(func.id) if mod.names.get(func.id) in PIPELINE_STAGES else None
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        source = mod.names.get(func.value.id)
        if source is not None and source[1] == "" and (source[0], func.attr) in PIPELINE_STAGES:
            return source[0], func.attr
    return None


def pipeline_copies(modules: dict[str, Module]) -> dict:
    """Calls of a pipeline stage outside the pipeline (by calling function), and the functions
    that write a manifest.json themselves."""
    calls, writers = set(), set()
    for mod in modules.values():
        for fn in ast.walk(mod.tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            where = f"{mod.rel}:{fn.name}"
            called = {s for n in ast.walk(fn) if isinstance(n, ast.Call) for s in [_stage_called(mod, n.func)] if s}
            if called and mod.name not in PIPELINE_MODULES:
                calls.add(f"{where} ({', '.join(sorted(attr for _, attr in called))})")
            writes = any(isinstance(n, ast.Call) and (getattr(n.func, "id", None) or getattr(n.func, "attr", None))
                         in WRITE_CALLS for n in ast.walk(fn))
            if writes and any(isinstance(n, ast.Constant) and n.value == "manifest.json" for n in ast.walk(fn)):
                writers.add(where)
    return {"stage_callers": len(calls), "stage_callers_list": sorted(calls),
            "manifest_writers": len(writers), "manifest_writers_list": sorted(writers)}


def layer_of(name: str) -> int:
    """The index in LAYERS of a module's longest listed prefix."""
    best, depth = 0, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and prefix.count(".") > depth:
                best, depth = i, prefix.count(".")
    return best


def _package(name: str) -> str:
    return ".".join(name.split(".")[:2])


def imports_back_up(modules: dict[str, Module]) -> dict:
    """Imports from a module to one of a higher layer (lazy ones included, TYPE_CHECKING not)."""
    found = sorted((m.name, target) for m in modules.values() for target in m.imports
                   if layer_of(target) > layer_of(m.name))
    pairs = sorted({(_package(a), _package(b)) for a, b in found})
    return {"imports": len(found), "package_pairs": len(pairs),
            "list": [f"{a} -> {b}" for a, b in found],
            "pairs": [f"{a} -> {b}" for a, b in pairs]}


def inert_rules() -> int:
    sys.path.insert(0, str(ROOT))
    from hwsim.config.inert import RULES
    return len(RULES)


# Method names of the builtin containers: `x.get(...)` on a config part is a dict's, not hwsim's.
BUILTIN_METHODS = {n for t in (dict, list, set, str, tuple) for n in dir(t)}


@dataclass(frozen=True)
class Fn:
    """A function of hwsim: module, enclosing class (or ""), the definition."""
    mod: Module
    cls: str
    node: ast.FunctionDef

    @property
    def key(self) -> tuple[str, str, str]:
        return self.mod.name, self.cls, self.node.name

    def __hash__(self):
        return hash(self.key)

    def __eq__(self, other):
        return self.key == other.key


def _methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


class Index:
    """Where a name called in hwsim can lead: module functions, classes, methods by name."""

    def __init__(self, modules: dict[str, Module]):
        self.modules = modules
        self.by_method: dict[str, list[Fn]] = {}
        self.class_at: dict[str, list[tuple[Module, ast.ClassDef]]] = {}
        for mod in modules.values():
            for cls in mod.classes.values():
                self.class_at.setdefault(cls.name, []).append((mod, cls))
                for fn in _methods(cls).values():
                    self.by_method.setdefault(fn.name, []).append(Fn(mod, cls.name, fn))

    def in_class(self, mod: Module, cls: ast.ClassDef, name: str, depth: int = 0) -> list[Fn]:
        """The method `name` of a class or, failing that, of its hwsim bases."""
        if name in _methods(cls):
            return [Fn(mod, cls.name, _methods(cls)[name])]
        for base in cls.bases if depth < 8 else ():
            base_name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
            for base_mod, base_cls in self.class_at.get(base_name, []):
                found = self.in_class(base_mod, base_cls, name, depth + 1)
                if found:
                    return found
        return []

    def named(self, mod: Module, name: str) -> list[Fn]:
        """A name in a module: its function, its class's __init__, or one imported."""
        if name in mod.functions:
            return [Fn(mod, "", mod.functions[name])]
        if name in mod.classes:
            return self.in_class(mod, mod.classes[name], "__init__")
        source, attr = mod.names.get(name, ("", ""))
        target = self.modules.get(source)
        return self.named(target, attr) if target and attr else []

    def class_named(self, mod: Module, name: str) -> tuple[Module, ast.ClassDef] | None:
        """A class name as a module sees it: its own or one imported."""
        if name in mod.classes:
            return mod, mod.classes[name]
        source, attr = mod.names.get(name, ("", ""))
        target = self.modules.get(source)
        if target and attr in target.classes:
            return target, target.classes[attr]
        return None

    def annotated(self, mod: Module, annotation: ast.AST | None) -> tuple[Module, ast.ClassDef] | None:
        """The hwsim class an annotation names (`Built`, `"Built"`, `Schedule | None`)."""
        if annotation is None:
            return None
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            try:
                annotation = ast.parse(annotation.value, mode="eval").body
            except SyntaxError:
                return None
        for node in ast.walk(annotation):
            if isinstance(node, ast.Name) and self.class_named(mod, node.id):
                return self.class_named(mod, node.id)
        return None

    def attribute_type(self, mod: Module, cls: ast.ClassDef, attr: str) -> tuple[Module, ast.ClassDef] | None:
        """The class of `self.attr`: a field's annotation, or what __init__ and the others assign."""
        for node in cls.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                    and node.target.id == attr:
                return self.annotated(mod, node.annotation)
        for node in ast.walk(cls):
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Attribute) and t.attr == attr and \
                            isinstance(t.value, ast.Name) and t.value.id == "self":
                        if isinstance(node, ast.AnnAssign):
                            return self.annotated(mod, node.annotation)
                        return self.type_of_value(mod, node.value)
            if isinstance(node, ast.FunctionDef) and node.name == "__init__":
                for a in node.args.args:
                    if a.arg == attr:
                        return self.annotated(mod, a.annotation)
        for base in cls.bases:
            found = self.class_named(mod, getattr(base, "id", ""))
            if found:
                return self.attribute_type(*found, attr)
        return None

    def type_of_value(self, mod: Module, value: ast.AST) -> tuple[Module, ast.ClassDef] | None:
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
            found = self.class_named(mod, value.func.id)
            if found:
                return found
            fns = self.named(mod, value.func.id)
            if fns and fns[0].node.returns is not None:
                return self.annotated(fns[0].mod, fns[0].node.returns)
        return None

    def type_of(self, caller: Fn, expr: ast.AST, local: dict) -> tuple[Module, ast.ClassDef] | None:
        """The hwsim class of an expression where the code says it (annotations, constructors)."""
        mod = caller.mod
        if isinstance(expr, ast.Name):
            if expr.id == "self" and caller.cls:
                return mod, mod.classes[caller.cls]
            return local.get(expr.id)
        if isinstance(expr, ast.Attribute):
            owner = self.type_of(caller, expr.value, local)
            if owner:
                return self.attribute_type(*owner, expr.attr)
        if isinstance(expr, ast.Call):
            return self.type_of_value(mod, expr)
        return None

    def local_types(self, fn: Fn) -> dict:
        mod, out = fn.mod, {}
        for a in fn.node.args.args + fn.node.args.kwonlyargs + fn.node.args.posonlyargs:
            found = self.annotated(mod, a.annotation)
            if found:
                out[a.arg] = found
        for node in ast.walk(fn.node):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                found = self.annotated(mod, node.annotation)
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 \
                    and isinstance(node.targets[0], ast.Name):
                found = self.type_of(fn, node.value, out)
            else:
                continue
            if found:
                out[(node.target if isinstance(node, ast.AnnAssign) else node.targets[0]).id] = found
        return out

    def callees(self, caller: Fn, func: ast.AST, local: dict) -> list[Fn]:
        mod = caller.mod
        if isinstance(func, ast.Name):
            return self.named(mod, func.id)
        if not isinstance(func, ast.Attribute):
            return []
        if isinstance(func.value, ast.Name):
            source, attr = mod.names.get(func.value.id, ("", ""))
            if source in self.modules and not attr:
                return self.named(self.modules[source], func.attr)
            found = self.class_named(mod, func.value.id)          # Class.method(...)
            if found:
                return self.in_class(*found, func.attr)
        owner = self.type_of(caller, func.value, local)
        if owner:
            return self.in_class(*owner, func.attr)
        defs = self.by_method.get(func.attr, [])
        # a receiver of no declared type: the method only if one class of hwsim defines the name
        return defs if len(defs) == 1 and func.attr not in BUILTIN_METHODS else []


def _mentions_any(expr: ast.AST, names: set[str]) -> bool:
    """The expression reads a tracked name (a message formatted from it is words, not the config)."""
    if isinstance(expr, ast.JoinedStr):
        return False
    if isinstance(expr, ast.Name):
        return expr.id in names
    return any(_mentions_any(child, names) for child in ast.iter_child_nodes(expr))


def _receiver(func: ast.AST) -> ast.AST | None:
    return func.value if isinstance(func, ast.Attribute) else None


def _carriers(fn: ast.FunctionDef, tracked: set[str]) -> set[str]:
    """The tracked names and every local name bound to an expression that reads one of them
    (`rt = cfg.runtime`, `b = build(cfg)`, `for block in cfg.blocks`), to a fixed point."""
    names = set(tracked)
    while True:
        before = len(names)
        for node in ast.walk(fn):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node.value is not None \
                    and _mentions_any(node.value, names):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
            elif isinstance(node, (ast.For, ast.comprehension)) and _mentions_any(node.iter, names):
                names |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
            elif isinstance(node, ast.withitem) and node.optional_vars is not None \
                    and _mentions_any(node.context_expr, names):
                names |= {n.id for n in ast.walk(node.optional_vars) if isinstance(n, ast.Name)}
        if len(names) == before:
            return names


def _params(fn: ast.FunctionDef) -> list[str]:
    return [a.arg for a in fn.args.posonlyargs + fn.args.args]


def _handed(call: ast.Call, callee: Fn, names: set[str]) -> frozenset[str]:
    """The callee's parameters that receive the config (or a part, or a value derived from it)."""
    params = _params(callee.node)
    bound = callee.cls and params[:1] in (["self"], ["cls"]) and (
        isinstance(call.func, ast.Attribute) or callee.node.name == "__init__")
    positional = params[1:] if bound else params
    out = set()
    for i, arg in enumerate(call.args):
        if _mentions_any(arg, names):
            if i < len(positional):
                out.add(positional[i])
            elif callee.node.args.vararg:
                out.add(callee.node.args.vararg.arg)
    for kw in call.keywords:
        if _mentions_any(kw.value, names):
            if kw.arg in params or kw.arg in [a.arg for a in callee.node.args.kwonlyargs]:
                out.add(kw.arg)
            elif callee.node.args.kwarg:
                out.add(callee.node.args.kwarg.arg)
    receiver = _receiver(call.func)
    if bound and receiver is not None and _mentions_any(receiver, names):
        out.add(params[0])                        # a method of an object that carries the config
    if callee.node.name == "__init__" and out and params[:1] == ["self"]:
        out.add("self")                           # the object built from it carries it
    return frozenset(out)


def scenario_walk(modules: dict[str, Module], start=WALK_START) -> dict:
    """The walk from `start`: one (module, function, parameter), or several walked as one."""
    index = Index(modules)
    starts = start if isinstance(start[0], tuple) else (start,)
    pending = [(Fn(modules[m], "", modules[m].functions[f]), frozenset([arg])) for m, f, arg in starts]
    seen: dict[Fn, set[str]] = {}
    edges: set[tuple[Fn, Fn]] = set()
    while pending:
        fn, tracked = pending.pop()
        known = seen.setdefault(fn, set())
        if tracked <= known:
            continue
        known |= tracked
        names = _carriers(fn.node, set(known))
        local = index.local_types(fn)
        for node in ast.walk(fn.node):
            if not isinstance(node, ast.Call):
                continue
            for callee in index.callees(fn, node.func, local):
                handed = _handed(node, callee, names)
                if handed:
                    edges.add((fn, callee))
                    pending.append((callee, handed))
    return _walk_report(start, seen, edges)


def _walk_report(start, seen: dict, edges: set) -> dict:
    crossing = {(a, b) for a, b in edges if a.mod is not b.mod}
    entered: dict[str, set] = {}
    for a, b in crossing:
        entered.setdefault(b.mod.rel, set()).add((a.key, b.key))
    climbs = sorted({f"{a.mod.rel} -> {b.mod.rel}" for a, b in crossing
                     if layer_of(b.mod.name) > layer_of(a.mod.name)})
    most = sorted(((len(v), k) for k, v in entered.items()), reverse=True)[:6]
    starts = start if isinstance(start[0], tuple) else (start,)
    return {"start": " + ".join(":".join(s) for s in starts), "files": len({f.mod.rel for f in seen}),
            "functions": len(seen), "entries": len(crossing),
            "re_entries": sum(len(v) - 1 for v in entered.values()),
            "climbs": len(climbs), "climbs_list": climbs,
            "most_entered": [f"{rel} {n}" for n, rel in most],
            "file_list": sorted({f.mod.rel for f in seen})}


def measure() -> dict:
    modules = load_modules()
    lazy = sum(1 for m in modules.values() for lazy in m.imports.values() if lazy)
    long_all = long_functions(modules, ("hwsim",))
    return {"modules": len(modules),
            "lines": sum(len(m.path.read_text().splitlines()) for m in modules.values()),
            "import_circles": import_circles(modules), "lazy_imports": lazy,
            "imports_back_up": imports_back_up(modules),
            "long_functions": long_functions(modules), "long_functions_all": long_all,
            "forks": forks(modules), "inert_rules": inert_rules(), "pipeline": pipeline_copies(modules),
            "scenario_walk": scenario_walk(modules)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print every measure as JSON")
    args = parser.parse_args(argv)
    m = measure()
    if args.json:
        print(json.dumps(m, indent=1))
        return
    print(f"hwsim/: {m['modules']} modules, {m['lines']} lines, {m['lazy_imports']} lazy imports")
    print(f"import circles: {len(m['import_circles'])}")
    for circle in m["import_circles"]:
        print(f"  {len(circle)} modules: {' '.join(circle)}")
    up = m["imports_back_up"]
    print(f"imports back up the layers: {up['imports']} ({up['package_pairs']} package pairs)")
    for line in up["list"]:
        print(f"  {line}")
    print(f"functions over {LONG_FUNCTION_LINES} lines: {len(m['long_functions_all'])} in hwsim/, "
          f"{len(m['long_functions'])} in hwsim/engine and hwsim/hw")
    for f in m["long_functions_all"]:
        print(f"  {f['lines']:4d}  {f['function']}  {f['where']}")
    f = m["forks"]
    print(f"`if ... parallel` forks: {f['if_parallel']}; string comparisons of choices: "
          f"{f['string_choice_comparisons']}; inert rules: {m['inert_rules']}")
    pipe = m["pipeline"]
    print(f"pipeline stages called outside hwsim/pipeline.py: {pipe['stage_callers']} functions; "
          f"manifest writers: {pipe['manifest_writers']}")
    for line in pipe["stage_callers_list"] + [f"writes manifest.json: {w}" for w in pipe["manifest_writers_list"]]:
        print(f"  {line}")
    w = m["scenario_walk"]
    print(f"config walk from {w['start']}: {w['files']} files, {w['functions']} functions, "
          f"{w['entries']} entries into another file (each a return to a file above), "
          f"{w['re_entries']} re-entries, {w['climbs']} climbs to a higher layer")
    print(f"  most entered: {', '.join(w['most_entered'])}")
    for line in w["climbs_list"]:
        print(f"  climbs {line}")


if __name__ == "__main__":
    main()
