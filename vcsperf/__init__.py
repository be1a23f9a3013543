"""vcsperf: the logic that the Mercurial and Git adapters share, and the
tools around the suite, one layer per folder:

- ``core``: what the adapters in ``hgext/`` and ``gitbridge/`` share,
  over ``zstdwire``, on the standard library, zstandard and boto3; of
  ours the adapters import nothing else but ``zstdwire`` and
  ``pastbytes``, the bytes-literal importer;
- ``harness``: real ``hg`` and ``git`` processes, servers on 127.0.0.1,
  real-content histories, for the tests, benchmarks and the check, and
  the measurements the benchmarks and the check both take;
- ``bench``: one module per benchmark, run as ``vcsperf bench NAME``;
- ``check``: ``vcsperf check`` and ``vcsperf demo``.

``tests/test_layers.py`` holds every import to these rules."""

# The suite's release, kept in the core (the layer the adapters may name).
from .core import __version__

__all__ = ["__version__"]
