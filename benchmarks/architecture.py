"""Measures of the code's shape, read from the AST of hwsim/ (nothing is imported or run).

    python benchmarks/architecture.py [--json]

- import circles: strongly connected components of the graph of hwsim's own imports, lazy
  imports inside functions included (a lazy import hides a circle; it does not remove it);
- long functions: functions over 60 lines in hwsim/engine and hwsim/hw;
- forks: `if` tests that read something named `parallel`, and comparisons of an attribute with
  string constants (a config choice compared by string rather than dispatched by type);
- the scenario walk: start at run_scenario's `cfg` and follow every call that passes it on
  (whole, or a part of it such as `cfg.runtime`) to a function hwsim defines at module level,
  resolved through the caller's imports, or to a method whose name only one class defines
  (other method calls cannot be resolved from the AST), through local names bound to it
  (`rt = cfg.runtime`). It is a lower bound of what a reader follows.
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
WALK_START = ("hwsim.run", "run_scenario", "cfg")


@dataclass
class Module:
    name: str
    path: Path
    rel: str                       # the path as the report shows it
    tree: ast.Module
    imports: dict[str, bool] = field(default_factory=dict)   # hwsim module -> lazy only
    names: dict[str, tuple[str, str]] = field(default_factory=dict)  # local name -> (module, attr)
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)


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

    sys.setrecursionlimit(10_000)
    for v in modules:
        if v not in index:
            visit(v)
    return out


def long_functions(modules: dict[str, Module], packages=("hwsim.engine", "hwsim.hw")) -> list[dict]:
    found = []
    for mod in modules.values():
        if not mod.name.startswith(packages):
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


def _is_string_choice(node: ast.Compare) -> bool:
    sides = [node.left, *node.comparators]
    strings = [s for s in sides if isinstance(s, ast.Constant) and isinstance(s.value, str)
               or isinstance(s, (ast.Tuple, ast.Set, ast.List)) and s.elts
               and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in s.elts)]
    return bool(strings) and any(isinstance(s, ast.Attribute) for s in sides)


def forks(modules: dict[str, Module]) -> dict:
    parallel_ifs, string_choices = [], []
    for mod in modules.values():
        rel = mod.rel
        for node in ast.walk(mod.tree):
            if isinstance(node, (ast.If, ast.IfExp)) and _mentions(node.test, "parallel"):
                parallel_ifs.append(f"{rel}:{node.lineno}")
            if isinstance(node, ast.Compare) and _is_string_choice(node):
                string_choices.append(f"{rel}:{node.lineno}")
    return {"if_parallel": len(parallel_ifs), "string_choice_comparisons": len(string_choices),
            "if_parallel_at": parallel_ifs}


def _carries(expr: ast.AST, names: set[str]) -> bool:
    """The expression is the tracked value or a part of it (cfg, cfg.runtime, cfg.moe.cache)."""
    while isinstance(expr, (ast.Attribute, ast.Subscript)):
        expr = expr.value
    return isinstance(expr, ast.Name) and expr.id in names


def _aliases(fn: ast.FunctionDef, param: str) -> set[str]:
    """The parameter and the local names bound to it or to a part of it (rt = cfg.runtime)."""
    names = {param}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and _carries(node.value, names):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def unique_methods(modules: dict[str, Module]) -> dict[str, tuple[Module, ast.FunctionDef]]:
    """Methods whose name only one class of hwsim defines: a call `x.name(...)` can only be it."""
    found: dict[str, list] = {}
    for mod in modules.values():
        for cls in (n for n in mod.tree.body if isinstance(n, ast.ClassDef)):
            for fn in (n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
                if not fn.name.startswith("__"):
                    found.setdefault(fn.name, []).append((mod, fn))
    return {name: defs[0] for name, defs in found.items() if len(defs) == 1}


def _callee(mod: Module, func: ast.AST, modules: dict[str, Module],
            methods: dict) -> tuple[Module, ast.FunctionDef] | None:
    if isinstance(func, ast.Name):
        if func.id in mod.functions:
            return mod, mod.functions[func.id]
        source, attr = mod.names.get(func.id, ("", ""))
        target = modules.get(source)
        if target and attr in target.functions:
            return target, target.functions[attr]
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        source, attr = mod.names.get(func.value.id, ("", ""))
        target = modules.get(source) if not attr else None
        if target and func.attr in target.functions:
            return target, target.functions[func.attr]
    if isinstance(func, ast.Attribute):
        return methods.get(func.attr)
    return None


def _passed_as(call: ast.Call, fn: ast.FunctionDef, names: set[str]) -> list[str]:
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
    if params[:1] in (["self"], ["cls"]) and isinstance(call.func, ast.Attribute):
        params = params[1:]
    out = [params[i] for i, arg in enumerate(call.args) if i < len(params) and _carries(arg, names)]
    out += [kw.arg for kw in call.keywords if kw.arg and _carries(kw.value, names)]
    return out


def scenario_walk(modules: dict[str, Module], start=WALK_START) -> dict:
    files, seen, climbs = set(), set(), 0
    methods = unique_methods(modules)
    pending = [(modules[start[0]], modules[start[0]].functions[start[1]], start[2])]
    while pending:
        mod, fn, param = pending.pop()
        if (mod.name, fn.name, param) in seen:
            continue
        seen.add((mod.name, fn.name, param))
        files.add(mod.rel)
        names = _aliases(fn, param)
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call):
                continue
            found = _callee(mod, node.func, modules, methods)
            if not found:
                continue
            target_mod, target_fn = found
            for passed in _passed_as(node, target_fn, names):
                if target_mod is not mod and (target_mod.name, target_fn.name, passed) not in seen:
                    climbs += 1      # a call into another file is a climb back up when it returns
                pending.append((target_mod, target_fn, passed))
    return {"start": ":".join(start), "files": len(files), "climbs_back": climbs,
            "functions": len(seen), "file_list": sorted(files)}


def measure() -> dict:
    modules = load_modules()
    lazy = sum(1 for m in modules.values() for lazy in m.imports.values() if lazy)
    return {"modules": len(modules),
            "lines": sum(len(m.path.read_text().splitlines()) for m in modules.values()),
            "import_circles": import_circles(modules), "lazy_imports": lazy,
            "long_functions": long_functions(modules), "forks": forks(modules),
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
    print(f"functions over {LONG_FUNCTION_LINES} lines in hwsim/engine and hwsim/hw: {len(m['long_functions'])}")
    for f in m["long_functions"]:
        print(f"  {f['lines']:4d}  {f['function']}  {f['where']}")
    f = m["forks"]
    print(f"`if ... parallel` forks: {f['if_parallel']}; string comparisons of choices: "
          f"{f['string_choice_comparisons']}")
    w = m["scenario_walk"]
    print(f"scenario walk from {w['start']}: {w['files']} files, {w['functions']} functions, "
          f"{w['climbs_back']} climbs back across files")


if __name__ == "__main__":
    main()
