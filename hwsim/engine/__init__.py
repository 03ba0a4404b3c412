"""Simulation plumbing: seeded random streams."""
