"""Read the stored chunks of a Mercurial repository's revlogs.

A revlog stores each revision as a compressed chunk: a full text or a delta
against an earlier revision.  These decompressed chunks are exactly what a
revlog compression engine sees, so they are what codecs are compared on.
"""

import contextlib
import os

from mercurial import error, hg, ui as uimod
from mercurial.utils import stringutil

from vcsperf.core.errors import Abort
from vcsperf.harness.measure import CLASSES


def open_repo(path):
    """The unfiltered repository at ``path``; ``Abort`` (one line) when
    Mercurial cannot open it."""
    ui = uimod.ui.load()
    ui.setconfig(b"ui", b"quiet", True)
    try:
        return hg.repository(ui, os.fsencode(path)).unfiltered()
    except (error.RepoError, error.Abort) as err:
        raise Abort("hg cannot read %s: %s" % (path, _text(err)),
                    hint=err.hint and _text(err.hint))


def _text(value):
    """Mercurial's bytes message ``value`` as text."""
    return stringutil.forcebytestr(value).decode("utf-8", "replace")


def revlogs(repo):
    """``(class, revlog)`` for every revlog of the store."""
    yield "changelog", repo.changelog
    yield "manifest", repo.manifestlog.getstorage(b"")._revlog
    for entry in repo.store.data_entries():
        if entry.is_filelog:
            yield "filelog", repo.file(entry.target_id)._revlog


def _chunks_of(rl):
    """``(linkrev, chunk)`` for every revision of one revlog."""
    inner = getattr(rl, "_inner", rl)
    reading = getattr(rl, "reading", contextlib.nullcontext)
    with reading():
        for rev in rl:
            yield rl.linkrev(rev), bytes(inner._chunk(rev))


def filelog_chunks(repo):
    """``(file path, linkrev, chunk)`` for every filelog revision of
    ``repo``, file by file."""
    for entry in repo.store.data_entries():
        if entry.is_filelog:
            path = entry.target_id.decode("utf-8", "surrogateescape")
            for linkrev, chunk in _chunks_of(repo.file(entry.target_id)
                                             ._revlog):
                yield path, linkrev, chunk


def chunks_by_class(path):
    """``{class: [chunk, ...]}`` with each class ordered oldest first, by
    the changeset that introduced the chunk."""
    repo = open_repo(path)
    collected = {name: [] for name in CLASSES}
    for name, rl in revlogs(repo):
        collected[name].extend(_chunks_of(rl))
    return {name: [chunk for _, chunk in sorted(pairs, key=lambda p: p[0])]
            for name, pairs in collected.items()}
