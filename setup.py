"""Packaging for the parts pyproject.toml cannot express.

Mercurial finds third-party extensions as modules of the ``hgext3rd``
namespace package, whose ``__init__`` Mercurial itself installs.  Our
``hgext/*.py`` are installed into that namespace as plain modules, without
an ``__init__`` of our own, so ``[extensions] NAME =`` finds them and
Mercurial's file is never overwritten.
"""

import glob
import os

from setuptools import setup

EXTENSIONS = sorted(
    "hgext3rd." + os.path.splitext(os.path.basename(path))[0]
    for path in glob.glob(os.path.join("hgext", "*.py")))

setup(
    packages=["zstdwire", "gitbridge", "vcsperf", "vcsperf.core",
              "vcsperf.harness", "vcsperf.bench", "vcsperf.check"],
    package_data={"vcsperf.harness": ["data/*.tsv"]},
    package_dir={"hgext3rd": "hgext"},
    py_modules=EXTENSIONS,
)
