"""The `hwsim` command's entry point: `hwsim --version` is answered before the command line
(typer and click, about 80 ms of imports) is loaded (issue 33); anything else goes to
hwsim.cli.main.

`hwsim run` that will draw figures (the default draws breakdown.png) forks its plotting helper
here, first thing, so that the helper's matplotlib import (the default run's longest path)
overlaps this process's imports, parsing and simulation from the start (hwsim/io/plotter.py).
The guess is from the words of the command line only: a wrong one costs a helper stopped
unused (the command decides, and starts its own helper if it needs one and got none).
"""

import sys

_NO_FIGURES = {"--no-plots", "--dry-run", "--help", "-h"}


def _figure_modules(args: list[str]) -> tuple[str, ...] | None:
    """The plotting modules `hwsim ARGS` will draw with, or None if it draws no figure."""
    if args[:1] != ["run"] or _NO_FIGURES & set(args):
        return None
    from hwsim.io.plotter import _MODULES, BREAKDOWN
    return _MODULES if "--plots" in args else BREAKDOWN


def main() -> None:
    args = sys.argv[1:]
    if args == ["--version"]:
        from hwsim import __version__
        print(f"hwsim {__version__}")        # as hwsim.cli's --version prints it
        return
    modules = _figure_modules(args)
    if modules is not None:
        from hwsim.io.plotter import Plotter
        Plotter.start_early(modules)
    try:
        from hwsim.cli import main as cli_main
        cli_main()
    finally:
        if modules is not None:
            from hwsim.io.plotter import discard_early
            discard_early()


if __name__ == "__main__":
    main()
