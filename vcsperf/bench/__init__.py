"""The benchmarks, one module each, run as ``vcsperf bench NAME``: each
measures core Mercurial (or git) and our feature side by side, in one run.
``benchcli`` is their shared command line; ``chunkread`` (an hg extension)
and ``hgchunks`` read a repository's revlog chunks.  Imports the core and
the harness."""

import importlib
import os

from vcsperf.core.errors import Abort, print_abort
from vcsperf.core.process import CommandError

#: ``vcsperf bench NAME``: the module ``vcsperf.bench.NAME`` and its
#: ``main(argv)``.
NAMES = ("codec", "zstdstore", "zstdgroups", "wirezstd", "pastbytes",
         "commitid", "commitindex", "sharepool", "bundlegen", "timetotree",
         "wirecache", "packcache")


def main(name, argv):
    """Run the benchmark ``name`` with its command-line arguments; a bad
    argument (a repository that is none, or that a command the benchmark
    runs on it refuses) is one ``abort:`` line."""
    try:
        return importlib.import_module("vcsperf.bench." + name).main(argv)
    except Abort as abort:
        return print_abort(abort)
    except CommandError as err:
        return print_abort(command_failed(err))


def command_failed(err):
    """The ``Abort`` for a command a benchmark ran that failed: the
    command's name and its own error (Mercurial's ``abort:`` line and
    hint, or else its last line)."""
    lines = [line for line in (err.stderr or "").splitlines() if line]
    words = [os.path.basename(str(err.cmd[0]))] + _subcommand(err.cmd[1:])
    errors = [i for i, line in enumerate(lines)
              if line.startswith(("abort: ", "error: ", "fatal: "))]
    if not errors:
        return Abort("%s failed (exit %d)%s" % (
            " ".join(words), err.returncode,
            ": " + lines[-1] if lines else ""))
    first = errors[0]
    hint = lines[first + 1] if first + 1 < len(lines) else ""
    return Abort("%s failed: %s" % (" ".join(words),
                                    lines[first].split(": ", 1)[1]),
                 hint=hint[1:-1] if hint.startswith("(") and
                 hint.endswith(")") else None)


def _subcommand(args):
    """``[NAME]``: the subcommand in a command's arguments (past global
    options such as ``-R PATH``), or ``[]``."""
    args = [str(arg) for arg in args]
    while args and args[0].startswith("-"):
        option = args.pop(0)
        if option in ("-R", "--repository", "--cwd", "--config", "-C") \
                and args:
            args.pop(0)
    return args[:1]
