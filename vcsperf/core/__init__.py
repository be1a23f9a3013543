"""What the adapters share, in plain Python: commit-ID rules and series,
pooled-checkout primitives, the bytes-literal importer, the user error.
Imports the standard library and ``zstdwire`` only."""

#: The release of the whole suite (the distribution ``vcsperf``: this core,
#: the extensions, gitbridge, zstdwire and the tools), and its one source:
#: pyproject.toml reads it from here, ``vcsperf --version``, ``gitbridge
#: --version`` and ``hg version -v`` show it.  It lives in the core, the
#: one layer every other imports, so the adapters can name it too.
__version__ = "0.2.0"
