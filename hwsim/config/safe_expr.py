"""A small, safe expression language for sweep filters.

    p['workload.batch_size'] <= 8 or p['hardware'] == 'h200-sxm'
    workload.batch_size * workload.context_tokens < 2**20 and not kv_cache.bits == 16

A filter comes from a YAML file someone may have downloaded, so it is never handed to
`eval`. Python's parser builds the tree and this module walks it, accepting only: number,
string and boolean literals; factor names (a dotted name, or `p['dotted.name']`);
comparisons (chained too, and `in` / `not in` a list of literals); and / or / not; unary
+ and -; and + - * / // % ** on numbers. Attribute access, calls, subscripts of anything
but `p`, comprehensions and lambdas are errors before anything is evaluated. Sizes are
bounded so an expression cannot stall the loader: its length, the number of nodes, and
the magnitude of powers.
"""

from __future__ import annotations

import ast
import math
import operator
from typing import Any

MAX_LENGTH = 1000          # characters of a filter
MAX_NODES = 200            # syntax-tree nodes
MAX_EXPONENT = 64          # |b| in a ** b
MAX_MAGNITUDE = 1e300      # any arithmetic result

_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge}
_ARITH = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
          ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
          ast.Pow: operator.pow}


class ExprError(ValueError):
    """The expression is not in the language, names an unknown factor, or fails on a point."""


class Filter:
    """A parsed, checked expression; call it with a point's factors {dotted name: value}."""

    def __init__(self, text: str, names: set[str]):
        if not isinstance(text, str) or not text.strip():
            raise ExprError("the expression is empty")
        if len(text) > MAX_LENGTH:
            raise ExprError(f"the expression is {len(text)} characters long (at most {MAX_LENGTH})")
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as exc:
            raise ExprError(f"syntax error at column {exc.offset}: {exc.msg}") from None
        except (RecursionError, MemoryError, ValueError):
            raise ExprError("the expression is too deeply nested") from None
        nodes = sum(1 for _ in ast.walk(tree))
        if nodes > MAX_NODES:
            raise ExprError(f"the expression has {nodes} parts (at most {MAX_NODES})")
        self.text = text
        self.names = names
        self.tree = tree.body
        _check(self.tree, names)

    def __call__(self, factors: dict[str, Any]) -> bool:
        return bool(_eval(self.tree, factors))


def _factor_name(node: ast.AST) -> str | None:
    """`a.b.c` or `p['a.b.c']` -> 'a.b.c'; anything else -> None."""
    if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "p"
            and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)):
        return node.slice.value
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _describe(node: ast.AST) -> str:
    return {ast.Call: "function calls", ast.Lambda: "lambdas", ast.Subscript: "subscripts",
            ast.Attribute: "attribute access"}.get(type(node), type(node).__name__)


def _check(node: ast.AST, names: set[str]) -> None:
    """Reject, before evaluating anything, every construct outside the language."""
    if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)):
        name = _factor_name(node)
        if name is None:
            raise ExprError(f"{_describe(node)} are not allowed; name a factor, e.g. p['workload.batch_size']")
        if name not in names:
            known = ", ".join(sorted(names))
            raise ExprError(f"'{name}' is not a factor of this sweep (factors: {known})")
    elif isinstance(node, ast.Constant):
        if not isinstance(node.value, (int, float, str, bool)) or node.value is None:
            raise ExprError(f"literal {node.value!r} is not allowed")
    elif isinstance(node, ast.BoolOp):
        for v in node.values:
            _check(v, names)
    elif isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, (ast.Not, ast.USub, ast.UAdd)):
            raise ExprError(f"operator {type(node.op).__name__} is not allowed")
        _check(node.operand, names)
    elif isinstance(node, ast.BinOp):
        if type(node.op) not in _ARITH:
            raise ExprError(f"operator {type(node.op).__name__} is not allowed")
        _check(node.left, names)
        _check(node.right, names)
    elif isinstance(node, ast.Compare):
        _check(node.left, names)
        for op, right in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn)):
                if not isinstance(right, (ast.List, ast.Tuple)) or not all(
                        isinstance(e, ast.Constant) for e in right.elts):
                    raise ExprError("'in' needs a list of literals on its right, e.g. x in [1, 2]")
                for e in right.elts:
                    _check(e, names)
            elif type(op) in _COMPARE:
                _check(right, names)
            else:
                raise ExprError(f"comparison {type(op).__name__} is not allowed")
    else:
        raise ExprError(f"{_describe(node)} are not allowed in a filter")


def _short(value: float | int) -> str:
    text = repr(value)
    return text if len(text) <= 24 else f"{text[:10]}...({len(text)} digits)"


def _number(value: Any) -> float | int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ExprError(f"arithmetic needs numbers, got {value!r}")
    return value


def _eval(node: ast.AST, p: dict[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)):
        return p.get(_factor_name(node))
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            return all(_eval(v, p) for v in node.values)
        return any(_eval(v, p) for v in node.values)
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, p)
        if isinstance(node.op, ast.Not):
            return not value
        return -_number(value) if isinstance(node.op, ast.USub) else +_number(value)
    if isinstance(node, ast.BinOp):
        left, right = _number(_eval(node.left, p)), _number(_eval(node.right, p))
        if isinstance(node.op, ast.Pow) and (abs(right) > MAX_EXPONENT or abs(left) > MAX_MAGNITUDE
                                             or (abs(left) > 1 and right * math.log10(abs(left)) > 300)):
            # bounded before it is computed: (10**64)**64 is a 4,097-digit integer
            raise ExprError(f"power {_short(left)} ** {_short(right)} is too large")
        try:
            result = _ARITH[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ExprError("division by zero") from None
        except (OverflowError, ValueError, TypeError) as exc:
            raise ExprError(f"arithmetic failed: {exc}") from None
        if (isinstance(result, complex) or abs(result) > MAX_MAGNITUDE   # an int past a float's range too
                or not math.isfinite(result)):
            raise ExprError("an arithmetic result is out of range")
        return result
    if isinstance(node, ast.Compare):
        left = _eval(node.left, p)
        for op, right_node in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn)):
                values = [e.value for e in right_node.elts]
                ok = (left in values) == isinstance(op, ast.In)
                right = None
            else:
                right = _eval(right_node, p)
                try:
                    ok = _COMPARE[type(op)](left, right)
                except TypeError:
                    raise ExprError(f"cannot compare {left!r} with {right!r}") from None
            if not ok:
                return False
            left = right
        return True
    raise ExprError(f"{_describe(node)} are not allowed in a filter")   # _check keeps us from here
