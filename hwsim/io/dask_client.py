"""A Dask client for the points of a sweep and the perturbations of a sensitivity: of a
scheduler (--scheduler, $DASK_SCHEDULER_ADDRESS), checked, or of an embedded LocalCluster."""

from __future__ import annotations

import os
import re
import signal
import threading
import warnings
from contextlib import contextmanager

from hwsim.errors import ConfigError

SCHEDULER_TIMEOUT_S = 5     # an unreachable scheduler is reported after this, not after a hang


_ADDRESS = re.compile(r"^(?:(?:tcp|tls|ws|wss|ucx)://)?(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})$")


def check_address(address: str) -> None:
    """A Dask scheduler address, [scheme://]host:port, checked before Dask parses it (its own
    errors for a malformed one are a ValueError and a traceback printed as the client is freed)."""
    match = _ADDRESS.match(address.strip())
    if not match or not 0 < int(match.group(1)) < 65536:
        raise ConfigError(f"'{address[:80]}' is not a Dask scheduler address like tcp://host:8786",
                          key="--scheduler")


def scheduler_address(scheduler: str | None) -> str | None:
    """--scheduler, else $DASK_SCHEDULER_ADDRESS, checked; None: an embedded cluster."""
    address = scheduler if scheduler is not None else (os.environ.get("DASK_SCHEDULER_ADDRESS") or None)
    if address is not None:
        check_address(address)
    return address


@contextmanager
def _children_ignore_sigint():
    """Worker processes started in here ignore Ctrl-C (a terminal sends it to the whole process
    group): only this process handles it, closes the cluster and prints one line, instead of
    every worker printing its traceback."""
    # On Ctrl-C the workers see cancelled tasks and a scheduler gone mid-heartbeat, and would log
    # each with a traceback. A point's own error reaches the client and results.parquet anyway.
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "critical")
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


@contextmanager
def dask_client(scheduler: str | None, workers: int | None):
    """A Dask client: of the scheduler at `scheduler` (or $DASK_SCHEDULER_ADDRESS), else of an
    embedded LocalCluster of `workers` single-threaded processes, closed on the way out (the
    sweep's points and a sensitivity's perturbations run on it)."""
    from dask.distributed import Client, LocalCluster

    address = scheduler_address(scheduler)
    cluster = None
    if address:
        try:
            client = Client(address, timeout=SCHEDULER_TIMEOUT_S)
        except (OSError, TimeoutError, ValueError) as exc:
            raise ConfigError(f"cannot reach the Dask scheduler at {address}: {exc}",
                              key="--scheduler") from None
    else:
        with _children_ignore_sigint(), warnings.catch_warnings():
            # a port taken by another cluster only moves the dashboard: not worth a warning
            warnings.filterwarnings("ignore", message="Port .* is already in use")
            cluster = LocalCluster(n_workers=workers or 1, threads_per_worker=1, processes=True,
                                   dashboard_address=":0")
        client = Client(cluster)
    try:
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
