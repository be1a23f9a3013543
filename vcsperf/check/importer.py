"""The ``importer`` feature of ``vcsperf check``: every Python file at the
tip rewritten by pastbytes and compiled, beside a plain compile."""

import os
import time
import warnings

from vcsperf.check.outcome import Failed
from vcsperf.core import pastbytes
from vcsperf.harness import tools

def importer(check, work):
    tree = os.path.join(work, "tree")
    with check.step("hg archive the Python files at tip"):
        try:
            check.hg(["archive", "-r", "tip", "-t", "files", "-I",
                      "glob:**.py", tree], check.hg_env(), cwd=check.base)
        except tools.CommandError as err:
            if "no files match the archive pattern" in err.stderr:
                return "the repository has no Python files at tip"
            raise
    paths = sorted(os.path.join(root, name)
                   for root, _, names in os.walk(tree) for name in names
                   if name.endswith(".py"))
    if not paths:
        return "the repository has no Python files at tip"
    plain_seconds = ours_seconds = 0.0
    python2 = []
    broken = []
    with check.step("compile %d files, plain and rewritten" % len(paths)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for index, path in enumerate(paths):
                if index % 50 == 0:
                    check.console.count(index, len(paths), "files")
                with open(path, "rb") as fh:
                    data = fh.read()
                start = time.perf_counter()
                try:
                    compile(data, path, "exec", dont_inherit=True)
                except (SyntaxError, ValueError):
                    python2.append(path)
                    continue
                finally:
                    plain_seconds += time.perf_counter() - start
                start = time.perf_counter()
                try:
                    pastbytes.compile_source(data, path)
                except (SyntaxError, ValueError, pastbytes.ScanError) as exc:
                    broken.append("%s: %s" % (os.path.relpath(path, tree),
                                              exc))
                finally:
                    ours_seconds += time.perf_counter() - start
    check.compare("compile seconds", plain_seconds, ours_seconds,
                  "seconds", "lower", "plain compile")
    check.fact("python files", len(paths))
    check.fact("not Python 3 as they are", len(python2))
    check.fact("compile after the rewrite", len(paths) - len(python2)
               - len(broken))
    if broken:
        raise Failed("%d files compile as they are but not after the "
                     "rewrite, the first %s" % (len(broken), broken[0]))
