"""The sweep filter language: what it computes, and that nothing outside it is evaluated."""

import pytest

from hwsim.config.safe_expr import MAX_LENGTH, ExprError, Filter

NAMES = {"workload.batch_size", "hardware", "kv_cache.bits"}
POINT = {"workload.batch_size": 8, "hardware": "h200-sxm", "kv_cache.bits": 2}


@pytest.mark.parametrize("text,expected", [
    ("p['workload.batch_size'] <= 8 or p['hardware'] == 'b200'", True),
    ("workload.batch_size * kv_cache.bits == 16", True),
    ("workload.batch_size ** 2 // 3 % 5 - -1 == 17 % 5", True),
    ("1 < workload.batch_size < 8", False),
    ("hardware in ['b200', 'h200-sxm'] and not kv_cache.bits == 16", True),
    ("hardware not in ('h200-sxm',)", False),
    ("workload.batch_size / 16 == 0.5", True),
])
def test_the_language_computes(text, expected):
    assert Filter(text, NAMES)(POINT) is expected


@pytest.mark.parametrize("text,message", [
    ("__import__('os').system('true')", "function calls"),
    ("().__class__.__base__.__subclasses__()", "function calls"),
    ("p.__class__", "not a factor"),
    ("hardware[0] == 'h'", "subscripts"),
    ("{1: 2}", "Dict"),
    ("hardware if True else 1", "IfExp"),
    ("(x := 1)", "NamedExpr"),
    ("workload.batch_size is 8", "comparison Is"),
    ("hardware in hardware", "list of literals"),
    ("~workload.batch_size", "operator Invert"),
    ("workload.batch_size << 2", "operator LShift"),
    ("None", "literal None"),
    ("x" * (MAX_LENGTH + 1), "characters long"),
    ("", "empty"),
])
def test_anything_else_is_refused_before_evaluation(text, message):
    with pytest.raises(ExprError, match=message):
        Filter(text, NAMES | {"x" * (MAX_LENGTH + 1)})


@pytest.mark.parametrize("text,message", [
    ("workload.batch_size ** 100 > 1", "too large"),
    ("hardware + 1 > 1", "numbers"),
    ("hardware < 1", "cannot compare"),
    ("workload.batch_size / (kv_cache.bits - 2) > 1", "division by zero"),
    ("10.0 ** 60 * 10.0 ** 60 * 10.0 ** 60 * 10.0 ** 60 * 10.0 ** 60 * 10.0 ** 60 > 1", "out of range"),
])
def test_evaluation_errors_are_expr_errors(text, message):
    with pytest.raises(ExprError, match=message):
        Filter(text, NAMES)(POINT)
