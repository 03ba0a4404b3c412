"""Names that become folder names (a scenario's or a sweep's `name`, under reports/).

A name from a downloaded YAML must not reach outside the output folder, so it is confined
to one portable path component: no separators, not `.` or `..`, no leading dot or dash,
nothing a shell or Windows treats specially, and short enough for every filesystem.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

MAX_NAME = 100
_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+=@-]*")


def check_name(name: str) -> str:
    if not name:
        raise ValueError("a name cannot be empty")
    if len(name) > MAX_NAME:
        raise ValueError(f"a name has at most {MAX_NAME} characters (got {len(name)})")
    if not _NAME_RE.fullmatch(name):
        raise ValueError("a name is one folder name: letters, digits and _ . + = @ -, "
                         "starting with a letter, digit or _ (no / or \\, spaces or ..)")
    return name


SafeName = Annotated[str, AfterValidator(check_name)]
