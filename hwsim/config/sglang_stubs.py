"""What SGLang 0.5.4 needs to import on a CPU-only install: its CUDA-kernel package stood in by an
empty module (imported at load, never called by the scheduler), its logging kept to warnings.
Apart from the adapter (hwsim/serving/engines/sglang.py), with the schemas beside the install check
(config/engine_install.py) that imports it: it imports nothing of hwsim, so the check stays on the ground."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys
from unittest import mock

STUBBED = ("sgl_kernel",)      # CUDA-only packages sglang imports at load, stood in by empty modules


class _Stub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports of STUBBED packages give an empty mock module (their kernels are never called)."""

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        m = mock.MagicMock(name=spec.name)
        m.__path__, m.__spec__ = [], spec
        return m

    def exec_module(self, module):
        pass


def install_stubs() -> None:
    """The stubs, and SGLang's own logging kept to warnings (its per-step INFO lines would fill
    hwsim's stderr, where an exit 2 is one line)."""
    logging.getLogger("sglang").setLevel(logging.WARNING)
    if not any(isinstance(f, _Stub) for f in sys.meta_path):
        sys.meta_path.insert(0, _Stub())
