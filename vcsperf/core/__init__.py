"""What the adapters share, in plain Python: commit-ID rules and series,
pooled-checkout primitives, bundle publishing, Mercurial's boolean words
for settings, the subprocess runner, the user error.

Of ours it imports ``zstdwire`` only; besides the standard library,
zstandard and boto3 (``bundlestore``'s uploads to object storage, imported
when one is made): no Mercurial, no dulwich.  The adapters (``hgext/``,
``gitbridge/``) and every other ``vcsperf`` layer may import it."""

#: The release of the whole suite (the distribution ``vcsperf``: this core,
#: the extensions, gitbridge, zstdwire and the tools), and its one source:
#: pyproject.toml reads it from here, ``vcsperf --version``, ``gitbridge
#: --version`` and ``hg version -v`` show it.  It lives in the core, the
#: one layer every other imports, so the adapters can name it too.
__version__ = "0.3.0"
