"""Host profiles (hardware_profiles/hosts/): how fast the host that issues an imported trace's
ops runs, relative to the traced one, what one launch call costs, and how much the profiler
slowed the recorded host down."""

from __future__ import annotations

from pydantic import Field

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


def load_host(name: str, key: str = "workload.kernel_trace.host") -> HostProfile:
    for d in search_dirs("hardware_profiles"):
        path = d / "hosts" / f"{name}.yaml"
        if path.is_file():
            return validate(HostProfile, load_yaml_file(path))
    raise ConfigError(f"unknown host profile '{name}' (hardware_profiles/hosts/)", key=key)
