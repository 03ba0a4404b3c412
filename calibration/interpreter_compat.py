"""Triton 3.6's interpreter under numpy >= 2.4 (the local shared Python: torch 2.11 brought it).

The interpreter holds every scalar as a one-element 1-d numpy array and converts it to a Python
int with int(array) where a kernel uses it as an index (a loop's `range(start, stop, BLOCK)`
over runtime bounds). numpy 2.4 made int() of an array with ndim > 0 an error ("only
0-dimensional arrays can be converted to Python scalars"), so every kernel with such a loop
fails under TRITON_INTERPRET=1. `patch()` gives the interpreter's tensors an __index__ that
takes the one element first; a no-op where the interpreter is not in use or already patched.
"""

from __future__ import annotations

import os


def _index(self) -> int:
    data = self.handle.data
    return int(data.reshape(-1)[0]) if data.size == 1 else int(data)


def patch() -> None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "one_element_index", False):
        return

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", _index)     # restored with the rest (scope.restore)

    patched.one_element_index = True
    interpreter._patch_lang_tensor = patched
