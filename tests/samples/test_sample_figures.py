"""Running a sample leaves the checkout as it was: figures are drawn only into the
directory `--figures DIR` names. The CG sample runs at its full size (the size that
drew figures before) in a copy of samples/, as a user runs it."""
import os
import shutil
import subprocess
import sys

import pytest

from helpers import REPO

pytestmark = [pytest.mark.iree, pytest.mark.slow]

SAMPLES = REPO / "samples"


@pytest.fixture
def samples(tmp_path):
    copy = tmp_path / "samples"
    shutil.copytree(SAMPLES, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def snapshot(directory):
    """{path: (bytes, mtime)} of every file under `directory` but Python's caches."""
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in directory.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def run_sample(samples, *argv):
    run = subprocess.run([sys.executable, "cg.py", *argv], cwd=samples, capture_output=True,
                         text=True, timeout=1200, env={**os.environ, "MPLBACKEND": "Agg"})
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout


def test_a_sample_writes_no_file_unless_asked(samples):
    before = snapshot(samples)
    out = run_sample(samples)
    assert snapshot(samples) == before
    assert "figure:" not in out


def test_figures_go_to_the_directory_named(samples, tmp_path):
    out = run_sample(samples, "--small", "--figures", str(tmp_path / "figs"))
    figure = tmp_path / "figs" / "cg.png"
    assert figure.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert f"figure: {figure}" in out
