"""validation/trace_store.py: a folder's traces packed into one traces.tar.xz come back byte for
byte through trace_path, and a loose trace wins over the archive (a fresh capture)."""

import gzip
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validation"))
from trace_store import ARCHIVE, pack, trace_path, traces_in  # noqa: E402


def test_packed_traces_come_back_byte_for_byte(tmp_path, monkeypatch):
    monkeypatch.setenv("HWSIM_TRACE_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "traces"
    folder.mkdir()
    docs = {"a.json.gz": b'{"traceEvents": [1]}', "b.json.gz": b'{"traceEvents": [2, 3]}'}
    for name, doc in docs.items():
        (folder / name).write_bytes(gzip.compress(doc))
    pack(folder)
    assert not list(folder.glob("*.json.gz")) and (folder / ARCHIVE).exists()
    assert traces_in(folder) == sorted(docs)
    for name, doc in docs.items():
        assert trace_path(folder / name).read_bytes() == doc
    (folder / "a.json.gz").write_bytes(gzip.compress(b"{}"))          # a loose capture wins
    assert trace_path(folder / "a.json.gz") == folder / "a.json.gz"
    with pytest.raises(FileNotFoundError, match="not in"):
        trace_path(folder / "c.json.gz")
