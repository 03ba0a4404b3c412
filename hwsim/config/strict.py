"""The base of every user-facing schema block: unknown keys are errors, values are frozen,
and a float is finite (an `.inf` budget or bandwidth is an error at load, not a crash later)."""

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)
