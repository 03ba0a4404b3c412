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

from hwsim.config.limits import check_numbers
from hwsim.errors import ConfigError

# YAML 1.2's core schema, not PyYAML's YAML 1.1: `seed: 1:20` is the string "1:20", not 80
# (base 60); `010` is ten, not eight; `yes`, `no`, `on`, `off` are strings, not booleans; and
# `4.8e12` is a number (YAML 1.1 wants `4.8e+12`).
_BOOL_RE = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_INT_RE = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT_RE = re.compile(
    r"""^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$
    |^[-+]?\.(?:inf|Inf|INF)$
    |^\.(?:nan|NaN|NAN)$""",
    re.X,
)
_TAG = "tag:yaml.org,2002:"


class _LineLoader(yaml.SafeLoader):
    """SafeLoader with duplicate-key detection and YAML 1.2 core-schema scalars."""

    source_name = "<yaml>"

    def construct_object(self, node, deep=False):
        """A value that cannot be built (an integer of 5,000 digits, `!!float abc`) is an error
        at its own line."""
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError, TypeError) as exc:
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ConfigError(f"a value cannot be read: {text}", file=self.source_name,
                              line=node.start_mark.line + 1) from None


_LineLoader.yaml_implicit_resolvers = {
    k: [r for r in v if r[0] not in (_TAG + "float", _TAG + "int", _TAG + "bool", _TAG + "timestamp")]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
# in this order: "12" matches the int and the float patterns, and the first added wins
_LineLoader.add_implicit_resolver(_TAG + "bool", _BOOL_RE, list("tTfF"))
_LineLoader.add_implicit_resolver(_TAG + "int", _INT_RE, list("-+0123456789"))
_LineLoader.add_implicit_resolver(_TAG + "float", _FLOAT_RE, list("-+0123456789."))


def _construct_int(loader: _LineLoader, node: yaml.ScalarNode) -> int:
    """A YAML 1.2 integer: decimal (leading zeros are decimal), 0o octal or 0x hex; an integer
    of more than 4300 digits is a ValueError (Python's limit), reported by load_yaml_text."""
    text = loader.construct_scalar(node)
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    if not re.fullmatch(r"[-+]?[0-9]+", text):      # `!!int 1:20` or `!!int 0b11`
        raise ConfigError(f"{text[:40]!r} is not a YAML 1.2 integer", file=loader.source_name,
                          line=node.start_mark.line + 1)
    return int(text)


_LineLoader.add_constructor(_TAG + "int", _construct_int)


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


MAX_BYTES = 4 * 2**20        # a scenario, profile or sweep is a few KiB; refuse megabytes
MAX_NODES = 100_000          # nodes after expanding aliases (a "billion laughs" expands to 1e9)
MAX_DEPTH = 64               # nesting of mappings and sequences


def _index_lines(root: yaml.Node, source: str) -> dict[str, int]:
    """Dotted key path -> line, walking the node graph as the data will be used: every alias
    expanded. The walk counts nodes, so an alias bomb or a self-referencing alias is refused
    here, before anything else (the schema, JSON, a deep copy) expands it."""
    out: dict[str, int] = {}
    stack: list[tuple[yaml.Node, str, int, tuple]] = [(root, "", 0, ())]
    seen = 0
    while stack:
        node, prefix, depth, ancestors = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise ConfigError(f"the document expands to more than {MAX_NODES} values "
                              "(YAML aliases repeating a large anchor?)", file=source,
                              line=node.start_mark.line + 1)
        if depth > MAX_DEPTH:
            raise ConfigError(f"nested more than {MAX_DEPTH} levels deep", file=source,
                              line=node.start_mark.line + 1)
        if id(node) in ancestors:
            raise ConfigError("a YAML alias refers to a node that contains it", file=source,
                              line=node.start_mark.line + 1)
        inner = ancestors + (id(node),)
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in reversed(node.value):
                key = f"{prefix}.{key_node.value}" if prefix else str(key_node.value)
                out[key] = key_node.start_mark.line + 1
                stack.append((value_node, key, depth + 1, inner))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in reversed(list(enumerate(node.value))):
                key = f"{prefix}.{i}" if prefix else str(i)
                out.setdefault(key, item.start_mark.line + 1)
                stack.append((item, key, depth + 1, inner))
    return out


def _too_deep_line(text: str) -> int:
    """The line where flow brackets first nest more than MAX_DEPTH deep (what overflows the
    parser's recursion), else 1."""
    depth = 0
    for line, row in enumerate(text.splitlines(), start=1):
        for ch in row:
            depth += (ch in "[{") - (ch in "]}")
            if depth > MAX_DEPTH:
                return line
    return 1


def load_yaml_text(text: str, source: str) -> LoadedYaml:
    if len(text) > MAX_BYTES:
        raise ConfigError(f"the file is {len(text)} bytes long (at most {MAX_BYTES})", file=source)
    if "\0" in text:             # PyYAML's reader refuses it without a line
        raise ConfigError("holds a NUL byte (a binary file?)", file=source,
                          line=text[:text.index("\0")].count("\n") + 1)
    try:
        loader = _LineLoader(text)
    except yaml.YAMLError as exc:        # a character YAML does not allow (a control character)
        raise ConfigError(f"YAML error: {exc}", file=source, line=1) from None
    loader.source_name = source
    try:
        node = loader.get_single_node()
        # index (and bound) the node graph before constructing it into Python objects
        lines = _index_lines(node, source) if node is not None else {}
        data = loader.construct_document(node) if node is not None else None
    except RecursionError:
        raise ConfigError(f"nested too deeply (at most {MAX_DEPTH} levels)", file=source,
                          line=_too_deep_line(text)) from None
    except (ValueError, OverflowError) as exc:     # e.g. an integer of 5000 digits
        raise ConfigError(f"a value cannot be read: {str(exc).splitlines()[0]}", file=source) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise ConfigError(f"YAML syntax error: {exc.problem or exc}", file=source, line=line) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"YAML error: {exc}", file=source) from None
    finally:
        loader.dispose()
    check_numbers(data, lines, source)
    return LoadedYaml(data, lines, source)


def load_yaml_file(path: str | Path) -> LoadedYaml:
    """A YAML file, read through the bounded reader (a regular file of at most MAX_BYTES)."""
    from hwsim.io.bounded import LIMITS, read_text

    return load_yaml_text(read_text(path, LIMITS["yaml"]), str(path))
