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
    window = _Window(start, duration, rate_scale, min(limit, MAX_TRACE_REQUESTS))
    try:
        with open_text(path, LIMITS["request trace"], key=KEY, encoding="utf-8-sig", newline="") as fh:
            first = fh.readline(MAX_LINE_CHARS)
            if first.lstrip().startswith("{"):
                _read_mooncake(first, fh, window)
            else:
                _read_csv(first, fh, window)
        if not window.rows:
            raise _Bad("request trace has no requests" + (" in the start/duration window"
                                                          if window.windowed else ""),
                       line=1 if not window.windowed else None)
    except _Bad as bad:                # located once, here: the file the scenario's key names
        raise ConfigError(bad.message, file=str(path), line=bad.line, key=bad.key) from None
    return window.rows


class _Bad(Exception):
    """What is wrong with the trace, at a line and a column or key of it (read_trace adds the file)."""

    def __init__(self, message: str, line: int | None = None, key: str = KEY):
        super().__init__(message)
        self.message, self.line, self.key = message, line, key


class _Window:
    """Keeps the requests in [start, start + duration) of trace time, in order, up to a limit."""

    def __init__(self, start: float, duration: float | None, rate_scale: float, limit: int):
        self.start, self.rate_scale, self.limit = start, rate_scale, limit
        self.end = start + duration if duration is not None else math.inf
        self.windowed = start > 0 or duration is not None
        self.rows: list[TraceRequest] = []
        self.last = -math.inf

    def add(self, line: int, t: float, prompt: int, output: int, hash_ids=()) -> bool:
        """Keep one request; False once the window or the limit is passed (stop reading)."""
        if not math.isfinite(t):
            raise _Bad(f"arrival time {t!r} is not a finite number", line)
        if t < self.last:
            raise _Bad("arrivals must be in time order", line)
        self.last = t
        if t >= self.end:
            return False
        if t >= self.start:
            self.rows.append(TraceRequest((t - self.start) / self.rate_scale, prompt, output,
                                          tuple(hash_ids)))
        return len(self.rows) < self.limit


def _layout(header: list[str]) -> tuple[str, list[int]]:
    names = [h.strip().lower() for h in header]
    for layout, columns in CSV_LAYOUTS.items():
        if all(c in names for c in columns):
            return layout, [names.index(c) for c in columns]
    raise _Bad("request trace header is none of the known layouts: hwsim's "
               "(arrival_s, prompt_tokens, output_tokens), Azure LLM inference (TIMESTAMP, "
               "ContextTokens, GeneratedTokens), BurstGPT (Timestamp, Request tokens, "
               "Response tokens) or Mooncake JSONL", line=1)


def _read_csv(first: str, fh, window: _Window) -> None:
    try:
        header = next(csv.reader([first]), [])
        layout, cols = _layout(header)
        names = [header[i].strip() for i in cols]
        azure_t0 = None
        for line, row in enumerate(csv.reader(fh), start=2):
            if not row or all(not cell.strip() for cell in row):
                continue
            if len(row) <= max(cols):
                raise _Bad(f"{len(row)} fields, the header has {len(header)}", line,
                           names[min(len(row), len(names) - 1)])
            t_text, p_text, o_text = (row[i].strip() for i in cols)
            if layout == "azure":
                when = _datetime(t_text, line, names[0])
                azure_t0 = when if azure_t0 is None else azure_t0
                if (when.tzinfo is None) != (azure_t0.tzinfo is None):
                    raise _Bad("a date-time with a time zone mixed with ones without", line, names[0])
                t = (when - azure_t0).total_seconds()     # exact to the microsecond
            else:
                t = _number(t_text, line, names[0])
            prompt = _count(p_text, line, names[1])
            output = _count(o_text, line, names[2])
            if prompt < 1 or output < 1:
                if layout == "hwsim":
                    raise _Bad("token counts must be positive", line, names[1] if prompt < 1 else names[2])
                continue                    # a failed request in a production trace
            if not window.add(line, t, prompt, output):
                return
    except csv.Error as exc:
        raise _Bad(f"malformed CSV: {exc}") from None


def _read_mooncake(first: str, fh, window: _Window) -> None:
    for line, text in enumerate(_lines(first, fh), start=1):
        if not text.strip():
            continue
        if len(text) >= MAX_LINE_CHARS:
            raise _Bad(f"line longer than {MAX_LINE_CHARS} characters", line)
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _Bad(f"not a JSON object: {exc.msg} (column {exc.colno})", line) from None
        if not isinstance(obj, dict):
            raise _Bad("expected one JSON object a line", line)
        missing = [k for k in MOONCAKE_KEYS if k not in obj]
        if missing:
            raise _Bad(f"missing key(s) {', '.join(missing)}", line, missing[0])
        t_ms = obj["timestamp"]
        if isinstance(t_ms, bool) or not isinstance(t_ms, (int, float)):
            raise _Bad(f"expected a number of milliseconds, got {t_ms!r}", line, "timestamp")
        prompt = _json_count(obj["input_length"], line, "input_length")
        output = _json_count(obj["output_length"], line, "output_length")
        hash_ids = obj.get("hash_ids", [])
        if not isinstance(hash_ids, list) or not all(type(h) is int for h in hash_ids):
            raise _Bad("expected a list of integers", line, "hash_ids")
        if len(hash_ids) > -(-prompt // BLOCK_TOKENS):       # one id a block of the prompt, the last partial
            raise _Bad(f"{len(hash_ids)} block ids for a prompt of {prompt} tokens (at most "
                       f"{-(-prompt // BLOCK_TOKENS)}: one a {BLOCK_TOKENS}-token block)", line, "hash_ids")
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


def _number(text: str, line: int, column: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise _Bad(f"expected a number of seconds, got {text[:40]!r}", line, column) from None


def _datetime(text: str, line: int, column: str) -> datetime:
    """Azure's TIMESTAMP: '2023-11-16 18:15:46.6805900' (7 fraction digits) or with '+00:00'."""
    head, dot, rest = text.partition(".")
    if dot:                                    # datetime takes at most 6 fraction digits
        digits = len(rest) - len(rest.lstrip("0123456789"))
        rest = rest[:min(digits, 6)] + rest[digits:]
    try:
        when = datetime.fromisoformat(head + dot + rest if dot else head)
    except ValueError:
        raise _Bad(f"expected a date-time like 2023-11-16 18:15:46.680, got {text[:40]!r}", line,
                   column) from None
    return when


def _count(text: str, line: int, column: str) -> int:
    value = text[:-2] if text.endswith(".0") else text       # 472.0 from a float-typed export
    if not (value.isascii() and value.isdigit()) or len(value) > 9:
        raise _Bad(f"expected a whole number of tokens, got {text[:40]!r}", line, column)
    return _bounded(int(value), line, column)


def _json_count(value, line: int, key: str) -> int:
    if type(value) is not int or not 0 <= value < 10**9:
        raise _Bad(f"expected a whole number of tokens, got {value!r}", line, key)
    return _bounded(value, line, key)


def _bounded(tokens: int, line: int, key: str) -> int:
    """A row's token count, refused at its row (not later, at the scenario's lengths) past any
    model's context window (hwsim.config.limits: the scenario's own length bound)."""
    if tokens > MAX_TOKENS:
        raise _Bad(f"{tokens:,} tokens: {MAX_TOKENS_WHY}", line, key)
    return tokens
