"""Issue 33: the command line imports only what a command uses. A fact of sys.modules in a fresh
interpreter, not a timing (benchmarks/bench_cli.py times it)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("pandas", "matplotlib", "dask", "distributed", "pyarrow", "scipy")


def imported_after(code: str) -> tuple[list[str], str]:
    probe = (f"import sys\n{code}\n"
             f"print(sorted(m for m in {HEAVY + ('typer', 'click')!r} if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    *printed, modules = done.stdout.strip().splitlines()
    return eval(modules), "\n".join(printed)       # noqa: S307 - our own print of a list of names


def test_importing_the_cli_loads_no_heavy_library():
    modules, _ = imported_after("import hwsim.cli")
    assert not set(modules) & set(HEAVY), modules


def test_version_loads_neither_heavy_libraries_nor_the_cli_framework():
    code = "sys.argv = ['hwsim', '--version']\nfrom hwsim.launch import main\nmain()"
    modules, printed = imported_after(code)
    assert modules == [], modules
    via_cli = subprocess.run([sys.executable, "-m", "hwsim.cli", "--version"], capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert printed == via_cli.stdout.strip() and via_cli.returncode == 0


def test_other_commands_still_reach_the_cli():
    code = "sys.argv = ['hwsim', '--help']\nfrom hwsim.launch import main\ntry:\n    main()\nexcept SystemExit:\n    pass"
    modules, printed = imported_after(code)
    assert "typer" in modules and "sweep" in printed and not set(modules) & set(HEAVY)


def test_a_run_without_figures_loads_neither_matplotlib_nor_rich(tmp_path):
    """`hwsim run --json --no-plots` (a script's run): its bundle needs pyarrow (events.parquet),
    nothing draws and nothing is printed by rich (the progress display asks rich whether stderr
    is a terminal only once a run has lasted long enough to show anything)."""
    out = tmp_path / "b"
    code = ("sys.argv = ['hwsim', 'run', '--json', '--no-plots', '--set', 'workload.decode_steps=1', "
            f"'--out', {str(out)!r}]\nimport hwsim.cli\nhwsim.cli._process_ends_with_command = False\n"
            "try:\n    hwsim.cli.app()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
            "print('rich' in sys.modules)")
    modules, printed = imported_after(code)
    assert "pyarrow" in modules and not {"pandas", "matplotlib", "dask", "scipy"} & set(modules), modules
    assert printed.splitlines()[-1] == "False"                   # rich
    assert (out / "events.parquet").is_file() and not (out / "breakdown.png").exists()
