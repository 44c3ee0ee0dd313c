"""Optional dependencies: a missing extra is one line naming the extra, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from core.extras import EXTRAS, MissingExtra, require

REPO = Path(__file__).resolve().parents[3]


def test_require_returns_the_module():
    assert require("matplotlib", "experiments").__name__ == "matplotlib"


def test_require_names_the_extra_when_the_package_is_missing():
    with pytest.raises(MissingExtra) as info:
        require("groupshift_no_such_package.sub", "spark")
    assert str(info.value) == (
        "this command needs the 'spark' extra: pip install 'groupshift[spark]' "
        "(groupshift_no_such_package is missing)"
    )


def test_extras_match_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    for extra, packages in EXTRAS.items():
        named = {req.split(">")[0].split("<")[0].split("=")[0].strip() for req in extras[extra]}
        assert named == set(packages), extra
    core = {req.split(">")[0].split("<")[0].split("=")[0].strip() for req in project["dependencies"]}
    assert core.isdisjoint(p for packages in EXTRAS.values() for p in packages)


def test_cli_without_the_experiments_extra_prints_one_line(tmp_path):
    # Hide matplotlib from the subprocess as an install without the extra would.
    blocker = tmp_path / "blocked"
    blocker.mkdir()
    (blocker / "matplotlib.py").write_text("raise ImportError('blocked', name='matplotlib')\n")
    env = dict(os.environ, PYTHONPATH=f"{blocker}{os.pathsep}{REPO}", GROUPSHIFT_HOME=str(tmp_path / "home"))
    proc = subprocess.run(
        [sys.executable, "-m", "cli", "demo", "--zk", "127.0.0.1:1", "--plot", str(tmp_path / "p.png")],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "error: this command needs the 'experiments' extra: pip install 'groupshift[experiments]' "
        "(matplotlib is missing)"
    ]
    assert not (tmp_path / "home").exists() and not (tmp_path / "p.png").exists()
