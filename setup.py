"""Build step (metadata is in pyproject.toml): a wheel ships copies of the repository's
scenarios/ and hardware_profiles/ as package data, in hwsim/data/, where hwsim.config.load
looks up names such as `hwsim run voice-agent` from any folder. The top-level folders stay the
one source: nothing is copied into the source tree, only into the build."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED = ("scenarios", "hardware_profiles")
ROOT = Path(__file__).resolve().parent


class BuildPyWithData(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return                      # an editable install reads the source tree itself
        for folder in SHIPPED:
            shutil.copytree(ROOT / folder, Path(self.build_lib) / "hwsim" / "data" / folder,
                            dirs_exist_ok=True, ignore=shutil.ignore_patterns(".*", "__pycache__"))


setup(cmdclass={"build_py": BuildPyWithData})
