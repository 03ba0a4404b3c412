"""Host profiles (hardware_profiles/hosts/): how fast the host that issues an imported trace's
ops runs, relative to the traced one, what one launch call costs, and how much the profiler
slowed the recorded host down."""

from __future__ import annotations

import re

from pydantic import Field, model_validator

from hwsim.config.files import search_dirs, validate
from hwsim.config.sourced import NonNegative, Positive
from hwsim.config.strict import Strict
from hwsim.config.yaml_lines import load_yaml_file
from hwsim.errors import ConfigError


class HostProfile(Strict):
    name: str
    description: str = ""
    profiler_overhead: Positive = Field(description="profiled / unprofiled host time of a step, "
                                        "once profiler_event_us is taken out")
    profiler_event_us: NonNegative | None = Field(None, description="the profiler's own host time per "
                                                  "host event it records (an op, a runtime call); unset: 0")
    cpu_speed: Positive = Field(description="host CPU work runs this many times as fast as traced")
    launch_us: Positive | None = Field(None, description="one launch call's host cost; unset: as traced")


    @model_validator(mode="after")
    def _check(self):
        # profiling never speeds a host up; 10x is past any profiler measured (1.07-2.0)
        if not 1.0 <= self.profiler_overhead.value <= 10.0:
            raise ValueError(f"profiler_overhead {self.profiler_overhead.value:g} is not a profiled / "
                             f"unprofiled time ratio (1 to 10)")
        if not 1e-3 <= self.cpu_speed.value <= 1e3:
            raise ValueError(f"cpu_speed {self.cpu_speed.value:g} is no host's speed-up (1e-3 to 1e3)")
        return self


NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def load_host(name: str, key: str = "workload.kernel_trace.host") -> HostProfile:
    if not NAME.fullmatch(name):       # a name, never a path: '../../x' read a file outside the folder
        raise ConfigError(f"host profile name '{name}' is not a name of hardware_profiles/hosts/ "
                          f"(letters, digits, '_', '.', '-')", key=key)
    for d in search_dirs("hardware_profiles"):
        path = d / "hosts" / f"{name}.yaml"
        if path.is_file():
            return validate(HostProfile, load_yaml_file(path))
    raise ConfigError(f"unknown host profile '{name}' (hardware_profiles/hosts/)", key=key)
