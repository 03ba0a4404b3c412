"""A battery of hostile and wrong inputs through the whole CLI (issue 29), each case with a time
and a memory limit, printing the counts that must all be zero:

    tracebacks          a Python traceback on stdout or stderr
    hangs               a case still running after --timeout seconds (killed)
    bad exit codes      an exit status other than 0 and 2 (1 only where documented: rows or
                        points that failed, counted apart)
    unlocated errors    an exit-2 message naming neither a file and line, nor --set or the
                        option it is about, nor the file that is wrong as a whole (a device,
                        a file too large, ...); or more than one line
    files changed       a file created, changed or removed in the case's working folder
                        outside its --out

    nice python benchmarks/battery.py [--timeout 60] [--max-gb 4] [--only SUBSTRING] [-v]

Not a test (it takes minutes): run by hand. Each case runs `hwsim.cli.main()` in a process
forked from this one (hwsim is imported once), in a fresh working folder, with stdout and
stderr in files beside it, RLIMIT_AS as its memory limit, and its own process group, killed
whole (Dask workers too) when the time is up.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import resource
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TINY = str(REPO / "tests" / "data" / "tiny-moe.yaml")
H200 = REPO / "hardware_profiles" / "h200-sxm.yaml"
BASE = (f"name: tiny\nhardware: h200-sxm\nmodel: {TINY}\nseed: 0\nbudget_ms: 10\n"
        "workload:\n  batch_size: 1\n  context_tokens: 512\n  decode_steps: 1\n")
HEADER = "name,hardware,model,phase,batch,context_tokens,prompt_tokens,kv_bits,launch,measured_ms,notes\n"


@dataclass
class Case:
    name: str
    args: list                      # CLI arguments; "{ws}" is replaced by the working folder
    files: dict = field(default_factory=dict)     # name -> str | bytes | "FIFO" | "DIR", in the folder
    env: dict = field(default_factory=dict)
    outs: tuple = ("out", "sw")     # the folders a case may write
    refuse: bool = False            # nonsense: exit 0 counts as "nonsense accepted"


# -- the cases ------------------------------------------------------------------------------

HOSTILE_VALUES = ["-1", "0", "1e9", "1e300", ".inf", ".nan", "abc", "true", "[]", "{}", "null", "1:20",
                  "1e-300", "1180591620717411303424", "''", "0x10", "'16'", "&a 1", "!!binary AAAA",
                  "1.5"]
SCENARIO_KEYS = ["workload.batch_size", "workload.context_tokens", "workload.decode_steps",
                 "workload.prompt_tokens", "budget_ms", "seed", "kv_cache.bits", "kv_cache.group_size",
                 "runtime.sm_clock", "runtime.kernel_records", "moe.routing.zipf_exponent",
                 "parallel.gpus", "kv_cache.sinks.tokens", "hardware_overrides.power.limit_w"]


def nested(dotted: str, value: str) -> str:
    parts = dotted.split(".")
    if parts[0] == "hardware_overrides":        # its keys are dotted profile paths, flat
        return f"hardware_overrides:\n  {'.'.join(parts[1:])}: {value}\n"
    lines = [f"{'  ' * i}{p}:" for i, p in enumerate(parts[:-1])]
    return "\n".join(lines + [f"{'  ' * (len(parts) - 1)}{parts[-1]}: {value}"]) + "\n"


def scenario_value_cases() -> list[Case]:
    cases = []
    for key in SCENARIO_KEYS:
        for value in HOSTILE_VALUES:
            base = BASE
            if key.startswith("workload."):
                base = base.replace(f"  {key.split('.')[1]}: ", "  _old_: ") if f"  {key.split('.')[1]}:" in base else base
                base = base.replace("workload:\n", "workload:\n" + nested(key, value).split("\n", 1)[1])
                base = re.sub(r"  _old_: .*\n", "", base)
            elif key in ("budget_ms", "seed"):
                base = re.sub(rf"{key}: .*\n", f"{key}: {value}\n", base)
            else:
                base = base + nested(key, value)
            cases.append(Case(f"value {key}={value}", ["run", "s.yaml", "--out", "out"], {"s.yaml": base}))
    return cases


def file_cases() -> list[Case]:
    big_line = "a: " + "x" * (5 * 2**20) + "\n"
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(9))
    contents = {
        "empty": "", "nul": BASE + "x: a\0b\n", "binary": bytes(range(256)) * 4, "latin1": BASE.encode() + b"n: \xe9\n",
        "bom": "\ufeff" + BASE, "list": "- a\n- b\n", "scalar": "hello\n", "big-line": big_line,
        "many-lines": BASE + "#\n" * 200_000, "bomb": bomb, "deep": "a: " + "[" * 500 + "]" * 500 + "\n",
        "dup-key": BASE + "seed: 1\n", "tab": BASE + "\tx: 1\n", "python-tag": "a: !!python/object:os.system x\n",
        "unknown-key": BASE + "nope: 1\n", "crlf": BASE.replace("\n", "\r\n"), "yaml-docs": BASE + "---\n" + BASE,
        "unclosed": BASE + "x: [1, 2\n", "huge-int": BASE.replace("seed: 0", "seed: " + "9" * 5000),
        "key-newline": BASE + '"a\\nb": 1\n', "merge-key": BASE + "<<: {seed: 3}\n",
    }
    cases = [Case(f"scenario {name}", ["run", "s.yaml", "--out", "out"], {"s.yaml": text})
             for name, text in contents.items()]
    for what, args in (("scenario", ["run", "{path}", "--out", "out"]), ("validate", ["validate", "{path}"]),
                       ("sweep", ["sweep", "{path}", "--out", "sw"])):
        for special, path in (("dev-zero", "/dev/zero"), ("dev-urandom", "/dev/urandom"), ("fifo", "fifo"),
                              ("folder", "dir"), ("missing", "missing.yaml"), ("proc", "/proc/self/environ")):
            cases.append(Case(f"{what} {special}", [a.replace("{path}", path) for a in args],
                              {"fifo": "FIFO", "dir": "DIR"}))
    return cases


def trace_cases() -> list[Case]:
    cases = []
    request = {"dev-zero": "/dev/zero", "fifo": "fifo", "folder": "dir", "missing": "nope.csv"}
    bodies = {"garbage": bytes(range(256)) * 10, "nul": "arrival_s,prompt_tokens,output_tokens\n1,2\0,3\n",
              "header": "a,b,c\n1,2,3\n", "negative": "arrival_s,prompt_tokens,output_tokens\n1,-2,3\n",
              "huge": "arrival_s,prompt_tokens,output_tokens\n1,99999999999999,3\n",
              "order": "arrival_s,prompt_tokens,output_tokens\n2,2,3\n1,2,3\n",
              "nan": "arrival_s,prompt_tokens,output_tokens\nnan,2,3\n", "quote": 'arrival_s,prompt_tokens\n"1,2\n',
              "jsonl": '{"timestamp": 1e400, "input_length": 2, "output_length": 3}\n',
              "jsonl-list": "[1, 2, 3]\n", "empty": "", "long-line": "{" + " " * (2 << 20) + "\n"}
    for name, path in request.items():
        cases.append(Case(f"request trace {name}", ["run", "--set", f"model={TINY}", "--set", "workload.arrivals.kind=trace",
                                                    "--set", f"workload.arrivals.trace={path}", "--out", "out"],
                          {"fifo": "FIFO", "dir": "DIR"}))
        cases.append(Case(f"routing trace {name}", ["run", "s.yaml", "--set", "moe.routing.kind=trace",
                                                    "--set", f"moe.routing.trace={path}", "--out", "out"],
                          {"s.yaml": BASE, "fifo": "FIFO", "dir": "DIR"}))
    for name, body in bodies.items():
        cases.append(Case(f"request trace {name}", ["run", "--set", f"model={TINY}", "--set", "workload.arrivals.kind=trace",
                                                    "--set", "workload.arrivals.trace=t.csv", "--out", "out"],
                          {"t.csv": body}))
    routing = {"garbage": bytes(range(256)) * 10, "nul": "step,layer,token,experts\n0,0,0,0 1\0\n",
               "ids": "step,layer,token,experts\n0,0,0,0 99\n", "header": "a,b\n1,2\n",
               "quote": 'step,layer,token,experts\n0,0,0,"0 1\n', "empty": "", "same": "step,layer,token,experts\n0,0,0,1 1\n"}
    for name, body in routing.items():
        cases.append(Case(f"routing trace {name}", ["run", "s.yaml", "--set", "moe.routing.kind=trace",
                                                    "--set", "moe.routing.trace=r.csv", "--out", "out"],
                          {"s.yaml": BASE, "r.csv": body}))
    return cases


def validate_cases() -> list[Case]:
    row = f"a,h200-sxm,{TINY},decode,1,512,0,16,graph,1.0,\n"
    bodies = {"header-only": HEADER, "missing-column": "name,hardware\na,b\n", "nul": HEADER + row.replace("1.0", "1\0"),
              "extra-field": HEADER + row.rstrip("\n") + ",x,y\n", "bad-number": HEADER + row.replace("1.0", "abc"),
              "negative": HEADER + row.replace(",1,512", ",-1,512"), "huge": HEADER + row.replace(",1,512", ",1e30,512"),
              "binary": bytes(range(256)) * 10, "quote": HEADER + 'a,"h200\n', "bom": "\ufeff" + HEADER + row,
              "ok": HEADER + row, "unknown-hardware": HEADER + row.replace("h200-sxm", "h999")}
    return [Case(f"validate {name}", ["validate", "d.csv"], {"d.csv": body}) for name, body in bodies.items()]


def sweep_spec(factors: str, extra: str = "", base: str | None = None) -> str:
    base = base or (f"\n  hardware: h200-sxm\n  model: {TINY}\n  workload: {{decode_steps: 1, context_tokens: 512}}")
    return f"name: t\nbase:{base}\nfactors:\n{factors}{extra}"


def sweep_cases() -> list[Case]:
    ok = "  - key: workload.batch_size\n    values: [1, 2]\n"
    filters = ["(10**64)**64 > 1", "__import__('os').system('true')", "p.__class__", "(lambda: 1)()",
               "'a' * 10**9", "[x for x in p]", "p['workload.batch_size'] ** 1e9 > 1", "1/0 > 1",
               "p['workload.batch_size'] in p", "x" * 2000, "not", "p['nope'] > 1"]
    cases = [Case(f"sweep filter {f[:30]}", ["sweep", "w.yaml", "--out", "sw"],
                  {"w.yaml": sweep_spec(ok, f"filter: {f!r}\n".replace("'", '"', 0))}) for f in filters]
    specs = {
        "override-typo": sweep_spec("  - key: hardware_overrides.hbm.peak_bandwith_gbps\n    values: [1]\n"),
        "override-nonsense": sweep_spec("  - key: hardware_overrides.sm.clock_mhz\n    values: [1e9]\n"),
        "million-points": sweep_spec("  - key: workload.batch_size\n    values: [" + ", ".join(map(str, range(1, 1001)))
                                     + "]\n  - key: seed\n    values: [" + ", ".join(map(str, range(1000))) + "]\n"),
        "empty-values": sweep_spec("  - key: workload.batch_size\n    values: []\n"),
        "through-scalar": sweep_spec(ok.replace("workload.batch_size", "budget_ms.x")),
        "unknown-hardware": sweep_spec("  - key: hardware\n    values: [h999]\n"),
        "coupled-mismatch": sweep_spec("  - keys: [seed, budget_ms]\n    values: [[1]]\n"),
        "base-text": "name: t\nbase: b.txt\nfactors:\n" + ok, "base-missing": "name: t\nbase: nope.yaml\nfactors:\n" + ok,
        "base-dev-zero": "name: t\nbase: /dev/zero\nfactors:\n" + ok, "base-list": "name: t\nbase: l.yaml\nfactors:\n" + ok,
        "base-binary": "name: t\nbase: bin.yaml\nfactors:\n" + ok, "name-slash": sweep_spec(ok).replace("name: t", "name: ../x"),
        "cross-check": sweep_spec("  - key: kv_cache.dequant\n    values: [decoder]\n"),
        "bool-factor": sweep_spec("  - key: workload.batch_size\n    values: [true]\n"),
    }
    files = {"b.txt": "just some text\n", "l.yaml": "- 1\n- 2\n", "bin.yaml": bytes(range(256))}
    cases += [Case(f"sweep {name}", ["sweep", "w.yaml", "--out", "sw"], {"w.yaml": text, **files})
              for name, text in specs.items()]
    for address in ("not a url", "http://x:1", "tcp://x:99999", "", "tcp://127.0.0.1:1"):
        cases.append(Case(f"sweep scheduler {address!r}", ["sweep", "w.yaml", "--out", "sw", "--scheduler", address],
                          {"w.yaml": sweep_spec(ok)}))
    cases.append(Case("sweep ok (runs Dask)", ["sweep", "w.yaml", "--out", "sw", "--workers", "1"],
                      {"w.yaml": sweep_spec(ok)}))
    return cases


def out_cases() -> list[Case]:
    manifest = '{"name": "my app", "files": {}}'
    run = ["run", "s.yaml", "--out"]
    return [
        Case("out is a file", run + ["out"], {"s.yaml": BASE, "out": "not a folder\n"}),
        Case("out holds a foreign manifest", run + ["out"], {"s.yaml": BASE, "out/manifest.json": manifest,
                                                              "out/app.js": "x"}),
        Case("out is a sweep folder", run + ["out"], {"s.yaml": BASE, "out/manifest.json": '{"sweep": {}}',
                                                       "out/results/part-1.parquet": "x"}),
        Case("out is /dev/null", run + ["/dev/null"], {"s.yaml": BASE}),
        Case("out name too long", run + ["x" * 300], {"s.yaml": BASE}),
        Case("out inside a file", run + ["f/out"], {"s.yaml": BASE, "f": "x"}),
        Case("out with a symlink", run + ["out"], {"s.yaml": BASE, "out/manifest.json": manifest, "out/l": "LINK"}),
        Case("sweep out is a bundle-like folder", ["sweep", "w.yaml", "--out", "out"],
             {"w.yaml": sweep_spec("  - key: seed\n    values: [1]\n"), "out/manifest.json": manifest, "out/x": "x"}),
        Case("run ok", run + ["out"], {"s.yaml": BASE}),
        Case("run ok twice (replaces its bundle)", run + ["out"], {"s.yaml": BASE}),
    ]


def profile_cases() -> list[Case]:
    import yaml
    profile = yaml.safe_load(H200.read_text())
    mutations = {"limit-1w": ("power", "limit_w", 1), "clock-1e9": ("sm", "clock_mhz", 1e9),
                 "negative-bw": ("hbm", "peak_bandwidth_gbps", -1), "zero-sms": ("sm", "count", 0),
                 "huge-sms": ("sm", "count", 10**9), "string-clock": ("sm", "clock_mhz", "fast"),
                 "bool-count": ("sm", "count", True), "min-over-max": ("power", "min_clock_mhz", 5000),
                 "tiny-hbm": ("hbm", "capacity_gb", 1e-9), "huge-hbm": ("hbm", "capacity_gb", 1e9)}
    cases = []
    for name, (block, key, value) in mutations.items():
        data = yaml.safe_load(yaml.safe_dump(profile))
        data["name"] = "mine"
        data[block][key] = {"value": value, "source": "battery"} if not isinstance(value, str) else value
        text = yaml.safe_dump(data)
        cases.append(Case(f"profile {name}", ["run", "s.yaml", "--out", "out"],
                          {"s.yaml": BASE.replace("h200-sxm", "mine"), "hardware_profiles/mine.yaml": text},
                          env={"HWSIM_HOME": "{ws}"}))
    cases.append(Case("profile missing source", ["run", "s.yaml", "--out", "out"],
                      {"s.yaml": BASE.replace("h200-sxm", "mine"),
                       "hardware_profiles/mine.yaml": H200.read_text().replace('source: "hardware.md 1.2 [N6]"', "")},
                      env={"HWSIM_HOME": "{ws}"}))
    return cases


def model_cases() -> list[Case]:
    tiny = Path(TINY).read_text()
    edits = {"dense-over-layers": tiny.replace("layers: 4", "layers: 2").replace("moe: {", "moe: {dense_layers: 5, "),
             "zero-experts": tiny.replace("experts: 8", "experts: 0"), "topk-over-experts": tiny.replace("top_k: 2", "top_k: 9"),
             "huge-heads": tiny.replace("heads: 8", "heads: 100000"), "zero-hidden": tiny.replace("hidden: 1024", "hidden: 0"),
             "shared-no-width": tiny.replace("expert_ffn: 2048}", "expert_ffn: 2048, shared_experts: 2}"),
             "no-moe-no-ffn": tiny.replace("moe: {experts: 8, top_k: 2, expert_ffn: 2048}\n", ""),
             "float-layers": tiny.replace("layers: 4", "layers: 4.5"), "string-layers": tiny.replace("layers: 4", "layers: '4'")}
    return [Case(f"model {name}", ["run", "s.yaml", "--out", "out"],
                 {"s.yaml": BASE.replace(TINY, "m.yaml"), "m.yaml": text}) for name, text in edits.items()]


def option_cases() -> list[Case]:
    run = ["run", "s.yaml", "--out", "out"]
    opts = [["--max-gb", "-1"], ["--max-gb", "nan"], ["--max-gb", "0"], ["--max-wall-s", "abc"], ["--max-wall-s", "1e-9"],
            ["--set", "noequals"], ["--set", "a..b=1"], ["--set", "workload.batch_size="], ["--set", "x=\0"],
            ["--set", "workload=3"], ["--set", "workload.batch_size=[1"], ["--set", "workload.batch_size=1e9"],
            ["--max-gb", "0.0001"]]
    cases = [Case(f"option {' '.join(o)!r}", run + o, {"s.yaml": BASE}) for o in opts]
    cases += [Case("sweep --workers 0", ["sweep", "w.yaml", "--workers", "0"],
                   {"w.yaml": sweep_spec("  - key: seed\n    values: [1]\n")}),
              Case("env HWSIM_MAX_GB abc", run, {"s.yaml": BASE}, env={"HWSIM_MAX_GB": "abc"}),
              Case("closed loop a million users", run + ["--set", "workload.arrivals.kind=closed",
                                                         "--set", "workload.arrivals.users=1000000"], {"s.yaml": BASE}),
              Case("lognormal sigma 1e6", run + ["--set", "workload.arrivals.kind=poisson", "--set", "workload.output.kind=lognormal",
                                                 "--set", "workload.output.sigma=1e6"], {"s.yaml": BASE})]
    return cases


def _kernel_trace(events: list, gz_body: bytes | None = None) -> bytes:
    import gzip
    import json
    body = gz_body if gz_body is not None else json.dumps({"traceEvents": events}).encode()
    return gzip.compress(body)


KT_LAUNCH = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "tid": 1, "ts": 10.0, "dur": 5.0,
             "args": {"External id": 1, "correlation": 7}}
KT_KERNEL = {"ph": "X", "cat": "kernel", "name": "void vectorized_elementwise_kernel<4>()", "ts": 20.0, "dur": 3.0,
             "args": {"External id": 1, "correlation": 7, "stream": 7, "grid": [128, 1, 1], "block": [128, 1, 1]}}
SCRIPT = "<script>alert(47)</script>"


KT_SETS = ["--set", f"model={TINY}", "--set", "workload.decode_steps=1", "--set", "workload.kernel_trace.path=k.json.gz",
           "--set", "workload.kernel_trace.batch_size=1", "--set", "workload.kernel_trace.context_tokens=64"]


def trace_bomb_cases() -> list[Case]:
    """Issue 47: kernel traces that explode (depth, strings, events, grids) or hold nonsense."""
    kt = KT_SETS
    def ev(base, **change):
        out = {**base, "args": {**base["args"]}}
        for key, value in change.items():
            (out["args"] if key in ("grid", "block", "correlation", "bytes", "External_id") else out)[
                key.replace("External_id", "External id")] = value
        return out
    bodies = {
        "deep": _kernel_trace([], b'{"x": ' + b"[" * 1_000_000 + b"]" * 1_000_000 + b', "traceEvents": []}'),
        "huge string": _kernel_trace([], b'{"x": "' + b"a" * 50_000_000 + b'", "traceEvents": []}'),
        "1e7 empty events": _kernel_trace([], b'{"traceEvents": [' + b",".join([b"{}"] * 10_000_000) + b"]}"),
        "grid 1e12": _kernel_trace([KT_LAUNCH, ev(KT_KERNEL, grid=[10**12, 10**6, 1])]),
        "grid 2^31-1": _kernel_trace([KT_LAUNCH, ev(KT_KERNEL, grid=[2**31 - 1, 65535, 65535])]),
        "negative dur": _kernel_trace([KT_LAUNCH, ev(KT_KERNEL, dur=-993.8)]),
        "dur 1e300": _kernel_trace([KT_LAUNCH, ev(KT_KERNEL, dur=1e300)]),
        "memcpy 1e18": _kernel_trace([KT_LAUNCH, {**ev(KT_KERNEL, bytes=1e18), "cat": "gpu_memcpy"}]),
        "args list": _kernel_trace([KT_LAUNCH, {**KT_KERNEL, "args": [1, 2]}]),
        "ts string": _kernel_trace([KT_LAUNCH, ev(KT_KERNEL, ts="12")]),
        "ts null": _kernel_trace([KT_LAUNCH, ev(KT_KERNEL, ts=None)]),
        "grid strings": _kernel_trace([KT_LAUNCH, ev(KT_KERNEL, grid=["a", "b", "c"])]),
        "correlation x": _kernel_trace([KT_LAUNCH, ev(KT_KERNEL, correlation="x")]),
        "external id object": _kernel_trace([ev(KT_LAUNCH, External_id={"a": 1}), KT_KERNEL]),
    }
    return [Case(f"i47 kernel trace {name}", ["run", "--out", "out", *kt], {"k.json.gz": body}, refuse=True)
            for name, body in bodies.items()]


def issue47_cases() -> list[Case]:
    """Issue 47's classes: trace bombs and wrongly typed trace fields, planted links, script in a
    bundle's fields, speculative sizing, impossible hardware (each case named "i47 ...")."""
    kt = KT_SETS
    cases = trace_bomb_cases()
    sweep = {"sweep": {"name": "s"}, "plots": [], "provenance": {},
             "summary": {"points": SCRIPT, "computed": SCRIPT, "reused": 1, "failed": 0}}
    import json
    cases.append(Case("i47 report of a sweep with script in its summary", ["report", "sw"],
                      {"sw/manifest.json": json.dumps(sweep)}))
    cases += [
        Case("i47 planted leftover link beside --out", ["run", "s.yaml", "--out", "out"],
             {"s.yaml": BASE, "victim/keep.txt": "x", ".out.hwsim-old-999999-x": "LINK:victim"}),
        Case("i47 --out a link to another folder", ["run", "s.yaml", "--out", "out"],
             {"s.yaml": BASE, "victim/keep.txt": "x", "out": "LINK:victim"}),
    ]
    draft = ["run", "--out", "out", "--set", "workload.decode_steps=1", "--set", "workload.speculative.method=draft",
             "--set", "workload.speculative.tokens=2"]
    cases += [Case(f"i47 speculative {name}", draft + ["--set", f"workload.speculative.draft={d}", *more], {},
                   refuse=True) for name, d, more in (
        ("671B draft for a 4-layer model", "deepseek-v3", ["--set", f"model={TINY}"]),
        ("draft of another vocabulary", "olmoe-1b-7b", []),
        ("draft beside Mixtral past the HBM", "mixtral-8x7b", ["--set", "model=mixtral-8x22b",
                                                                "--set", "parallel.allow_overcommit=true"]))]
    run = ["run", "s.yaml", "--out", "out"]
    cases += [Case(f"i47 hardware {name}", run + ["--set", change], {"s.yaml": BASE}, refuse=True) for name, change in (
        ("L2 of 1 TB", "hardware_overrides.l2.capacity_mib=1000000"),
        ("tensor clock above max", "hardware_overrides.power.tensor_clock_mhz=5000"))]
    cases += [Case("i47 two nodes without a NIC", run + ["--set", "parallel.gpus=2", "--set", "parallel.nodes=2",
                                                         "--set", "parallel.tp=2", "--set", "parallel.topology=t.yaml"],
                   {"s.yaml": BASE, "t.yaml": _no_nic_topology()}, refuse=True),
              Case("i47 host profile name ../../x", run + kt[4:] + ["--set", "workload.kernel_trace.host=../../x"],
                   {"s.yaml": BASE, "k.json.gz": _kernel_trace([KT_LAUNCH, KT_KERNEL])}, refuse=True),
              Case("i47 goal --vary seed", ["goal", "s.yaml", "--vary", "seed", "--target", "itl_ms.p50=5"],
                   {"s.yaml": BASE}, refuse=True),
              Case("i47 BurstGPT row of 999,999,999 tokens",
                   ["run", "--out", "out", "--set", f"model={TINY}", "--set", "workload.arrivals.kind=trace",
                    "--set", "workload.arrivals.trace=b.csv"],
                   {"b.csv": "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                             "0.5,ChatGPT,999999999,20,1000000019,Conversation log\n"}, refuse=True)]
    return cases


def _no_nic_topology() -> str:
    text = (REPO / "hardware_profiles" / "topologies" / "hgx-h200-8.yaml").read_text()
    return "\n".join(line for line in text.splitlines() if "scaleout" not in line) + "\n"


ALL = [scenario_value_cases, file_cases, trace_cases, validate_cases, sweep_cases, out_cases, profile_cases,
       model_cases, option_cases, issue47_cases]


# -- running one case -------------------------------------------------------------------------

def make_files(ws: Path, files: dict) -> None:
    for name, content in files.items():
        path = ws / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content == "FIFO":
            os.mkfifo(path)
        elif content == "DIR":
            path.mkdir()
        elif content == "LINK":
            os.symlink("/etc/hostname", path)
        elif isinstance(content, str) and content.startswith("LINK:"):
            os.symlink(content[5:], path)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


def snapshot(ws: Path, outs: tuple) -> dict[str, str]:
    """Every entry under ws outside the case's out folders -> a hash of what it is."""
    state = {}
    for root, dirs, names in os.walk(ws):
        rel_root = Path(root).relative_to(ws)
        if rel_root.parts and rel_root.parts[0] in outs:
            continue
        for name in names + [d for d in dirs if (Path(root) / d).is_symlink()]:
            path = Path(root) / name
            rel = str(path.relative_to(ws))
            if rel in outs:
                continue
            try:
                if path.is_symlink() or not path.is_file():
                    state[rel] = f"special {os.lstat(path).st_mode}"
                else:
                    state[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError as exc:
                state[rel] = f"unreadable {exc.errno}"
        for d in dirs:
            rel = str((Path(root) / d).relative_to(ws))
            if rel not in outs:
                state.setdefault(rel + "/", "dir")
    return state


def run_case(case: Case, ws: Path, timeout: float, max_gb: float):
    """(exit code or None on a hang, stdout, stderr, seconds)."""
    out_path, err_path = ws.parent / "stdout", ws.parent / "stderr"
    sys.stdout.flush()
    sys.stderr.flush()
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:                                                   # the child: one CLI command
        code = 1
        try:
            os.setpgid(0, 0)
            os.chdir(ws)
            for fd, path in ((1, out_path), (2, err_path)):
                f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(f, fd)
                os.close(f)
            resource.setrlimit(resource.RLIMIT_AS, (int(max_gb * 2**30), int(max_gb * 2**30)))
            for key, value in case.env.items():
                os.environ[key] = value.replace("{ws}", str(ws))
            import hwsim.cli
            sys.argv = ["hwsim", *[str(a).replace("{ws}", str(ws)) for a in case.args]]
            try:
                hwsim.cli.main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                if not isinstance(exc.code, (int, type(None))):
                    print(exc.code, file=sys.stderr)
        except BaseException:                                      # noqa: BLE001 - what we count
            import traceback
            traceback.print_exc()
            code = 1
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.02)
    else:
        for sig in (signal.SIGKILL,):
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                pass
        os.waitpid(pid, 0)
        status = None
    try:
        os.killpg(pid, signal.SIGKILL)        # Dask workers or plotters left behind
    except (ProcessLookupError, PermissionError):
        pass
    code = None if status is None else (os.waitstatus_to_exitcode(status))
    read = lambda p: p.read_text(errors="replace") if p.exists() else ""   # noqa: E731
    return code, read(out_path), read(err_path), time.perf_counter() - t0


WHOLE_FILE = re.compile(r"not a regular file|file not found|is a folder|bytes long|more than [\d,]+ (bytes|lines)|"
                        r"not UTF-8|NUL byte|not an hwsim bundle|names a file|cannot write|permission denied|"
                        r"folder name|not a valid gzip|another hwsim process|File exists|Not a directory|"
                        r"nests deeper|string longer than|more than [\d,]+ events|"
                        r"traceEvents\[\d+\]", re.I)     # a trace's event, by its index
USAGE = re.compile(r"(Invalid value|No such option|Missing argument|Got unexpected extra).*'?--?\w")


def located(message: str) -> bool:
    return bool(re.search(r"\S:\d+[,:]", message) or "--set" in message or re.search(r"key '--", message)
                or re.search(r"key 'HWSIM_", message) or WHOLE_FILE.search(message))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds a case may take (then: a hang)")
    ap.add_argument("--max-gb", type=float, default=6.0, help="address space of a case (RLIMIT_AS), GiB")
    ap.add_argument("--only", default="", help="run only cases whose name holds this")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every case")
    args = ap.parse_args()

    sys.path.insert(0, str(REPO))
    os.environ["PYTHONPATH"] = str(REPO)
    import hwsim.cli  # noqa: F401 - imported once, before the forks
    import hwsim.config.load  # noqa: F401

    cases = [c for make in ALL for c in make() if args.only in c.name]
    counts = {"cases": 0, "tracebacks": 0, "hangs": 0, "bad exit codes": 0, "unlocated errors": 0,
              "files changed": 0, "nonsense accepted": 0, "script in a page": 0, "exit 0": 0, "exit 2": 0, "exit 1 (failed rows/points)": 0}
    problems = []
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hwsim-battery-") as tmp:
        for i, case in enumerate(cases):
            ws = Path(tmp) / f"case{i}" / "ws"
            ws.mkdir(parents=True)
            make_files(ws, case.files)
            if case.name.startswith("run ok twice"):
                run_case(case, ws, args.timeout, args.max_gb)
            before = snapshot(ws, case.outs)
            code, out, err, seconds = run_case(case, ws, args.timeout, args.max_gb)
            after = snapshot(ws, case.outs)
            counts["cases"] += 1
            lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("progress:")]
            found = []
            if "Traceback" in out + err:
                found.append("tracebacks")
            if code is None:
                found.append("hangs")
            elif code == 1 and re.search(r"rows failed|points failed", err) and "internal error" not in err:
                counts["exit 1 (failed rows/points)"] += 1
            elif code not in (0, 2):
                found.append("bad exit codes")
            else:
                counts[f"exit {code}"] += 1
            usage = code == 2 and lines and lines[0].startswith("Usage:") and any(USAGE.search(ln) for ln in lines)
            if code == 2 and not usage and (len(lines) != 1 or not located(lines[0])):
                found.append("unlocated errors")
            if before != after:
                found.append("files changed")
            if case.refuse and code == 0:
                found.append("nonsense accepted")
            if any(SCRIPT in p.read_text(errors="replace") for o in case.outs for p in (ws / o).rglob("*.html")
                   if p.is_file()):
                found.append("script in a page")
            for kind in found:
                counts[kind] += 1
            if found:
                changed = sorted(set(before.items()) ^ set(after.items()))[:4]
                problems.append(f"{case.name}: {', '.join(found)}; exit {code}; "
                                f"{(lines[-1] if lines else err.strip()[-300:])[:300]!r}"
                                + (f"; changed {changed}" if "files changed" in found else ""))
            if args.verbose:
                print(f"{seconds:6.2f} s  exit {code}  {case.name}: {(lines[0] if lines else '')[:150]}", flush=True)
    for p in problems:
        print("PROBLEM", p)
    print(f"\n{counts['cases']} cases in {time.perf_counter() - t_all:.0f} s")
    for key in ("tracebacks", "hangs", "bad exit codes", "unlocated errors", "files changed",
                "nonsense accepted", "script in a page"):
        print(f"  {key:28s} {counts[key]}")
    print(f"  ({counts['exit 0']} exit 0, {counts['exit 2']} exit 2, "
          f"{counts['exit 1 (failed rows/points)']} exit 1 for failed rows or points)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
