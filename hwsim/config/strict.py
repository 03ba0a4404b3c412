"""The base of every user-facing schema block: unknown keys are errors, values are frozen."""

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
