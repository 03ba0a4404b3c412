"""Request arrival traces in the layouts people have, recognised by their header row or keys.

    hwsim's own CSV          arrival_s, prompt_tokens, output_tokens          (seconds)
    Azure LLM inference      TIMESTAMP, ContextTokens, GeneratedTokens        (date-times; 2023, 2024)
    BurstGPT                 Timestamp, Model, Request tokens, Response tokens, ...  (seconds)
    Mooncake JSONL           {"timestamp", "input_length", "output_length", "hash_ids"}  (ms)

A trace's own clock ("trace time", seconds) is the file's time column; Azure's date-times count
from the first row. `start` and `duration` pick the requests arriving in [start, start +
duration) of trace time; `rate_scale` replays them that many times as fast. A request's
simulated arrival is (trace time - start) / rate_scale. Requests whose prompt or reply is
0 tokens (BurstGPT's failed requests, for one) are skipped in the public layouts; in hwsim's
own layout they are an error, as before. Rows must be in time order.

Files are read a line at a time and reading stops at the window's end or after `limit`
requests, so a multi-GB production trace costs only the slice replayed; a file that is not a
regular file, or is larger than hwsim.io.bounded.LIMITS["request trace"], is refused.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from hwsim.config.limits import VALUE_BOUNDS
from hwsim.errors import ConfigError
from hwsim.serving.prefix_cache import BLOCK_TOKENS
from hwsim.io.bounded import LIMITS, open_text

MAX_TRACE_REQUESTS = 10_000_000      # requests kept from one trace
MAX_LINE_CHARS = 1 << 20             # a Mooncake line with a few thousand hash ids is ~50 KB
MAX_TOKENS, MAX_TOKENS_WHY = VALUE_BOUNDS["Lengths.tokens"]
KEY = "workload.arrivals.trace"


@dataclass(frozen=True)
class TraceRequest:
    arrival_s: float                 # simulated time (after start and rate_scale)
    prompt_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()   # Mooncake: one id per KV block of the prompt (shared prefixes)


# layout name -> (time column, prompt column, output column), header names compared lower-case
CSV_LAYOUTS = {
    "hwsim": ("arrival_s", "prompt_tokens", "output_tokens"),
    "azure": ("timestamp", "contexttokens", "generatedtokens"),
    "burstgpt": ("timestamp", "request tokens", "response tokens"),
}
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")


def read_trace(path: Path, *, start: float = 0.0, duration: float | None = None,
               rate_scale: float = 1.0, limit: int = MAX_TRACE_REQUESTS) -> list[TraceRequest]:
    """The trace's requests in the window, at most `limit` of them, in arrival order."""
    path = Path(path)
    window = _Window(path, start, duration, rate_scale, min(limit, MAX_TRACE_REQUESTS))
    with open_text(path, LIMITS["request trace"], key=KEY, encoding="utf-8-sig", newline="") as fh:
        first = fh.readline(MAX_LINE_CHARS)
        if first.lstrip().startswith("{"):
            _read_mooncake(path, first, fh, window)
        else:
            _read_csv(path, first, fh, window)
    if not window.rows:
        raise ConfigError("request trace has no requests" + (" in the start/duration window"
                                                             if window.windowed else ""),
                          file=str(path), line=1 if not window.windowed else None, key=KEY)
    return window.rows


class _Window:
    """Keeps the requests in [start, start + duration) of trace time, in order, up to a limit."""

    def __init__(self, path: Path, start: float, duration: float | None, rate_scale: float, limit: int):
        self.path, self.start, self.rate_scale, self.limit = path, start, rate_scale, limit
        self.end = start + duration if duration is not None else math.inf
        self.windowed = start > 0 or duration is not None
        self.rows: list[TraceRequest] = []
        self.last = -math.inf

    def add(self, line: int, t: float, prompt: int, output: int, hash_ids=()) -> bool:
        """Keep one request; False once the window or the limit is passed (stop reading)."""
        if not math.isfinite(t):
            raise ConfigError(f"arrival time {t!r} is not a finite number", file=str(self.path),
                              line=line, key=KEY)
        if t < self.last:
            raise ConfigError("arrivals must be in time order", file=str(self.path), line=line, key=KEY)
        self.last = t
        if t >= self.end:
            return False
        if t >= self.start:
            self.rows.append(TraceRequest((t - self.start) / self.rate_scale, prompt, output,
                                          tuple(hash_ids)))
        return len(self.rows) < self.limit


def _layout(header: list[str], path: Path) -> tuple[str, list[int]]:
    names = [h.strip().lower() for h in header]
    for layout, columns in CSV_LAYOUTS.items():
        if all(c in names for c in columns):
            return layout, [names.index(c) for c in columns]
    raise ConfigError("request trace header is none of the known layouts: hwsim's "
                      "(arrival_s, prompt_tokens, output_tokens), Azure LLM inference (TIMESTAMP, "
                      "ContextTokens, GeneratedTokens), BurstGPT (Timestamp, Request tokens, "
                      "Response tokens) or Mooncake JSONL", file=str(path), line=1, key=KEY)


def _read_csv(path: Path, first: str, fh, window: _Window) -> None:
    try:
        header = next(csv.reader([first]), [])
        layout, cols = _layout(header, path)
        names = [header[i].strip() for i in cols]
        azure_t0 = None
        for line, row in enumerate(csv.reader(fh), start=2):
            if not row or all(not cell.strip() for cell in row):
                continue
            if len(row) <= max(cols):
                raise ConfigError(f"{len(row)} fields, the header has {len(header)}", file=str(path),
                                  line=line, key=names[min(len(row), len(names) - 1)])
            t_text, p_text, o_text = (row[i].strip() for i in cols)
            if layout == "azure":
                when = _datetime(t_text, path, line, names[0])
                azure_t0 = when if azure_t0 is None else azure_t0
                if (when.tzinfo is None) != (azure_t0.tzinfo is None):
                    raise ConfigError("a date-time with a time zone mixed with ones without",
                                      file=str(path), line=line, key=names[0])
                t = (when - azure_t0).total_seconds()     # exact to the microsecond
            else:
                t = _number(t_text, path, line, names[0])
            prompt = _count(p_text, path, line, names[1])
            output = _count(o_text, path, line, names[2])
            if prompt < 1 or output < 1:
                if layout == "hwsim":
                    raise ConfigError("token counts must be positive", file=str(path), line=line,
                                      key=names[1] if prompt < 1 else names[2])
                continue                    # a failed request in a production trace
            if not window.add(line, t, prompt, output):
                return
    except csv.Error as exc:
        raise ConfigError(f"malformed CSV: {exc}", file=str(path), key=KEY) from None


def _read_mooncake(path: Path, first: str, fh, window: _Window) -> None:
    for line, text in enumerate(_lines(first, fh), start=1):
        if not text.strip():
            continue
        if len(text) >= MAX_LINE_CHARS:
            raise ConfigError(f"line longer than {MAX_LINE_CHARS} characters", file=str(path), line=line,
                              key=KEY)
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"not a JSON object: {exc.msg} (column {exc.colno})", file=str(path),
                              line=line, key=KEY) from None
        if not isinstance(obj, dict):
            raise ConfigError("expected one JSON object a line", file=str(path), line=line, key=KEY)
        missing = [k for k in MOONCAKE_KEYS if k not in obj]
        if missing:
            raise ConfigError(f"missing key(s) {', '.join(missing)}", file=str(path), line=line,
                              key=missing[0])
        t_ms = obj["timestamp"]
        if isinstance(t_ms, bool) or not isinstance(t_ms, (int, float)):
            raise ConfigError(f"expected a number of milliseconds, got {t_ms!r}", file=str(path),
                              line=line, key="timestamp")
        prompt = _json_count(obj["input_length"], path, line, "input_length")
        output = _json_count(obj["output_length"], path, line, "output_length")
        hash_ids = obj.get("hash_ids", [])
        if not isinstance(hash_ids, list) or not all(type(h) is int for h in hash_ids):
            raise ConfigError("expected a list of integers", file=str(path), line=line, key="hash_ids")
        if len(hash_ids) > -(-prompt // BLOCK_TOKENS):       # one id a block of the prompt, the last partial
            raise ConfigError(f"{len(hash_ids)} block ids for a prompt of {prompt} tokens (at most "
                              f"{-(-prompt // BLOCK_TOKENS)}: one a {BLOCK_TOKENS}-token block)",
                              file=str(path), line=line, key="hash_ids")
        if prompt < 1 or output < 1:
            continue
        if not window.add(line, t_ms / 1e3, prompt, output, hash_ids):
            return


def _lines(first: str, fh):
    yield first
    while True:
        text = fh.readline(MAX_LINE_CHARS)
        if not text:
            return
        yield text


def _number(text: str, path: Path, line: int, column: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"expected a number of seconds, got {text[:40]!r}", file=str(path), line=line,
                          key=column) from None


def _datetime(text: str, path: Path, line: int, column: str) -> datetime:
    """Azure's TIMESTAMP: '2023-11-16 18:15:46.6805900' (7 fraction digits) or with '+00:00'."""
    head, dot, rest = text.partition(".")
    if dot:                                    # datetime takes at most 6 fraction digits
        digits = len(rest) - len(rest.lstrip("0123456789"))
        rest = rest[:min(digits, 6)] + rest[digits:]
    try:
        when = datetime.fromisoformat(head + dot + rest if dot else head)
    except ValueError:
        raise ConfigError(f"expected a date-time like 2023-11-16 18:15:46.680, got {text[:40]!r}",
                          file=str(path), line=line, key=column) from None
    return when


def _count(text: str, path: Path, line: int, column: str) -> int:
    value = text[:-2] if text.endswith(".0") else text       # 472.0 from a float-typed export
    if not (value.isascii() and value.isdigit()) or len(value) > 9:
        raise ConfigError(f"expected a whole number of tokens, got {text[:40]!r}", file=str(path),
                          line=line, key=column)
    return _bounded(int(value), path, line, column)


def _json_count(value, path: Path, line: int, key: str) -> int:
    if type(value) is not int or not 0 <= value < 10**9:
        raise ConfigError(f"expected a whole number of tokens, got {value!r}", file=str(path),
                          line=line, key=key)
    return _bounded(value, path, line, key)


def _bounded(tokens: int, path: Path, line: int, key: str) -> int:
    """A row's token count, refused at its row (not later, at the scenario's lengths) past any
    model's context window (hwsim.config.limits: the scenario's own length bound)."""
    if tokens > MAX_TOKENS:
        raise ConfigError(f"{tokens:,} tokens: {MAX_TOKENS_WHY}", file=str(path), line=line, key=key)
    return tokens
