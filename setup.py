"""Packaging for the parts pyproject.toml cannot express.

Mercurial finds third-party extensions as modules of the ``hgext3rd``
namespace package, whose ``__init__`` Mercurial itself installs.  Our
``hgext/NAME.py`` and ``hgext/NAME/`` are installed into that namespace as
``hgext3rd.NAME`` (modules and packages), without an ``hgext3rd/__init__``
of our own, so ``[extensions] NAME =`` finds them and Mercurial's file is
never overwritten.
"""

import glob
import os

from setuptools import setup

MODULES = sorted(
    "hgext3rd." + os.path.splitext(os.path.basename(path))[0]
    for path in glob.glob(os.path.join("hgext", "*.py")))
PACKAGES = sorted(
    "hgext3rd." + os.path.basename(os.path.dirname(path))
    for path in glob.glob(os.path.join("hgext", "*", "__init__.py")))

setup(
    packages=["zstdwire", "pastbytes", "gitbridge", "vcsperf", "vcsperf.core",
              "vcsperf.harness", "vcsperf.bench", "vcsperf.check"] + PACKAGES,
    # py.typed: zstdwire, pastbytes and the core are annotated (PEP 561).
    package_data={"vcsperf.harness": ["data/*.tsv"],
                  "vcsperf.core": ["py.typed"], "zstdwire": ["py.typed"],
                  "pastbytes": ["py.typed"]},
    package_dir={"hgext3rd": "hgext"},
    py_modules=MODULES,
    scripts=["bin/gitbridge"],
)
