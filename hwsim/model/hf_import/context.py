"""The longest context a scenario reaches, to check against the config's max_position_embeddings."""

from __future__ import annotations

from hwsim.config.scenario import TraceArrivals


def longest(workload) -> int:
    """Tokens the longest sequence holds: fixed-batch decode's context (or prompt) plus its steps;
    served requests' longest prompt plus reply (a trace's own lengths are not known here: 0)."""
    if not workload.serving:
        return max(workload.context_tokens, workload.prompt_tokens) + workload.decode_steps
    if isinstance(workload.arrivals, TraceArrivals):
        return 0
    return workload.prompt.longest() + workload.output.longest()
