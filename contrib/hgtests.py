#!/usr/bin/env python3
"""Run a subset of Mercurial's own test suite with zstdstore forced on.

    python contrib/hgtests.py [--jobs 2] [--baseline] [TEST ...]

The tests come from the sdist of the installed Mercurial, downloaded once
from PyPI (its sha256 checked against the digest PyPI publishes) into
``$VCSPERF_CACHE/hg-sdist``.  ``tests/run-tests.py`` runs them against the
installed ``hg`` with ``--extra-config-opt extensions.zstdstore=`` and
``format.revlog-compression=zstd-dict``, so every repository a test makes
uses the dictionary engine.  ``--baseline`` runs the same tests without the
extension, to tell failures of this environment (no Rust, no network)
from differences the engine causes.  A summary of passes and failures is
printed; run-tests leaves the ``.err`` output of each failure beside its
test for reading the differences.
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import urllib.request

from mercurial import util

from vcsperf import history

#: Store, clone, stream, bundle, share, verify and upgrade areas.
DEFAULT_TESTS = [
    "test-fncache.t", "test-hardlinks.t", "test-inherit-mode.t",
    "test-censor.t", "test-strip.t", "test-revlog.t", "test-commit.t",
    "test-clone.t", "test-clone-r.t", "test-clone-pull-corruption.t",
    "test-clone-stream.t", "test-clone-stream-format.t",
    "test-clone-stream-revlog-split.t", "test-bundle.t", "test-bundle-type.t",
    "test-bundle-r.t", "test-clonebundles.t", "test-pull-pull-corruption.t",
    "test-share.t", "test-share-safe.t", "test-verify.t",
    "test-upgrade-repo.t",
]


def sdist(cache):
    """Path of the extracted sdist of the running Mercurial."""
    version = util.version().decode("ascii").split("+")[0]
    root = os.path.join(cache, "hg-sdist", "mercurial-%s" % version)
    if os.path.isdir(root):
        return root
    with urllib.request.urlopen(
            "https://pypi.org/pypi/mercurial/json") as resp:
        files = json.load(resp)["releases"][version]
    [source] = [f for f in files if f["packagetype"] == "sdist"]
    os.makedirs(os.path.dirname(root), exist_ok=True)
    archive = root + ".tar.gz"
    with urllib.request.urlopen(source["url"]) as resp:
        data = resp.read()
    if hashlib.sha256(data).hexdigest() != source["digests"]["sha256"]:
        raise RuntimeError("%s: sha256 mismatch" % source["url"])
    with open(archive, "wb") as fh:
        fh.write(data)
    with tarfile.open(archive) as tar:
        tar.extractall(os.path.dirname(root), filter="data")
    return root


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tests", nargs="*", default=DEFAULT_TESTS)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--baseline", action="store_true",
                        help="run without zstdstore")
    args = parser.parse_args()
    root = sdist(history.default_cache_dir())
    bindir = os.path.dirname(sys.executable)
    tests = os.path.join(root, "tests")
    forced = [] if args.baseline else [
        "--extra-config-opt", "extensions.zstdstore=",
        "--extra-config-opt", "format.revlog-compression=zstd-dict"]
    # The tests' helper scripts import mercurial with plain python.
    site = os.path.dirname(os.path.dirname(util.__file__))
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"],
               PYTHONPATH=site)
    subprocess.run(
        [sys.executable, "run-tests.py", "--with-hg",
         os.path.join(bindir, "hg"), "-j", str(args.jobs), "--json"]
        + forced + args.tests, cwd=tests, env=env)
    with open(os.path.join(tests, "report.json")) as fh:
        report = json.loads(fh.read().split("=", 1)[1])
    for name, outcome in sorted(report.items()):
        print("%-40s %s (%ss)" % (name, outcome["result"], outcome["time"]))
    counts = {}
    for outcome in report.values():
        counts[outcome["result"]] = counts.get(outcome["result"], 0) + 1
    print(", ".join("%d %s" % (n, r) for r, n in sorted(counts.items())))


if __name__ == "__main__":
    sys.exit(main())
