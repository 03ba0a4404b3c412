"""`hwsim report`: a self-contained page whose plots render in a real headless browser."""

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
                    "--out", str(out)], check=True, capture_output=True, timeout=300)
    res = subprocess.run([sys.executable, "-m", "hwsim.cli", "report", str(out)], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    page = (out / "index.html").read_text()
    assert "data:image/png" not in page and "hwsim run --plots</code> draws them" in page
