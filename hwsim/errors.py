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
            where.append(f"{_printable(self.file)}:{self.line}" if self.line else _printable(self.file))
        if self.key:
            where.append(f"key '{_printable(self.key)}'")
        prefix = ", ".join(where)
        return f"{prefix}: {self.message}" if prefix else self.message


def _printable(text: str) -> str:
    """A user's key or file name as one printable line: a YAML key may hold a newline or other
    control characters, which are shown escaped ('\\n') so the error stays one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
