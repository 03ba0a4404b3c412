"""`hwsim report DIR`: one self-contained index.html for a run bundle or a sweep folder.

Every plot is embedded as a base64 PNG, so the page opens from disk in any browser with no
server. It shows the summary table, the breakdown, the resolved configuration and the
provenance (version, git SHA, seed, the hardware profile's sources), and says which figures
the bundle lacks.

A bundle may come from elsewhere (a tarball), and the page is made to be shared: every file is
read through bundle_file, which takes only a regular file directly inside the folder (no
symbolic link, nothing that resolves outside it), of bounded size; a figure must also be a PNG
and, where the manifest lists the bundle's files, match its SHA-256 (issue 29). Anything else
is left out of the page, with a line saying why.
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import json
import os
import stat
from pathlib import Path

import pandas as pd

from hwsim.errors import ConfigError
from hwsim.summary import RunSummary

PLOTS = ["breakdown.png", "heatmap.png", "pareto.png", "gantt.png", "channels.png", "itl_cdf.png",
         "ttft_cdf.png", "timeline.png", "tornado.png", "frontier.png"]
# the figures `hwsim run --plots` draws (a sweep's manifest lists the ones it drew)
RUN_PLOTS = ["breakdown.png", "gantt.png", "channels.png"]
SERVING_PLOTS = ["breakdown.png", "channels.png", "itl_cdf.png", "ttft_cdf.png", "timeline.png"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_BYTES = {".png": 32 * 2**20, ".json": 256 * 2**20, ".parquet": 1024 * 2**20}

STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.85em}td,th{border:1px solid #ddd;padding:3px 7px;text-align:right}
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}img{max-width:100%;margin:.5em 0}
pre{background:#f7f7f7;padding:1em;overflow:auto;font-size:.8em;max-height:30em}.over{color:#b00}"""
CHECK = """<script>window.addEventListener('load',()=>{const im=[...document.images];
const ok=im.filter(i=>i.complete&&i.naturalWidth>0).length;
document.title='hwsim report: '+ok+'/'+im.length+' images loaded';
document.body.dataset.images=ok+'/'+im.length;});</script>"""


class Refused(Exception):
    """A file of the bundle that is not read: the reason, for the page and stderr."""


def bundle_file(folder: Path, name: str) -> bytes:
    """The bytes of `name`, a regular file directly inside `folder`; FileNotFoundError if it
    is not there, Refused if it is not a plain file of the bundle or is too large."""
    path = folder / name
    st = os.lstat(path)                  # FileNotFoundError: missing
    if stat.S_ISLNK(st.st_mode):
        raise Refused("a symbolic link (only regular files inside the bundle are read)")
    if not stat.S_ISREG(st.st_mode):
        raise Refused("not a regular file")
    if path.resolve().parent != folder.resolve():
        raise Refused("resolves outside the bundle")
    limit = MAX_BYTES[path.suffix]
    # no link followed and no FIFO waited on, even if the file was swapped since lstat
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise Refused("not a regular file")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise Refused(f"larger than {limit / 2**20:g} MiB")
    return data


def _figure(folder: Path, name: str, listed: dict | None) -> str:
    """The figure as an <img> of its PNG bytes; Refused if they are not a PNG of this bundle."""
    data = bundle_file(folder, name)
    if not data.startswith(PNG_SIGNATURE):
        raise Refused("not a PNG image")
    if listed is not None and listed.get(name) != hashlib.sha256(data).hexdigest():
        raise Refused("does not match the SHA-256 that manifest.json lists for it")
    return f'<img alt="{html.escape(name)}" src="data:image/png;base64,{base64.b64encode(data).decode()}">'


def _kv_table(d: dict) -> str:
    rows = "".join(f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(_fmt(v))}</td></tr>"
                   for k, v in d.items() if not isinstance(v, (dict, list)))
    return f"<table>{rows}</table>"


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _text(v) -> str:
    """Any value read from a bundle, as HTML text: escaped whatever its expected type (a
    manifest from elsewhere may hold a <script> where a count belongs)."""
    return html.escape(_fmt(v))


def render(folder: Path) -> tuple[str, list[str]]:
    """The page, and a line for each figure it leaves out (missing, or refused and why)."""
    manifest_path = folder / "manifest.json"
    try:
        manifest = json.loads(bundle_file(folder, "manifest.json").decode("utf-8"))
    except (FileNotFoundError, NotADirectoryError):
        raise ConfigError("no manifest.json: not a run bundle or sweep folder", file=str(folder)) from None
    except Refused as exc:
        raise ConfigError(f"manifest.json is refused: {exc}", file=str(manifest_path)) from None
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as exc:
        raise ConfigError(f"manifest.json cannot be read: {exc}", file=str(manifest_path)) from None
    except RecursionError:          # nested past the parser's depth: no manifest hwsim writes is
        raise ConfigError("manifest.json is nested too deep to be an hwsim manifest",
                          file=str(manifest_path)) from None
    try:
        return _render(folder, manifest)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ConfigError(f"manifest.json is not an hwsim run or sweep manifest ({type(exc).__name__}: "
                          f"{exc})", file=str(manifest_path)) from None


def _render(folder: Path, manifest: dict) -> tuple[str, list[str]]:
    if not isinstance(manifest, dict):
        raise TypeError("the top level is not a mapping")
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>hwsim report</title>"
             f"<style>{STYLE}</style>{CHECK}</head><body>"]
    if "sweep" in manifest:
        parts += _sweep_sections(folder, manifest)
    else:
        parts += _run_sections(manifest)
    figures, notes = _figures(folder, manifest)
    parts += figures
    prov = manifest.get("provenance", {})
    parts.append(f"<h2>provenance</h2>{_kv_table({**prov, 'seed': manifest.get('seed', '')})}")
    if "hardware_profile" in manifest:
        sources = _sources(manifest["hardware_profile"])
        rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(_fmt(v))}</td><td>{html.escape(s)}</td></tr>"
                       for k, v, s in sources)
        parts.append(f"<h2>hardware profile and sources</h2><table><tr><th>field</th><th>value</th>"
                     f"<th>source</th></tr>{rows}</table>")
    config = manifest.get("resolved_config") or manifest.get("sweep")
    parts.append(f"<h2>resolved configuration</h2><pre>{html.escape(json.dumps(config, indent=2))}</pre>")
    parts.append("</body></html>")
    return "\n".join(parts), notes


def _figures(folder: Path, manifest: dict) -> tuple[list[str], list[str]]:
    """The page's figure sections, and a line for each figure left out: refused (why), or
    missing among those this kind of bundle has when drawn in full."""
    if "sweep" in manifest:
        expected = [Path(p).name for p in manifest.get("plots", [])]
    else:
        expected = SERVING_PLOTS if RunSummary.from_dict(manifest["summary"]).serving else RUN_PLOTS
    listed = manifest.get("files") if isinstance(manifest.get("files"), dict) else None
    parts, refused, missing = [], [], []
    for name in PLOTS:
        try:
            img = _figure(folder, name, listed)
        except FileNotFoundError:
            if name in expected:
                missing.append(name)
            continue
        except (Refused, OSError) as exc:
            refused.append(f"{name} is left out: {exc}")
            continue
        parts.append(f"<h2>{html.escape(name[:-4].replace('_', ' '))}</h2>{img}")
    notes = list(refused)
    if missing:
        how = "" if "sweep" in manifest else " (hwsim run --plots draws them)"
        notes.append(f"not in this bundle: {', '.join(missing)}{how}")
    if notes:
        parts.append("<h2>figures left out</h2><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes)
                     + "</ul>")
    return parts, notes


def _run_sections(m: dict) -> list[str]:
    """The run's sections: its summary read back as a RunSummary (hwsim/summary.py); the tables
    of every number show the manifest's own keys (those of the hwsim that wrote it)."""
    raw = m["summary"]
    s = RunSummary.from_dict(raw)
    over = s.itl_ms["p99"] > s.budget_ms
    head = (f"<h1>{html.escape(s.model)} on {html.escape(s.hardware)}</h1>"
            f"<p>scenario <b>{html.escape(str(s.scenario))}</b>: inter-token latency p50 "
            f"{s.itl_ms['p50']:.3f} ms, p99 <span class='{'over' if over else ''}'>{s.itl_ms['p99']:.3f} ms"
            f"</span> against a {s.budget_ms:g} ms budget.</p>")
    breakdown = "".join(f"<tr><td>{html.escape(k)}</td><td>{v:.4f}</td></tr>"
                        for k, v in sorted(s.breakdown_ms.items(), key=lambda kv: -kv[1]) if v > 0)
    out = [head, "<h2>summary</h2>", _kv_table({**raw, **{f"itl_ms.{k}": v for k, v in s.itl_ms.items()}}),
           f"<h2>where a token's time goes</h2><table><tr><th>component</th><th>ms</th></tr>{breakdown}</table>"]
    if s.serving:
        out.append("<h2>serving</h2>" + _kv_table(raw["serving"]))
    if sens := m.get("sensitivity"):          # hwsim sensitivity's folder (docs/whatif.md)
        rows = "".join(f"<tr><td>{html.escape(r['key'])}</td><td>{r['itl_elasticity']:+.3f}</td>"
                       f"<td>{r['itl_ms_gained_10pct']:+.3f}</td></tr>" for r in sens["rows"])
        out.append(f"<h2>sensitivity (each number +/-{sens['step']:.0%})</h2><table><tr><th>number</th>"
                   f"<th>ITL elasticity</th><th>ms gained by +10%</th></tr>{rows}</table>"
                   f"<p>no effect: {html.escape(', '.join(sens['no_effect']) or 'none')}</p>")
    return out


def _sweep_sections(folder: Path, m: dict) -> list[str]:
    sm = {k: _text(v) for k, v in m["summary"].items()}     # a bundle's values are escaped, all
    out = [f"<h1>sweep {_text(m['sweep']['name'])}</h1>",
           f"<p>{sm['points']} points: {sm['computed']} computed, {sm['reused']} reused, "
           f"{sm['failed']} failed.</p>"]
    try:
        table = pd.read_parquet(io.BytesIO(bundle_file(folder, "results.parquet")))
    except FileNotFoundError:
        table = None
    except Refused as exc:
        raise ConfigError(f"results.parquet is refused: {exc}", file=str(folder / "results.parquet")) from None
    if table is not None:
        factors = [c for c in table.columns if c.startswith("factor.")]
        cols = factors + [c for c in ("status", "itl_ms.p50", "itl_ms.p99", "kv.effective_bits_per_element",
                                      "serving.throughput_tok_s", "error")
                          if c in table.columns and table[c].notna().any()]     # no column of nothing
        try:                        # in the order of the factors, not of completion
            table = table.sort_values(factors, kind="stable") if factors else table
        except TypeError:           # a factor of mixed types: as written
            pass
        out.append("<h2>points</h2>" + table[cols].to_html(index=False, float_format=lambda v: f"{v:.4g}",
                                                           na_rep=""))
    return out


def _sources(profile: dict, prefix: str = ""):
    for key, value in profile.items():
        if isinstance(value, dict) and "value" in value and "source" in value:
            yield prefix + key, value["value"], value["source"]
        elif isinstance(value, dict):
            yield from _sources(value, prefix + key + ".")


def write_report(folder: Path) -> Path:
    from hwsim.io.atomic import atomic_write

    page, notes = render(folder)
    path = folder / "index.html"
    atomic_write(path, lambda p: Path(p).write_text(page, encoding="utf-8"))
    return path, notes
