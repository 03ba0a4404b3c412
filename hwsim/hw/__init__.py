"""Chip components. Each owns its queueing state; `System` wires them together."""
