"""Property: however a valid scenario is mutated (a value replaced by junk, a key dropped or
added, the YAML text garbled), loading it either succeeds within the cost limits or fails with
one ConfigError line that names where; never another exception, never a hang."""

from __future__ import annotations

import math
import time
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hwsim import pipeline
from hwsim.config.names import check_name
from hwsim.errors import ConfigError

TINY = str(Path(__file__).parent / "data" / "tiny-moe.yaml")
VALID = {"name": "tiny", "hardware": "h200-sxm", "model": TINY, "seed": 0, "budget_ms": 10,
         "hardware_overrides": {"hbm.peak_bandwidth_gbps": 4800},
         "workload": {"batch_size": 1, "context_tokens": 512, "decode_steps": 1,
                      "arrivals": {"kind": "none", "requests": 4}},
         "runtime": {"launch": "graph", "fidelity": "kernel"},
         "kv_cache": {"bits": 16, "group_size": 128}, "moe": {"routing": {"kind": "uniform"}}}
LIMITS = (60.0, 2.0)


def leaves(d: dict, prefix=()):
    for k, v in d.items():
        yield prefix + (k,)
        if isinstance(v, dict):
            yield from leaves(v, prefix + (k,))


PATHS = list(leaves(VALID))
junk = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([5e-324, 1e-30, 1e308, 1e12, -1.0, 0.0]),
    st.text(max_size=30), st.sampled_from(["../../x", "/abs", "", "h200-sxm", "trace", "poisson", "tile"]),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


def mutate(data: dict, path: tuple, action: str, value):
    doc = yaml.safe_load(yaml.safe_dump(data))
    node = doc
    for key in path[:-1]:
        node = node[key]
    if action == "drop":
        node.pop(path[-1], None)
    elif action == "add":
        node[f"{path[-1]}_extra"] = value
    else:
        node[path[-1]] = value
    return doc


def check(path: Path, source_text: str) -> None:
    t0 = time.perf_counter()
    try:
        loaded = pipeline.load(path)
        pipeline.cost(loaded, LIMITS)
        cfg = loaded.cfg
    except ConfigError as exc:
        line = exc.render()
        assert "\n" not in line and "Traceback" not in line
        assert exc.file == str(path) or exc.file == "--set"
        assert exc.line or exc.key or "YAML" in exc.message or "bytes long" in exc.message
    else:
        check_name(cfg.name)
        assert math.isfinite(cfg.budget_ms)
    assert time.perf_counter() - t0 < 10


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(PATHS), action=st.sampled_from(["replace", "replace", "drop", "add"]), value=junk)
def test_mutated_scenarios_load_or_fail_in_one_located_line(tmp_path, path, action, value):
    doc = mutate(VALID, path, action, value)
    text = yaml.safe_dump(doc, allow_unicode=True)
    target = tmp_path / "mutant.yaml"
    target.write_text(text, encoding="utf-8")
    check(target, text)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_garbled_yaml_text_loads_or_fails_in_one_located_line(tmp_path, data):
    text = yaml.safe_dump(VALID)
    at = data.draw(st.integers(0, len(text)))
    cut = data.draw(st.integers(0, 20))
    insert = data.draw(st.text(alphabet="&*![]{}:,-'\"\n\t #|>%@`?.0123456789abcxyz", max_size=20))
    garbled = text[:at] + insert + text[at + cut:]
    target = tmp_path / "garbled.yaml"
    target.write_text(garbled, encoding="utf-8")
    check(target, garbled)
