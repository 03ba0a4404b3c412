"""YAML loading that remembers where every key came from and rejects duplicate keys.

PyYAML's SafeLoader silently keeps the last of two equal keys and forgets line numbers once
it builds plain dicts. We construct mappings ourselves so a later schema error can name the
file, the line and the dotted key path. YAML 1.1 also reads `4.8e12` as a string (it wants
`4.8e+12`); we add a float resolver so scientific notation loads as a number.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from hwsim.errors import ConfigError

_FLOAT_RE = re.compile(
    r"""^[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?$
    |^[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)$
    |^[-+]?\.[0-9_]+(?:[eE][-+][0-9]+)?$
    |^[-+]?\.(?:inf|Inf|INF)$
    |^\.(?:nan|NaN|NAN)$""",
    re.X,
)


class _LineLoader(yaml.SafeLoader):
    """SafeLoader with duplicate-key detection and scientific-notation floats."""


_LineLoader.yaml_implicit_resolvers = {
    k: [r for r in v if r[0] != "tag:yaml.org,2002:float"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_LineLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_RE, list("-+0123456789."))


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode, deep: bool = False):
    mapping: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, (str, int, float, bool)) and key is not None:
            raise ConfigError("a mapping key must be a plain value", file=loader.source_name,
                              line=key_node.start_mark.line + 1)
        if key in mapping:
            raise ConfigError(f"duplicate key '{key}'", file=loader.source_name,
                              line=key_node.start_mark.line + 1)
        mapping[key] = loader.construct_object(value_node, deep=True)
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class LoadedYaml:
    """A parsed document plus a lookup from dotted key path to the line it was written on."""

    def __init__(self, data: Any, key_lines: dict[str, int], source: str):
        self.data = data
        self.key_lines = key_lines
        self.source = source

    def line_of(self, path: tuple | list) -> int | None:
        """Line of the deepest key of `path` that exists in the document."""
        parts = [str(p) for p in path]
        while parts:
            line = self.key_lines.get(".".join(parts))
            if line is not None:
                return line
            parts.pop()
        return None


def _index_lines(node: yaml.Node, prefix: str, out: dict[str, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = f"{prefix}.{key_node.value}" if prefix else str(key_node.value)
            out[key] = key_node.start_mark.line + 1
            _index_lines(value_node, key, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            key = f"{prefix}.{i}" if prefix else str(i)
            out.setdefault(key, item.start_mark.line + 1)
            _index_lines(item, key, out)


def load_yaml_text(text: str, source: str) -> LoadedYaml:
    loader = _LineLoader(text)
    loader.source_name = source
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise ConfigError(f"YAML syntax error: {exc.problem or exc}", file=source, line=line) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"YAML error: {exc}", file=source) from None
    finally:
        loader.dispose()
    lines: dict[str, int] = {}
    if node is not None:
        _index_lines(node, "", lines)
    return LoadedYaml(data, lines, source)


def load_yaml_file(path: str | Path) -> LoadedYaml:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("file not found", file=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read file: {exc}", file=str(path)) from None
    return load_yaml_text(text, str(path))
