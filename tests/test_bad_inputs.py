"""A battery of bad inputs and faults, as a new user (or a file from the internet) would give
them. Every case asserts: the documented exit code (README, "Exit status"); one line on
stderr, naming where the problem is; no traceback; no file written anywhere in the working
folder (so nothing outside --out); the earlier bundle in --out byte-for-byte intact; an
answer within 10 s. The CLI runs in-process (typer's CliRunner) to keep this fast."""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hwsim.cli import app

DATA = Path(__file__).parent / "data"
TINY = str(DATA / "tiny-moe.yaml")
REPO = Path(__file__).resolve().parents[1]
HEADER = "name,hardware,model,phase,batch,context_tokens,prompt_tokens,kv_bits,launch,measured_ms,notes\n"
BASE = (f"name: tiny\nhardware: h200-sxm\nmodel: {TINY}\nseed: 0\nbudget_ms: 10\n"
        f"workload:\n  batch_size: 1\n  context_tokens: 512\n  decode_steps: 1\n")
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(9))


def snapshot(root: Path) -> dict[str, str]:
    """Every file under root (hidden ones too) -> SHA-256 of its bytes."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def invoke(args: list[str], env: dict | None = None):
    t0 = time.perf_counter()
    res = CliRunner().invoke(app, [str(a) for a in args], env=env)
    return res, time.perf_counter() - t0


def assert_clean(res, seconds: float, code: int, where: str | tuple = ()):
    """Exit code, one line on stderr naming `where`, no traceback, within 10 s."""
    assert res.exit_code == code, (res.exit_code, res.stderr, res.exception)
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.stderr + res.stdout
    for w in (where,) if isinstance(where, str) else where:
        assert w in lines[0], (w, lines[0])
    assert seconds < 10, seconds


@pytest.fixture(scope="module")
def old_bundle(tmp_path_factory) -> Path:
    """A real bundle from an earlier run, to check that failures leave it alone."""
    root = tmp_path_factory.mktemp("old")
    (root / "s.yaml").write_text(BASE)
    res, _ = invoke(["run", root / "s.yaml", "--out", root / "bundle", "--trace"])
    assert res.exit_code == 0, res.stderr
    return root / "bundle"


@pytest.fixture
def ws(tmp_path, monkeypatch, old_bundle):
    """A working folder (the cwd) holding a copy of the old bundle at ./out."""
    monkeypatch.chdir(tmp_path)
    shutil.copytree(old_bundle, tmp_path / "out")
    return tmp_path


def write(ws: Path, name: str, text: str) -> Path:
    path = ws / name
    path.write_text(text)
    return path


def write_bytes(ws: Path, name: str, data: bytes) -> Path:
    path = ws / name
    path.write_bytes(data)
    return path


def spec(ws: Path, factors: str = "  - key: workload.batch_size\n    values: [1, 2]\n", extra: str = "",
         name: str = "t") -> Path:
    base = "".join("  " + ln + "\n" for ln in BASE.replace("name: tiny\n", "").splitlines())
    return write(ws, "sweep.yaml", f"name: {name}\nbase:\n{base}factors:\n{factors}{extra}")


def scenario(ws: Path, extra: str = "", **replace: str) -> Path:
    text = BASE
    for key, value in replace.items():
        text = "\n".join(f"{key}: {value}" if ln.startswith(f"{key}:") else ln for ln in text.splitlines()) + "\n"
    return write(ws, "bad.yaml", text + extra)


def profile(ws: Path, old: str, new: str) -> Path:
    text = (REPO / "hardware_profiles" / "h200-sxm.yaml").read_text()
    assert old in text
    return write(ws, "chip.yaml", text.replace(old, new, 1))


def csv(ws: Path, rows: str) -> Path:
    return write(ws, "cases.csv", HEADER + rows)


OK_ROW = "r,h200-sxm,mixtral-8x7b,decode,{batch},512,0,16,graph,8.8,\n"

# (id, build the arguments in the workspace, exit code, what the message must name)
CASES = [
    # --- code execution: a sweep filter is parsed by hwsim.config.safe_expr, never eval'd
    ("filter-subclasses", lambda ws: ["sweep", spec(ws, extra='filter: "().__class__.__base__.__subclasses__()"\n'),
                                      "--out", ws / "out"], 2, ("sweep.yaml:", "key 'filter'")),
    ("filter-import-os", lambda ws: ["sweep", spec(ws, extra="filter: \"__import__('os').system('touch PWNED')\"\n"),
                                     "--out", ws / "out"], 2, "function calls are not allowed"),
    ("filter-attribute", lambda ws: ["sweep", spec(ws, extra='filter: "p.__class__ == 1"\n'), "--out", ws / "out"],
     2, "filter"),
    ("filter-lambda", lambda ws: ["sweep", spec(ws, extra='filter: "(lambda: 1)()"\n'), "--out", ws / "out"],
     2, "filter"),
    ("filter-comprehension", lambda ws: ["sweep", spec(ws, extra='filter: "[x for x in (1,)]"\n'),
                                         "--out", ws / "out"], 2, "filter"),
    ("filter-unknown-factor", lambda ws: ["sweep", spec(ws, extra="filter: \"p['nope'] > 1\"\n"), "--out", ws / "out"],
     2, "'nope' is not a factor"),
    ("filter-huge-power", lambda ws: ["sweep", spec(ws, extra='filter: "workload.batch_size ** 10 ** 10 > 1"\n'),
                                      "--out", ws / "out"], 2, "too large"),
    ("filter-string-times", lambda ws: ["sweep", spec(ws, extra="filter: \"'a' * 1000000000 == 'a'\"\n"),
                                        "--out", ws / "out"], 2, "arithmetic needs numbers"),
    ("filter-syntax", lambda ws: ["sweep", spec(ws, extra='filter: "workload.batch_size <"\n'), "--out", ws / "out"],
     2, "syntax error"),
    ("filter-too-long", lambda ws: ["sweep", spec(ws, extra="filter: \"" + " or ".join(["workload.batch_size > 1"] * 80)
                                                  + "\"\n"), "--out", ws / "out"], 2, "characters long"),
    ("filter-too-many-parts", lambda ws: ["sweep", spec(ws, extra="filter: \"" + "not " * 240 + "True\"\n"),
                                          "--out", ws / "out"], 2, "parts"),
    ("filter-division-by-zero", lambda ws: ["sweep", spec(ws, extra='filter: "workload.batch_size / 0 > 1"\n'),
                                            "--out", ws / "out"], 2, "division by zero"),
    # --- writes outside the output folder
    ("name-dotdot", lambda ws: ["run", scenario(ws, name="../../../../tmp/x")], 2, ("bad.yaml:1", "key 'name'")),
    ("name-absolute", lambda ws: ["run", scenario(ws, name="/abs/dir")], 2, "key 'name'"),
    ("name-empty", lambda ws: ["run", scenario(ws, name='""')], 2, "key 'name'"),
    ("name-dot", lambda ws: ["run", scenario(ws, name="'..'")], 2, "key 'name'"),
    ("name-300-chars", lambda ws: ["run", scenario(ws, name="n" * 300)], 2, "at most 100 characters"),
    ("name-backslash", lambda ws: ["run", scenario(ws, name="'a\\b'")], 2, "key 'name'"),
    ("name-nul", lambda ws: ["run", scenario(ws, name='"a\\0b"')], 2, "key 'name'"),
    ("name-set-escape", lambda ws: ["run", scenario(ws), "--set", "name=../escape"], 2, ("--set", "key 'name'")),
    ("sweep-name-escape", lambda ws: ["sweep", spec(ws, name="../x")], 2, ("sweep.yaml:1", "key 'name'")),
    ("out-300-chars", lambda ws: ["run", scenario(ws), "--out", ws / ("o" * 300)], 2, "--out"),
    ("out-is-a-file", lambda ws: ["run", scenario(ws), "--out", write(ws, "f.txt", "x")], 2, ("f.txt", "--out")),
    ("out-foreign-folder", lambda ws: ["run", scenario(ws), "--out", ws / "mine"], 2, "not an hwsim bundle"),
    ("out-under-a-file", lambda ws: ["run", scenario(ws), "--out", write(ws, "g.txt", "x") / "sub"], 2, "g.txt"),
    ("out-unwritable", lambda ws: ["run", scenario(ws), "--out", "/proc/hwsim-test/out"], 2, "/proc"),
    ("sweep-out-is-a-file", lambda ws: ["sweep", spec(ws), "--out", write(ws, "f.txt", "x")], 2, ("f.txt", "--out")),
    ("sweep-out-foreign", lambda ws: ["sweep", spec(ws), "--out", ws / "mine"], 2, "not an hwsim bundle"),
    ("sweep-out-unwritable", lambda ws: ["sweep", spec(ws), "--out", "/proc/hwsim-test/out"], 2, "/proc"),
    # --- hangs and unbounded memory
    ("alias-bomb-scenario", lambda ws: ["run", write(ws, "bomb.yaml", BASE + BOMB), "--out", ws / "out"], 2,
     ("bomb.yaml:", "aliases")),
    ("alias-bomb-sweep", lambda ws: ["sweep", write(ws, "bomb.yaml", BOMB + "name: t\n")], 2, "bomb.yaml:"),
    ("alias-bomb-set", lambda ws: ["run", scenario(ws), "--set", "description=" + BOMB.replace("\n", ", ")], 2,
     "--set"),
    ("alias-recursive", lambda ws: ["run", write(ws, "rec.yaml", BASE + "x: &r [*r]\n")], 2, "rec.yaml:"),
    ("deep-nesting", lambda ws: ["run", write(ws, "deep.yaml", BASE + "x: " + "[" * 5000 + "]" * 5000 + "\n")], 2,
     "deep.yaml"),
    ("huge-file", lambda ws: ["run", write(ws, "huge.yaml", BASE + "# " + "x" * 5_000_000 + "\n")], 2, "huge.yaml"),
    ("5000-digit-int", lambda ws: ["run", scenario(ws, seed="9" * 5000)], 2, "bad.yaml"),
    ("batch-1e6", lambda ws: ["run", "--set", "workload.batch_size=1000000"], 2,
     ("--set", "workload.batch_size", "--max-wall-s")),
    ("decode-steps-1e9", lambda ws: ["run", scenario(ws), "--set", "workload.decode_steps=1000000000"], 2,
     ("workload.decode_steps", "days")),
    ("decode-steps-1e9-file", lambda ws: ["run", write(ws, "steps.yaml", BASE.replace("decode_steps: 1",
                                                                                     "decode_steps: 1000000000"))],
     2, ("steps.yaml:9", "key 'workload.decode_steps'", "HWSIM_MAX_WALL_S")),
    ("serving-requests-1e7", lambda ws: ["run", scenario(ws, extra="  arrivals: {kind: poisson, requests: 10000000}\n")],
     2, ("bad.yaml:", "workload.arrivals.requests")),
    ("memory-limit", lambda ws: ["run", scenario(ws), "--set", "workload.decode_steps=10000000",
                                 "--set", "runtime.kernel_records=-1", "--max-wall-s", "1e9"], 2, "--max-gb"),
    ("bad-max-wall", lambda ws: ["run", scenario(ws), "--max-wall-s", "-1"], 2, "--max-wall-s"),
    ("sweep-workers-negative", lambda ws: ["sweep", spec(ws), "--workers", "-1"], 2, "--workers"),
    ("sweep-workers-zero", lambda ws: ["sweep", spec(ws), "--workers", "0"], 2, "--workers"),
    ("sweep-workers-huge", lambda ws: ["sweep", spec(ws), "--workers", "100000"], 2, "--workers"),
    ("sweep-point-too-costly", lambda ws: ["sweep", spec(ws, "  - key: workload.decode_steps\n"
                                                         "    values: [1, 1000000000]\n")], 2,
     ("sweep.yaml:", "workload.decode_steps")),
    # --- non-finite or absurd numbers
    ("budget-inf", lambda ws: ["run", scenario(ws, budget_ms=".inf")], 2, ("bad.yaml:5", "key 'budget_ms'")),
    ("budget-nan", lambda ws: ["run", scenario(ws, budget_ms=".nan")], 2, "key 'budget_ms'"),
    ("budget-set-inf", lambda ws: ["run", scenario(ws), "--set", "budget_ms=.inf"], 2, ("--set", "budget_ms")),
    ("context-1e16", lambda ws: ["run", scenario(ws), "--set", "workload.context_tokens=10000000000000000"], 2,
     "workload.context_tokens"),
    ("override-bw-inf", lambda ws: ["run", scenario(ws, extra="hardware_overrides: {hbm.peak_bandwidth_gbps: .inf}\n")],
     2, ("bad.yaml:", "hardware_overrides.hbm.peak_bandwidth_gbps")),
    ("override-bw-1e-30", lambda ws: ["run", scenario(ws, extra="hardware_overrides: {hbm.peak_bandwidth_gbps: 1.0e-30}\n")],
     2, "hardware_overrides.hbm.peak_bandwidth_gbps"),
    ("override-bw-5e-324", lambda ws: ["run", scenario(ws, extra="hardware_overrides: {hbm.peak_bandwidth_gbps: 5.0e-324}\n")],
     2, "hardware_overrides.hbm.peak_bandwidth_gbps"),
    ("override-bw-1e-7", lambda ws: ["run", scenario(ws), "--set", "hardware_overrides.hbm.peak_bandwidth_gbps=1.0e-7"],
     2, "hardware_overrides.hbm.peak_bandwidth_gbps"),
    ("override-graph-us-1e308", lambda ws: ["run", scenario(ws), "--set", "hardware_overrides.launch.graph_us=1.0e+308"],
     2, "hardware_overrides.launch.graph_us"),
    ("override-stacks-huge", lambda ws: ["run", scenario(ws), "--set", "hardware_overrides.hbm.stacks=1000000"],
     2, "hardware_overrides.hbm.stacks"),
    ("profile-channels-1e12", lambda ws: ["run", scenario(ws, hardware=profile(
        ws, "channels_per_stack: {value: 32", "channels_per_stack: {value: 1000000000000"))], 2,
        ("chip.yaml:", "hbm.channels_per_stack")),
    ("profile-bw-inf", lambda ws: ["run", scenario(ws, hardware=profile(
        ws, "peak_bandwidth_gbps: {value: 4800", "peak_bandwidth_gbps: {value: .inf"))], 2,
        ("chip.yaml:", "hbm.peak_bandwidth_gbps")),
    ("profile-bw-tiny", lambda ws: ["run", scenario(ws, hardware=profile(
        ws, "peak_bandwidth_gbps: {value: 4800", "peak_bandwidth_gbps: {value: 1.0e-30"))], 2,
        ("chip.yaml:", "hbm.peak_bandwidth_gbps")),
    ("profile-sm-count-huge", lambda ws: ["run", scenario(ws, hardware=profile(
        ws, "count: {value: 132", "count: {value: 1000000"))], 2, ("chip.yaml:", "sm.count")),
    ("profile-graph-us-huge", lambda ws: ["run", scenario(ws, hardware=profile(
        ws, "graph_us: {value: 0.45", "graph_us: {value: 1.0e+308"))], 2, ("chip.yaml:41", "launch.graph_us")),
    ("model-layers-huge", lambda ws: ["run", scenario(ws, model=write(
        ws, "m.yaml", Path(TINY).read_text().replace("layers: 4", "layers: 100000000")))], 2,
        ("m.yaml:3", "key 'layers'")),
    ("model-experts-huge", lambda ws: ["run", scenario(ws, model=write(
        ws, "m.yaml", Path(TINY).read_text().replace("experts: 8", "experts: 1000000000")))], 2,
        ("m.yaml:7", "key 'moe.experts'")),
    ("model-file-bomb", lambda ws: ["run", scenario(ws, model=write(ws, "m.yaml", BOMB))], 2, "m.yaml:"),
    # --- validate
    ("validate-header-only", lambda ws: ["validate", csv(ws, "")], 2, ("cases.csv:2", "no data rows")),
    ("validate-all-rows-fail", lambda ws: ["validate", csv(ws, "a,h900,mixtral-8x7b,decode,1,512,0,16,graph,8,\n"
                                                               "b,h200-sxm,gpt-9,decode,1,512,0,16,graph,8,\n")],
     1, ("2 of 2 rows failed", "line 2")),
    ("validate-batch-0", lambda ws: ["validate", csv(ws, OK_ROW.format(batch=0))], 2, ("cases.csv:2", "key 'batch'")),
    ("validate-batch-huge", lambda ws: ["validate", csv(ws, OK_ROW.format(batch=10**9))], 2, "key 'batch'"),
    ("validate-batch-float", lambda ws: ["validate", csv(ws, OK_ROW.format(batch="1e3"))], 2, "key 'batch'"),
    ("validate-unicode-digit", lambda ws: ["validate", csv(ws, OK_ROW.format(batch="\u0663"))], 2, "key 'batch'"),
    ("validate-measured-inf", lambda ws: ["validate", csv(ws, OK_ROW.format(batch=1).replace(",8.8,", ",inf,"))], 2,
     "key 'measured_ms'"),
    ("validate-too-many-rows", lambda ws: ["validate", csv(ws, OK_ROW.format(batch=1) * 10_001)], 2,
     ("cases.csv:10002", "more than 10000 rows")),
    ("validate-missing-file", lambda ws: ["validate", ws / "nope.csv"], 2, "nope.csv"),
    ("validate-a-folder", lambda ws: ["validate", ws / "out"], 2, "is a folder, not a file"),
    ("validate-binary", lambda ws: ["validate", write_bytes(ws, "bin.csv", b"\xff\xfe\x00garbage")], 2, "bin.csv"),
    ("validate-bad-set", lambda ws: ["validate", csv(ws, OK_ROW.format(batch=1)), "--set", "budget_ms=.inf"], 2,
     "--set"),
    # --- report
    ("report-missing", lambda ws: ["report", ws / "nothing"], 2, "nothing"),
    ("report-no-manifest", lambda ws: ["report", ws], 2, "no manifest.json"),
    ("report-manifest-list", lambda ws: ["report", (ws / "r").mkdir() or write(ws, "r/manifest.json", "[1]").parent],
     2, "manifest.json"),
    ("report-manifest-garbage", lambda ws: ["report", (ws / "r").mkdir() or write(ws, "r/manifest.json", "{").parent],
     2, "manifest.json"),
    # --- other bad scenarios
    ("scenario-missing", lambda ws: ["run", ws / "nope.yaml"], 2, ("nope.yaml", "file not found")),
    ("scenario-a-folder", lambda ws: ["run", ws / "out"], 2, "out"),
    ("scenario-a-list", lambda ws: ["run", write(ws, "l.yaml", "- 1\n- 2\n")], 2, "l.yaml:1"),
    ("scenario-unknown-key", lambda ws: ["run", scenario(ws, extra="bogus: 1\n")], 2, ("bad.yaml:10", "key 'bogus'")),
    ("profile-path-escape", lambda ws: ["run", scenario(ws, hardware="../../../../etc/passwd")], 2,
     ("bad.yaml:2", "unknown hardware profile")),
    ("set-without-equals", lambda ws: ["run", scenario(ws), "--set", "budget_ms"], 2, "--set"),
    ("set-through-a-number", lambda ws: ["run", scenario(ws), "--set", "budget_ms.x=1"], 2, "--set"),
    ("sweep-base-missing", lambda ws: ["sweep", write(ws, "s.yaml", "base: nope.yaml\nfactors: [{key: seed, values: [1]}]\n")],
     2, ("s.yaml:1", "key 'base'")),
    ("sweep-no-values", lambda ws: ["sweep", spec(ws, "  - key: seed\n    values: []\n")], 2, "sweep.yaml:"),
    ("sweep-factor-bad-value", lambda ws: ["sweep", spec(ws, "  - key: budget_ms\n    values: [.inf]\n")], 2,
     ("sweep.yaml:13", "factors.0.values.0", "not a finite number")),
]


@pytest.mark.parametrize("build,code,where", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input(ws, build, code, where):
    (ws / "mine").mkdir()
    (ws / "mine" / "notes.txt").write_text("someone's files")
    args = build(ws)
    before = snapshot(ws)
    res, seconds = invoke(args)
    assert_clean(res, seconds, code, where)
    assert snapshot(ws) == before               # nothing written, the old bundle and ./mine intact
    assert not (ws / "PWNED").exists() and not Path("/tmp/x").exists()


def test_battery_has_sixty_cases():
    assert len(CASES) >= 60 and len({c[0] for c in CASES}) == len(CASES)
