"""`hwsim report DIR`: one self-contained index.html for a run bundle or a sweep folder.

Every plot is embedded as a base64 PNG, so the page opens from disk in any browser with no
server. It shows the summary table, the breakdown, the resolved configuration and the
provenance (version, git SHA, seed, the hardware profile's sources).
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

import pandas as pd

from hwsim.errors import ConfigError

PLOTS = ["breakdown.png", "heatmap.png", "pareto.png", "gantt.png", "channels.png", "itl_cdf.png",
         "ttft_cdf.png", "timeline.png", "tornado.png", "frontier.png"]
STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.85em}td,th{border:1px solid #ddd;padding:3px 7px;text-align:right}
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}img{max-width:100%;margin:.5em 0}
pre{background:#f7f7f7;padding:1em;overflow:auto;font-size:.8em;max-height:30em}.over{color:#b00}"""
CHECK = """<script>window.addEventListener('load',()=>{const im=[...document.images];
const ok=im.filter(i=>i.complete&&i.naturalWidth>0).length;
document.title='hwsim report: '+ok+'/'+im.length+' images loaded';
document.body.dataset.images=ok+'/'+im.length;});</script>"""


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{html.escape(path.name)}" src="data:image/png;base64,{data}">'


def _kv_table(d: dict) -> str:
    rows = "".join(f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(_fmt(v))}</td></tr>"
                   for k, v in d.items() if not isinstance(v, (dict, list)))
    return f"<table>{rows}</table>"


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def render(folder: Path) -> str:
    manifest_path = folder / "manifest.json"
    if not manifest_path.is_file():
        raise ConfigError("no manifest.json: not a run bundle or sweep folder", file=str(folder))
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as exc:
        raise ConfigError(f"manifest.json cannot be read: {exc}", file=str(manifest_path)) from None
    try:
        return _render(folder, manifest)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ConfigError(f"manifest.json is not an hwsim run or sweep manifest ({type(exc).__name__}: "
                          f"{exc})", file=str(manifest_path)) from None


def _render(folder: Path, manifest: dict) -> str:
    if not isinstance(manifest, dict):
        raise TypeError("the top level is not a mapping")
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>hwsim report</title>"
             f"<style>{STYLE}</style>{CHECK}</head><body>"]
    if "sweep" in manifest:
        parts += _sweep_sections(folder, manifest)
    else:
        parts += _run_sections(manifest)
    plots = [name for name in PLOTS if (folder / name).exists()]
    for name in plots:
        parts.append(f"<h2>{html.escape(name[:-4].replace('_', ' '))}</h2>{_img(folder / name)}")
    if not plots and "sweep" not in manifest:
        parts.append("<p>This bundle has no figures: <code>hwsim run --plots</code> draws them.</p>")
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
    return "\n".join(parts)


def _run_sections(m: dict) -> list[str]:
    s = m["summary"]
    over = s["itl_ms"]["p99"] > s["budget_ms"]
    head = (f"<h1>{html.escape(s['model'])} on {html.escape(s['hardware'])}</h1>"
            f"<p>scenario <b>{html.escape(str(s['scenario']))}</b>: inter-token latency p50 "
            f"{s['itl_ms']['p50']:.3f} ms, p99 <span class='{'over' if over else ''}'>{s['itl_ms']['p99']:.3f} ms"
            f"</span> against a {s['budget_ms']:g} ms budget.</p>")
    breakdown = "".join(f"<tr><td>{html.escape(k)}</td><td>{v:.4f}</td></tr>"
                        for k, v in sorted(s["breakdown_ms"].items(), key=lambda kv: -kv[1]) if v > 0)
    out = [head, "<h2>summary</h2>", _kv_table({**s, **{f"itl_ms.{k}": v for k, v in s['itl_ms'].items()}}),
           f"<h2>where a token's time goes</h2><table><tr><th>component</th><th>ms</th></tr>{breakdown}</table>"]
    if s.get("serving"):
        out.append("<h2>serving</h2>" + _kv_table(s["serving"]))
    if sens := m.get("sensitivity"):          # hwsim sensitivity's folder (docs/whatif.md)
        rows = "".join(f"<tr><td>{html.escape(r['key'])}</td><td>{r['itl_elasticity']:+.3f}</td>"
                       f"<td>{r['itl_ms_gained_10pct']:+.3f}</td></tr>" for r in sens["rows"])
        out.append(f"<h2>sensitivity (each number +/-{sens['step']:.0%})</h2><table><tr><th>number</th>"
                   f"<th>ITL elasticity</th><th>ms gained by +10%</th></tr>{rows}</table>"
                   f"<p>no effect: {html.escape(', '.join(sens['no_effect']) or 'none')}</p>")
    return out


def _sweep_sections(folder: Path, m: dict) -> list[str]:
    sm = m["summary"]
    out = [f"<h1>sweep {html.escape(m['sweep']['name'])}</h1>",
           f"<p>{sm['points']} points: {sm['computed']} computed, {sm['reused']} reused, "
           f"{sm['failed']} failed.</p>"]
    results = folder / "results.parquet"
    if results.exists():
        table = pd.read_parquet(results)
        cols = [c for c in table.columns if c.startswith("factor.")] + \
               [c for c in ("status", "itl_ms.p50", "itl_ms.p99", "kv.effective_bits_per_element",
                            "serving.throughput_tok_s", "error") if c in table.columns]
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

    page = render(folder)
    path = folder / "index.html"
    atomic_write(path, lambda p: Path(p).write_text(page, encoding="utf-8"))
    return path
