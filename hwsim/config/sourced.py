"""Profile numbers travel with their source: `{value: 4800, source: "NVIDIA H200 datasheet"}`.

A number without a source is rejected by the schema, so a profile cannot silently gain a
guessed figure. Positivity is checked here; units are in the *field name* of the owner.
"""

from __future__ import annotations

from pydantic import Field

from hwsim.config.strict import Strict


class _Sourced(Strict):
    source: str = Field(min_length=3, description="where the number comes from")


class Positive(_Sourced):
    value: float = Field(gt=0)


class NonNegative(_Sourced):
    value: float = Field(ge=0)


class Fraction(_Sourced):
    value: float = Field(gt=0, le=1)


class Count(_Sourced):
    value: int = Field(ge=1)


class NonNegativeCount(_Sourced):
    value: int = Field(ge=0)
