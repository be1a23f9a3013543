"""The benchmarks, one module each, run as ``vcsperf bench NAME``: each
measures core Mercurial (or git) and our feature side by side, in one run.
``benchcli`` is their shared command line; ``chunkread`` (an hg extension)
and ``hgchunks`` read a repository's revlog chunks.  Imports the core and
the harness."""

import importlib

from vcsperf.core.errors import Abort, print_abort

#: ``vcsperf bench NAME``: the module ``vcsperf.bench.NAME`` and its
#: ``main(argv)``.
NAMES = ("codec", "zstdstore", "zstdgroups", "wirezstd", "pastbytes",
         "commitid", "commitindex", "sharepool", "bundlegen")


def main(name, argv):
    """Run the benchmark ``name`` with its command-line arguments; a bad
    argument (a repository that is none) is one ``abort:`` line."""
    try:
        return importlib.import_module("vcsperf.bench." + name).main(argv)
    except Abort as abort:
        return print_abort(abort)
