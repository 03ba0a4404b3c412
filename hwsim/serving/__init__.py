"""Request-level serving: arrivals, continuous batching and per-request latency metrics."""
