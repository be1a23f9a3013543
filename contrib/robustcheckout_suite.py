#!/usr/bin/env python3
"""Run Mozilla's robustcheckout test suite against upstream's extension and
against ours, and print one table: test | upstream | ours.

    python contrib/robustcheckout_suite.py VCT [--sdist DIR] [--jobs 2]
        [--only upstream|ours] [--port N] [--keep] [TEST ...]

VCT is a checkout of mozilla/version-control-tools (or any directory with
its ``hgext/robustcheckout``).  The tests are Mercurial ``.t`` files run
by the ``tests/run-tests.py`` of the installed Mercurial's sdist (DIR,
default ``$VCSPERF_CACHE/hg-sdist/mercurial-VERSION`` as
``contrib/hgtests.py`` extracts it).  This script fetches nothing.

Each run gets a scratch directory laid out as version-control-tools' own
runner lays out ``$TESTDIR``: the ``.t`` files, a ``common-pattern.py``
that turns ``localhost`` into ``$LOCALHOST``, and
``hgext/robustcheckout/`` holding the extension and the tests' helpers.
``helpers.sh`` writes ``robustcheckout = $TESTDIR/hgext/robustcheckout``
into the tests' hgrc; for the upstream column that directory holds
upstream's ``__init__.py``, for ours a symlink to the installed
``hgext3rd/robustcheckout.py`` (sharepool under Mozilla's name).  Nothing
else differs between the two runs.

One environment artifact is patched in the scratch copies, and the table
says so: ``test-server-failure.t`` makes its bad server cut every response
after 500 bytes, but the capabilities reply of Mercurial 6.9 and later is
longer than that, so both extensions retry a cut handshake until the test
times out.  The copies cut at ``--bytelimit`` (default 1000) bytes, which
leaves the handshake whole and cuts the stream clone as the test intends;
``--bytelimit 500`` runs the test unchanged.  The test then still fails,
for both, on byte counts written for an older Mercurial and on progress
bars that depend on timing; for a test that fails in both columns the
table says whether the two outputs are the same once progress bars and
the lines meant for other Mercurial versions are set aside.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from mercurial import util

from vcsperf.harness import history

PATTERNS = "substitutions = [(br'\\blocalhost\\b', br'$LOCALHOST')]\n"
BYTELIMIT_TEST = "test-server-failure.t"


def default_sdist():
    version = util.version().decode("ascii").split("+")[0]
    return os.path.join(history.default_cache_dir(), "hg-sdist",
                        "mercurial-%s" % version)


def ours_path():
    """The installed module that makes ``robustcheckout = PATH`` ours."""
    from hgext3rd import robustcheckout
    return os.path.realpath(robustcheckout.__file__)


def scratch(vct, extension, bytelimit, root):
    """A ``$TESTDIR`` for one run; ``extension`` is the file to load."""
    source = os.path.join(vct, "hgext", "robustcheckout")
    helpers = os.path.join(root, "hgext", "robustcheckout", "tests")
    os.makedirs(helpers)
    tests = []
    for name in sorted(os.listdir(os.path.join(source, "tests"))):
        path = os.path.join(source, "tests", name)
        if name.endswith(".t"):
            with open(path) as fh:
                text = fh.read()
            if name == BYTELIMIT_TEST:
                text = text.replace("bytelimit = 500",
                                    "bytelimit = %d" % bytelimit)
            with open(os.path.join(root, name), "w") as fh:
                fh.write(text)
            tests.append(name)
        else:
            shutil.copy(path, helpers)
    os.symlink(extension, os.path.join(root, "hgext", "robustcheckout",
                                       "__init__.py"))
    with open(os.path.join(root, "common-pattern.py"), "w") as fh:
        fh.write(PATTERNS)
    return tests


def comparable_output(path):
    """The lines of a failed test's ``.err`` that do not depend on timing
    (progress bars) or on which conditional lines run-tests matched."""
    lines = []
    with open(path) as fh:
        for line in fh:
            if "\\r" in line or "(?)" in line or "(no-" in line:
                continue
            lines.append(re.sub(r" \(hg\d+ !\)$", "", line.rstrip("\n")))
    return lines


def run(name, extension, args, workdir):
    """run-tests.py's result for each test: {test: result}."""
    root = os.path.join(workdir, name)
    tests = scratch(args.vct, extension, args.bytelimit, root)
    if args.tests:
        tests = [t for t in tests if t in args.tests]
    bindir = os.path.dirname(sys.executable)
    # The tests' helper scripts import mercurial with plain python.
    site = os.path.dirname(os.path.dirname(util.__file__))
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"],
               PYTHONPATH=site, LOCALHOST="localhost")
    env.pop("TASKCLUSTER_INSTANCE_TYPE", None)
    subprocess.run(
        [sys.executable, os.path.join(args.sdist, "tests", "run-tests.py"),
         "--with-hg", os.path.join(bindir, "hg"), "-j", str(args.jobs),
         "--json", "--timeout", str(args.timeout)]
        + (["--port", str(args.port)] if args.port else []) + tests,
        cwd=root, env=env, stdout=subprocess.DEVNULL)
    with open(os.path.join(root, "report.json")) as fh:
        report = json.loads(fh.read().split("=", 1)[1])
    return {test: report.get(test, {}).get("result", "missing")
            for test in tests}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("vct", help="checkout of version-control-tools")
    parser.add_argument("tests", nargs="*", help="only these .t files")
    parser.add_argument("--sdist", default=default_sdist(),
                        help="extracted Mercurial sdist "
                        "(default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=int, default=360)
    parser.add_argument("--port", type=int,
                        help="first port of run-tests.py's servers (when "
                        "other suites run on this machine)")
    parser.add_argument("--bytelimit", type=int, default=1000,
                        help="bad-server cut in %s (upstream: 500)"
                        % BYTELIMIT_TEST)
    parser.add_argument("--only", choices=("upstream", "ours"))
    parser.add_argument("--keep", action="store_true",
                        help="keep the scratch directories (.err files)")
    args = parser.parse_intermixed_args()
    if not os.path.isfile(os.path.join(args.sdist, "tests", "run-tests.py")):
        parser.error("no tests/run-tests.py under %s (contrib/hgtests.py "
                     "extracts the sdist)" % args.sdist)
    upstream = os.path.join(os.path.abspath(args.vct), "hgext",
                            "robustcheckout", "__init__.py")
    columns = [("upstream", lambda: upstream), ("ours", ours_path)]
    columns = [(name, find()) for name, find in columns
               if args.only in (None, name)]
    workdir = tempfile.mkdtemp(prefix="robustcheckout-suite-")
    results = {name: run(name, path, args, workdir)
               for name, path in columns}
    names = sorted(set().union(*results.values()))
    notes = {}
    if len(columns) == 2:
        for test in names:
            if all(results[c].get(test) == "failure" for c, _ in columns):
                same = len({tuple(comparable_output(os.path.join(
                    workdir, c, test + ".err"))) for c, _ in columns}) == 1
                notes[test] = ("same output as upstream" if same
                               else "outputs differ")
    print("Mercurial %s, %s" % (util.version().decode(), args.vct))
    print("%-40s %s" % ("test", " | ".join("%-8s" % c for c, _ in columns)))
    for test in names:
        label = test + (" (bytelimit %d)" % args.bytelimit
                        if test == BYTELIMIT_TEST and args.bytelimit != 500
                        else "")
        print("%-40s %s %s" % (label, " | ".join(
            "%-8s" % results[c].get(test, "-")
            for c, _ in columns), notes.get(test, "")))
    for column, _ in columns:
        passed = sum(r == "success" for r in results[column].values())
        print("%s: %d of %d pass" % (column, passed, len(results[column])))
    if args.keep:
        print("scratch directories: %s" % workdir)
    else:
        shutil.rmtree(workdir)


if __name__ == "__main__":
    sys.exit(main())
