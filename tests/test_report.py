"""`hwsim report`: a self-contained page whose plots render in a real headless browser."""

import base64
import json
import os
import shutil
import subprocess
import sys

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("r") / "run"
    subprocess.run([sys.executable, "-m", "hwsim.cli", "run", "--set", "workload.decode_steps=1",
                    "--out", str(out), "--plots"], check=True, capture_output=True, timeout=300)
    res = subprocess.run([sys.executable, "-m", "hwsim.cli", "report", str(out)], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return out / "index.html"


def test_report_is_self_contained(report):
    page = report.read_text()
    assert "data:image/png;base64," in page
    assert "src=\"http" not in page and "href=\"http" not in page
    assert "resolved configuration" in page and "provenance" in page and "calibration" in page


def test_report_of_a_missing_folder_exits_2(tmp_path):
    res = subprocess.run([sys.executable, "-m", "hwsim.cli", "report", str(tmp_path)], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2 and "manifest.json" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (apt-get install chromium)")
def test_plots_render_in_headless_chromium(report, tmp_path):
    dom = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'p1'}", "--dump-dom",
                          "--virtual-time-budget=5000", report.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    n_images = report.read_text().count("<img ")
    assert f'data-images="{n_images}/{n_images}"' in dom and n_images >= 2
    shot = tmp_path / "shot.png"
    subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'p2'}", f"--screenshot={shot}",
                    "--window-size=1200,2400", "--virtual-time-budget=5000", report.as_uri()],
                   capture_output=True, timeout=120)
    from PIL import Image
    img = Image.open(shot).convert("L")
    lo, hi = img.getextrema()
    assert hi - lo > 100                       # not blank
    colours = len(img.convert("RGB").getcolors(maxcolors=1 << 20) or [])
    assert colours > 50                        # plots, not just text on white


def test_report_of_a_bundle_without_figures_says_how_to_draw_them(tmp_path):
    out = tmp_path / "run"
    subprocess.run([sys.executable, "-m", "hwsim.cli", "run", "--set", "workload.decode_steps=1",
                    "--out", str(out), "--no-plots"], check=True, capture_output=True, timeout=300)
    res = subprocess.run([sys.executable, "-m", "hwsim.cli", "report", str(out)], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    page = (out / "index.html").read_text()
    missing = "not in this bundle: breakdown.png, gantt.png, channels.png (hwsim run --plots draws them)"
    assert "data:image/png" not in page and missing in page and missing in res.stderr


@pytest.fixture(scope="module")
def default_bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("d") / "run"
    subprocess.run([sys.executable, "-m", "hwsim.cli", "run", "--set", "workload.decode_steps=1",
                    "--out", str(out)], check=True, capture_output=True, timeout=300)
    return out


def test_report_embeds_the_default_breakdown_and_names_the_missing_figures(default_bundle):
    res = subprocess.run([sys.executable, "-m", "hwsim.cli", "report", str(default_bundle)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    page = (default_bundle / "index.html").read_text()
    assert page.count("data:image/png;base64,") == 1 and 'alt="breakdown.png"' in page
    assert "not in this bundle: gantt.png, channels.png" in page


def _tampered(bundle, tmp_path, name, make):
    """A copy of the bundle whose `name` is made by make(path)."""
    copy = tmp_path / "copy"
    shutil.copytree(bundle, copy, symlinks=True)
    (copy / "index.html").unlink(missing_ok=True)
    (copy / name).unlink(missing_ok=True)
    make(copy / name)
    return copy


SECRET = "hwsim-test-secret-4f2a"


@pytest.mark.parametrize("case, why", [
    ("symlink", "a symbolic link"),
    ("not-png", "not a PNG image"),
    ("other-png", "does not match the SHA-256"),
    ("fifo", "not a regular file"),
])
def test_report_refuses_a_figure_that_is_not_the_bundles_own_image(default_bundle, tmp_path, case, why):
    """Issue 29: a bundle from elsewhere with breakdown.png -> a secret file must not get that
    file embedded in a page made to be shared; nor anything that is not the PNG it lists."""
    secret = tmp_path / "id_secret"
    secret.write_text(SECRET)
    make = {"symlink": lambda p: p.symlink_to(secret),
            "not-png": lambda p: p.write_text(SECRET),
            "other-png": lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n" + SECRET.encode()),
            "fifo": lambda p: os.mkfifo(p)}[case]
    copy = _tampered(default_bundle, tmp_path, "breakdown.png", make)
    res = subprocess.run([sys.executable, "-m", "hwsim.cli", "report", str(copy)], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    page = (copy / "index.html").read_text()
    encoded = base64.b64encode(SECRET.encode()).decode()[:16]
    assert SECRET not in page and encoded not in page and "data:image/png" not in page
    assert f"breakdown.png is left out: {why}" in res.stderr and f"breakdown.png is left out: {why}" in page


def test_report_refuses_a_manifest_that_is_a_link(default_bundle, tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"summary": SECRET}))
    copy = _tampered(default_bundle, tmp_path, "manifest.json", lambda p: p.symlink_to(secret))
    res = subprocess.run([sys.executable, "-m", "hwsim.cli", "report", str(copy)], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2 and "manifest.json is refused: a symbolic link" in res.stderr
    assert not (copy / "index.html").exists()


def test_a_figure_over_the_size_bound_is_read_no_further(tmp_path, monkeypatch):
    import hwsim.report as report

    (tmp_path / "big.png").write_bytes(report.PNG_SIGNATURE + bytes(4 * 2**20))
    monkeypatch.setitem(report.MAX_BYTES, ".png", 2**20)
    with pytest.raises(report.Refused, match="larger than 1 MiB"):
        report.bundle_file(tmp_path, "big.png")
    (tmp_path / "small.png").write_bytes(report.PNG_SIGNATURE + bytes(2**20 - 8))
    assert len(report.bundle_file(tmp_path, "small.png")) == 2**20
