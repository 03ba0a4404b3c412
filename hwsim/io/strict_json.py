"""Strict JSON (RFC 8259) for manifests and --json output: a non-finite float (which Python
would write as `Infinity` or `NaN`, and no other JSON reader accepts) becomes null."""

from __future__ import annotations

import json
import math


def finite(obj):
    """A copy of `obj` with every non-finite float replaced by None."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def dumps(obj, indent: int | None = None) -> str:
    return json.dumps(finite(obj), indent=indent, default=str, allow_nan=False)
