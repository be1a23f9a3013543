"""pastbytes: ``from __past__ import bytes_literals``.  Python-2-era,
bytes-first source runs on Python 3 with its plain string literals
rewritten to bytes literals at import time.

    import pastbytes
    pastbytes.install(packages=["legacyext"], paths=["/srv/hg/legacy"])
    import legacyext            # its 'foo' literals are now b'foo'

    python -m pastbytes [-p PACKAGE] [-d DIR] script.py [ARGS]
    python -m pastbytes -p legacy -m legacy.tool [ARGS]

A layer of its own, beside ``zstdwire``: it imports nothing of ours and
nothing but the standard library (no Mercurial: ``hgext/pastbytes.py`` is
its Mercurial side).  The adapters, the benchmarks, the check and the
``vcsperf`` console script may import it; the core does not.

- ``rewrite``: the rewrite of the source text and its rules (:class:`Rules`,
  :func:`transform`), which ``contrib/pastbytes_rewrite.py`` writes to
  disk once.
- ``importer``: the finder and loader that apply it on import, and their
  own pyc cache.
- ``__main__``: ``python -m pastbytes``, a script or module run with it.
"""

from .importer import (
    PastBytesFinder,
    PastBytesLoader,
    compile_source,
    find_spec_elsewhere,
    install,
    load_path,
    uninstall,
)
from .rewrite import (
    DEFAULT_RENAMES,
    DEFAULT_RULES,
    FORMAT_VERSION,
    Rules,
    ScanError,
    decode,
    transform,
)

__all__ = [
    "DEFAULT_RENAMES", "DEFAULT_RULES", "FORMAT_VERSION", "PastBytesFinder",
    "PastBytesLoader", "Rules", "ScanError", "compile_source", "decode",
    "find_spec_elsewhere", "install", "load_path", "transform", "uninstall",
]
