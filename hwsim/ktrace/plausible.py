"""Sizes a trace's kernels may have at the point its user declares (workload.kernel_trace): a
GEMM of 10^12 rows in a trace declared at batch 1 is a wrong trace or a wrong declaration, and
timing it gave an inter-token latency of 6.6 x 10^8 ms at exit 0. Each bound is far above any
real kernel of that point and refuses only what cannot be one."""

from __future__ import annotations

from hwsim.errors import ConfigError
from hwsim.model import ir
from hwsim.ktrace.classify import CONTEXT_SLACK, Point
from hwsim.ktrace.reader import KEY

MAX_DIM = 2**24            # a weight's N or K, a bmm's count, a head count, a key length: a
                           # 256k vocabulary is 2^18
MAX_BYTES = 2**40          # what one kernel reads or writes, one copy: 1 TiB, past any GPU's memory


def _tokens(point: Point) -> int:
    """The most rows a kernel of the point can have: every sequence's whole context at once."""
    return point.batch * (point.context + CONTEXT_SLACK) * max(point.top_k, 1)


def problem(item: ir.WorkItem, point: Point) -> str | None:
    tokens = _tokens(point)
    if isinstance(item, ir.Gemm):
        if item.m > tokens:
            return f"a GEMM of {item.m:,} rows, more than the declared point's {tokens:,} tokens"
        if max(item.n, item.k, item.batch) > MAX_DIM:
            return f"a GEMM of N={item.n:,}, K={item.k:,}, batch {item.batch:,} (at most {MAX_DIM:,} each)"
    elif isinstance(item, ir.GroupedGemm):
        if sum(item.rows) > tokens:
            return f"a grouped GEMM of {sum(item.rows):,} rows, more than the declared point's {tokens:,}"
        if max(item.n, item.k, len(item.rows)) > MAX_DIM:
            return f"a grouped GEMM of N={item.n:,}, K={item.k:,}, {len(item.rows):,} groups"
    elif isinstance(item, ir.Attention):
        if item.batch * item.q_len > tokens:
            return f"an attention over {item.batch * item.q_len:,} queries, more than the point's {tokens:,} tokens"
        if max(item.heads, item.kv_heads, item.head_dim, item.kv_len) > MAX_DIM:
            return f"an attention of {item.heads:,} heads of {item.head_dim:,}, {item.kv_len:,} keys"
    else:
        nbytes = max(getattr(item, name, 0) for name in ("read_bytes", "write_bytes", "nbytes"))
        if nbytes > MAX_BYTES:
            return f"a kernel moving {nbytes:,.0f} bytes (at most {MAX_BYTES:,})"
    return None


def check(kernels, point: Point, path: str) -> None:
    """ConfigError naming the trace and the first kernel whose size cannot be the point's."""
    for i, k in enumerate(kernels):
        if (why := problem(k.item, point)) is not None:
            raise ConfigError(f"kernel {i} ('{k.name[:80]}') is {why} (batch {point.batch}, context "
                              f"{point.context}): is workload.kernel_trace's point the traced one?",
                              file=path, key=KEY)
