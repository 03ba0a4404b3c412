"""The longest context a scenario reaches, to check against the config's max_position_embeddings."""

from __future__ import annotations


def _bound(lengths) -> int:
    """The longest of a length distribution (its clip)."""
    top = {"fixed": lengths.tokens, "uniform": lengths.high}.get(lengths.kind, lengths.max_tokens)
    return min(top, lengths.max_tokens)


def longest(workload) -> int:
    """Tokens the longest sequence holds: fixed-batch decode's context (or prompt) plus its steps;
    served requests' longest prompt plus reply (a trace's own lengths are not known here: 0)."""
    if workload.arrivals.kind == "none":
        return max(workload.context_tokens, workload.prompt_tokens) + workload.decode_steps
    if workload.arrivals.kind == "trace":
        return 0
    return _bound(workload.prompt) + _bound(workload.output)
