from pathlib import Path

import pytest
import yaml

from hwsim.config.load import load_profile, load_scenario
from hwsim.hw.chip import ChipSpec


@pytest.fixture(scope="session")
def h200() -> ChipSpec:
    return ChipSpec.from_profile(load_profile("h200-sxm"))


@pytest.fixture
def scenario_factory():
    """Load the default scenario with --set style overrides (few steps, to stay fast)."""
    def make(*sets: str):
        return load_scenario(None, ["workload.decode_steps=2", *sets])
    return make


@pytest.fixture
def small_hbm(tmp_path, monkeypatch):
    """The H200 profile as `small-hbm`, with 0.56 GB of HBM (found through HWSIM_HOME): a
    serving run soon has no room for more KV."""
    h200_yaml = Path(__file__).resolve().parents[1] / "hardware_profiles" / "h200-sxm.yaml"
    prof = yaml.safe_load(h200_yaml.read_text())
    prof["name"] = "small-hbm"
    prof["hbm"]["capacity_gb"] = {"value": 0.56, "source": "test"}
    (tmp_path / "hardware_profiles").mkdir()
    (tmp_path / "hardware_profiles" / "small-hbm.yaml").write_text(yaml.safe_dump(prof))
    monkeypatch.setenv("HWSIM_HOME", str(tmp_path))


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def dask_scheduler():
    """A Dask scheduler and one single-thread worker, started as separate processes on
    127.0.0.1 and shared by a module's sweep tests (`hwsim sweep --scheduler ADDRESS`): starting
    a cluster costs more than the tiny sweeps the tests run on it."""
    import subprocess
    import sys
    import time
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    sched = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                              "--port", str(port), "--dashboard-address", ":0"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1",
                               "--nworkers", "1", "--host", "127.0.0.1", "--dashboard-address", ":0"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        from dask.distributed import Client
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                with Client(address, timeout=2) as c:
                    if c.scheduler_info()["workers"]:
                        break
            except OSError:
                pass
            time.sleep(0.5)
        yield address
    finally:
        for p in (worker, sched):
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
