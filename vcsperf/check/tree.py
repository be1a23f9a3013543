"""The files of a revision, as ``vcsperf check`` lists them: names hg
prints as hex, so that a name holding any byte (a form feed, a byte that
is not UTF-8) comes back whole, as the ``str`` the filesystem functions
take (``os.fsdecode``)."""

import os


class File:
    """A file of a revision: ``path`` (``str``, relative), ``size`` in
    bytes, and whether it is a ``symlink`` or ``executable``."""

    def __init__(self, path, size, flags):
        self.path = path
        self.size = size
        self.symlink = "l" in flags
        self.executable = "x" in flags


def files(run, repo, rev, env, include=()):
    """The files of revision ``rev`` of ``repo`` (``include``: hg file
    patterns), sorted by name; ``run(args, env)`` runs hg and returns its
    output."""
    out = run(["files", "-R", repo, "-r", rev, *[
        option for pattern in include for option in ("-I", pattern)],
        "-T", "{size} {path|hex} {flags}\n"], env)
    listed = []
    for line in out.split("\n"):
        if line:
            size, name, flags = (line.split(" ") + [""])[:3]
            listed.append(File(os.fsdecode(bytes.fromhex(name)), int(size),
                               flags))
    return sorted(listed, key=lambda f: os.fsencode(f.path))


def exact_patterns(paths):
    """hg's ``listfile0:`` content naming exactly ``paths``: ``path:``
    patterns (a bare line is a glob, where ``[1]`` is a character class),
    NUL-separated (a name may hold a newline)."""
    return b"\0".join(b"path:" + os.fsencode(path) for path in paths)
