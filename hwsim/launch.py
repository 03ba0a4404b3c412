"""The `hwsim` command's entry point: `hwsim --version` is answered before the command line
(typer and click, about 80 ms of imports) is loaded (issue 33); anything else goes to
hwsim.cli.main."""

import sys


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        from hwsim import __version__
        print(f"hwsim {__version__}")        # as hwsim.cli's --version prints it
        return
    from hwsim.cli import main as cli_main
    cli_main()


if __name__ == "__main__":
    main()
