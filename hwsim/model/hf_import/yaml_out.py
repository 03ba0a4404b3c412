"""The model YAML an import writes: hwsim's model-shape keys, each with a comment naming the
config.json field it came from, then the fields read and ignored."""

from __future__ import annotations

import json

from hwsim.model.hf_import import Imported


def _scalar(value) -> str:
    if isinstance(value, str):
        return json.dumps(value)           # a JSON string is a YAML double-quoted scalar
    return str(value).lower() if isinstance(value, bool) else str(value)


def _lines(node: dict, origin: dict, prefix: str, indent: int) -> list[str]:
    out = []
    for key, value in node.items():
        path = f"{prefix}{key}"
        pad = "  " * indent
        if isinstance(value, dict):
            out.append(f"{pad}{key}:")
            out += _lines(value, origin, f"{path}.", indent + 1)
        else:
            out.append(f"{pad}{key}: {_scalar(value)}  # {origin.get(path, '')}".rstrip(" #"))
    return out


def model_yaml(imp: Imported) -> str:
    head = [f"# Imported by `hwsim model import` from {imp.cfg.path}"
            + (f" and {imp.cfg.quant_path}" if imp.cfg.quant_path not in (None, imp.cfg.path) else ""),
            "# Each key's comment names the config.json field it came from."]
    body = _lines(imp.mapped.shape, imp.mapped.origin, "", 0)
    tail = ["", "# Read and ignored (no effect on the timing):"]
    tail += [f"#   {key}: {why}" for key, why in imp.ignored.items()]
    return "\n".join(head + body + tail) + "\n"
