"""Typed configuration: the scenario schema, hardware-profile schema and the YAML loader."""
