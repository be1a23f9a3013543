"""The ``importer`` feature of ``vcsperf check``: every Python file at the
tip (with ``--quick``, ``QUICK_FILES`` of them spread over their sorted
paths, named in the report) rewritten by pastbytes and compiled, beside a
plain compile."""

import os
import stat
import time
import warnings

import pastbytes
from vcsperf.check import tree
from vcsperf.check.outcome import Failed
from vcsperf.harness import history

#: Python files a quick run compiles: a fixed number, whatever the tree.
QUICK_FILES = 200


def _read_regular(path):
    """The content of the regular file ``path``, never following a
    symlink; no more than the file's size when opened, so a file that
    grows meanwhile cannot run the reader out of memory."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Failed("%s is not a regular file in the archive" % path)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read(st.st_size)
    finally:
        os.close(fd)


def importer(check, work):
    env = check.hg_env()
    # exit 1 when no file matches
    python = tree.files(lambda args, env: check.hg(args, env, check=False),
                        check.base, "tip", env, include=["rootglob:**.py"])
    # A symlink's target is none of the tree's business (it may name
    # /dev/zero or a FIFO): only regular files are compiled.
    names = [f.path for f in python if not f.symlink]
    if not names:
        return "the repository has no Python files at tip"
    check.fact("python files", len(names))
    if len(names) < len(python):
        check.fact("symlinks left out", len(python) - len(names))
    if check.quick and len(names) > QUICK_FILES:
        names = sorted(history.spread(names, QUICK_FILES), key=os.fsencode)
        check.fact("files sampled", names)
    listed = os.path.join(work, "files")
    with open(listed, "wb") as fh:
        fh.write(tree.exact_patterns(names))
    archive = os.path.join(work, "tree")
    with check.step("hg archive %d Python files at tip" % len(names)):
        check.hg(["archive", "-r", "tip", "-t", "files", "-I",
                  "listfile0:" + listed, archive], env, cwd=check.base)
    paths = [os.path.join(archive, name) for name in names]
    plain_seconds = ours_seconds = 0.0
    python2 = []
    broken = []
    with check.step("compile %d files, plain and rewritten" % len(paths)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for index, path in enumerate(paths):
                if index % 50 == 0:
                    check.console.count(index, len(paths), "files")
                data = _read_regular(path)
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
                    broken.append("%s: %s" % (os.path.relpath(
                        path, archive), exc))
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
