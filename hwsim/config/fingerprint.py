"""Content hashes of everything a result depends on: the resolved scenario, the bytes of the
hardware profile, model and trace files it names, and the simulator itself (its version
and a hash of its source). A sweep point's key is built from them, so editing
hardware_profiles/h200-sxm.yaml, a model file or the engine makes old points stale instead
of silently reused; a run's manifest records them, so two bundles can be compared."""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path

from hwsim import __version__


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str | None:
    """The file's hash, streamed through the bounded reader; None if it cannot be read."""
    from hwsim.errors import ConfigError
    from hwsim.io.bounded import LIMITS, open_binary

    h = hashlib.sha256()
    try:
        with open_binary(path, LIMITS["request trace"]) as fh:     # the largest input kind
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except (OSError, ConfigError):
        return None
    return h.hexdigest()


@lru_cache(maxsize=1)
def code_sha256() -> str:
    """One hash over every module of the installed hwsim package (an edited engine changes it)."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def input_files(resolved: dict) -> dict[str, Path]:
    """The files a resolved scenario (as a dict) reads, by role."""
    from hwsim.config.files import model_path, profile_path

    files: dict[str, Path] = {}
    profile = profile_path(resolved["hardware"])
    if profile is not None:
        files["hardware_profile"] = profile
    files["model"] = model_path(resolved["model"])
    if (files["model"].parent / "hf_quant_config.json").is_file() and files["model"].suffix == ".json":
        files["model_quantization"] = files["model"].parent / "hf_quant_config.json"
    for role, trace in (("arrivals_trace", resolved.get("workload", {}).get("arrivals", {}).get("trace")),
                        ("routing_trace", resolved.get("moe", {}).get("routing", {}).get("trace")),
                        ("kernel_trace", (resolved.get("workload", {}).get("kernel_trace") or {}).get("path"))):
        if trace:
            files[role] = Path(trace)
    return files


def fingerprint(resolved: dict, sha_of=sha256_file) -> dict:
    """{hwsim_version, code_sha256, scenario_sha256, files: {role: {path, sha256}}}; `sha_of`
    hashes a file (a sweep passes one that hashes each file once)."""
    return {
        "hwsim_version": __version__,
        "code_sha256": code_sha256(),
        "scenario_sha256": sha256_bytes(json.dumps(resolved, sort_keys=True).encode()),
        "files": {role: {"path": str(path), "sha256": sha_of(path)}
                  for role, path in input_files(resolved).items()},
    }


def point_key(resolved: dict, loaded: dict | None = None, fp: dict | None = None) -> str:
    """A sweep point's id: the scenario and the content of every input, never a file's name
    alone (a moved but identical profile keeps the key, an edited one changes it). `loaded`:
    the hashes of the profile and model as loaded and shipped to the workers ({"profile",
    "model"}), which then stand for their files."""
    fp = fp or fingerprint(resolved)
    files = {role: f["sha256"] for role, f in fp["files"].items()}
    if loaded:
        files.pop("hardware_profile", None)
        files.pop("model", None)
        files.update(loaded)
    content = {"scenario": fp["scenario_sha256"], "version": fp["hwsim_version"], "code": fp["code_sha256"],
               "files": files}
    return sha256_bytes(json.dumps(content, sort_keys=True).encode())[:16]


TRACE_ROLES = ("arrivals_trace", "routing_trace")


def changed_traces(fp: dict) -> list[str]:
    """The trace files of a fingerprint whose content is no longer what it recorded."""
    return [f["path"] for role, f in fp["files"].items()
            if role in TRACE_ROLES and sha256_file(Path(f["path"])) != f["sha256"]]
