"""The linter and the type checker, run by the suite so CI runs them.

ruff (pyflakes and import order) over all of our Python, and mypy over
the typed packages (zstdwire, pastbytes and the core), each as configured
in pyproject.toml, from the venv that runs the tests: the ``test`` extra
installs both.  A venv without one (mypy needs Python 3.10 or later)
skips its test.
"""

import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run_tool(module, *args):
    """``python -m module args`` at the top of the tree, skipped when the
    venv lacks ``module``; its exit status and everything it printed."""
    if importlib.util.find_spec(module) is None:
        pytest.skip("%s is not installed in this venv" % module)
    proc = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT,
                          capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr


def test_ruff_finds_nothing():
    status, output = _run_tool("ruff", "check", "--no-fix",
                               "--output-format", "concise")
    assert status == 0, "ruff check found problems:\n" + output


def test_mypy_finds_nothing_in_the_typed_packages():
    status, output = _run_tool("mypy")
    assert status == 0, "mypy found problems:\n" + output
