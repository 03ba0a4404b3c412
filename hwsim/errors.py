"""User-facing errors. Anything the user can fix is a ConfigError; asserts guard invariants."""

from __future__ import annotations


class ConfigError(Exception):
    """Bad user input, located as precisely as we can: file, line and dotted key path."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 key: str | None = None):
        self.message = message
        self.file = file
        self.line = line
        self.key = key
        super().__init__(self.render())

    def render(self) -> str:
        where = []
        if self.file:
            where.append(f"{self.file}:{self.line}" if self.line else self.file)
        if self.key:
            where.append(f"key '{self.key}'")
        prefix = ", ".join(where)
        return f"{prefix}: {self.message}" if prefix else self.message
