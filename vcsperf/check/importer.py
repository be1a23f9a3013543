"""The ``importer`` feature of ``vcsperf check``: every Python file at the
tip (with ``--quick``, ``QUICK_FILES`` of them spread over their sorted
paths, named in the report) rewritten by pastbytes and compiled, beside a
plain compile."""

import os
import time
import warnings

from vcsperf.check.outcome import Failed
from vcsperf.core import pastbytes
from vcsperf.harness import history

#: Python files a quick run compiles: a fixed number, whatever the tree.
QUICK_FILES = 200


def importer(check, work):
    env = check.hg_env()
    names = sorted(check.hg(["files", "-r", "tip", "-I", "glob:**.py",
                             "-T", "{path}\n"], env, cwd=check.base,
                            check=False).splitlines())
    if not names:
        return "the repository has no Python files at tip"
    check.fact("python files", len(names))
    if check.quick and len(names) > QUICK_FILES:
        names = sorted(history.spread(names, QUICK_FILES))
        check.fact("files sampled", names)
    listed = os.path.join(work, "files")
    with open(listed, "w") as fh:
        fh.writelines(name + "\n" for name in names)
    tree = os.path.join(work, "tree")
    with check.step("hg archive %d Python files at tip" % len(names)):
        check.hg(["archive", "-r", "tip", "-t", "files", "-I",
                  "listfile:" + listed, tree], env, cwd=check.base)
    paths = [os.path.join(tree, name) for name in names]
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
    check.fact("python files compiled", len(paths))
    check.fact("not Python 3 as they are", len(python2))
    check.fact("compile after the rewrite", len(paths) - len(python2)
               - len(broken))
    if broken:
        raise Failed("%d files compile as they are but not after the "
                     "rewrite, the first %s" % (len(broken), broken[0]))
