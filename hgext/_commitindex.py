# _commitindex.py - the commitid extension's index of lookup keys
#
# This software may be used and distributed according to the terms of the
# GNU General Public License version 2 or any later version.
"""The Mercurial side of ``vcsperf.core.commitindex``: the index of commit
IDs, reviews and bugs in ``.hg/cache/commitindex*``, brought up to date
after each transaction (and after strip and rollback), and the lookups
that use it, falling back to reading descriptions where it cannot."""

import os
import struct

from mercurial import node as nodemod

from vcsperf.core import commitids, commitindex

NAME = "commitindex"
# The docket's covers: the tip revision indexed and its node, as
# Mercurial's own caches record theirs.
_COVERS = struct.Struct(">i")


def rules(ui):
    return commitids.KeyRules(
        [name.decode("utf-8") for name in
         ui.configlist(b'commitid', b'index-trailers')])


def _directory(repo):
    return os.fsdecode(repo.cachevfs.base)


def _covers(changelog):
    tip = len(changelog) - 1
    node = changelog.node(tip) if tip >= 0 else nodemod.nullid
    return _COVERS.pack(tip) + node


def _covered(index, changelog, fingerprint):
    """The first revision the index does not cover, or the reason it
    cannot be used."""
    covers = index.covers
    if index.docket.rules != fingerprint:
        return "it was built with other key rules"
    if len(covers) < _COVERS.size:
        return "its docket is not Mercurial's"
    tip = _COVERS.unpack_from(covers)[0]
    node = covers[_COVERS.size:]
    if tip >= len(changelog) or (
            tip >= 0 and changelog.node(tip) != node) or (
            tip < 0 and node != nodemod.nullid):
        return "it covers changesets that are gone (strip or rollback)"
    return tip + 1


def keys_of(changelog, rev, key_rules):
    description = changelog.changelogrevision(rev).description
    return commitids.message_keys(
        description.decode("utf-8", "surrogateescape"), key_rules)


def update(repo, check=False):
    """Bring the index up to date with the unfiltered changelog (the
    caller holds the store lock).  A stale, foreign or damaged index, or
    one built with other rules, is rebuilt; ``check`` reads the whole
    index first (``hg debugupdatecaches``)."""
    ui = repo.ui
    changelog = repo.unfiltered().changelog
    key_rules = rules(ui)
    directory = _directory(repo)
    try:
        base = commitindex.Index(directory, NAME)
    except FileNotFoundError:
        base = None
    except commitindex.CorruptIndex as err:
        ui.debug(b'commitid: rebuilding the index: %s\n' % str(err).encode())
        base = None
    start = 0
    try:
        if base is not None:
            if check:
                base.verify()
            covered = _covered(base, changelog, key_rules.fingerprint)
            if isinstance(covered, str):
                ui.debug(b'commitid: rebuilding the index: %s\n'
                         % covered.encode())
                base.close()
                base = None
            else:
                start = covered
        if base is not None and start == len(changelog):
            return
        triples = [(kind, key, rev) for rev in range(start, len(changelog))
                   for kind, key in keys_of(changelog, rev, key_rules)]
        commitindex.write(directory, NAME, triples, _covers(changelog),
                          key_rules.fingerprint, base=base)
    except commitindex.CorruptIndex as err:
        # Found by ``check``: start again from nothing.
        ui.debug(b'commitid: rebuilding the index: %s\n' % str(err).encode())
        commitindex.remove(directory, NAME)
        return update(repo)
    finally:
        if base is not None:
            base.close()


def find(repo, kind, key):
    """The revisions of ``repo`` (filtered as it is) whose description
    carries ``(kind, key)``, ascending: from the index for the changesets
    it covers, by reading the descriptions of the others."""
    ui = repo.ui
    changelog = repo.unfiltered().changelog
    key_rules = rules(ui)
    candidates, start = [], 0
    try:
        with commitindex.Index(_directory(repo), NAME) as index:
            covered = _covered(index, changelog, key_rules.fingerprint)
            if isinstance(covered, str):
                ui.debug(b'commitid: not using the index: %s\n'
                         % covered.encode())
            else:
                candidates, start = index.lookup(kind, key), covered
    except FileNotFoundError:
        ui.debug(b'commitid: no index (hg debugupdatecaches builds it)\n')
    except commitindex.CorruptIndex as err:
        ui.debug(b'commitid: not using the index: %s\n' % str(err).encode())
    if start < len(changelog):
        ui.debug(b'commitid: scanning %d changesets\n'
                 % (len(changelog) - start))
    filtered = repo.changelog.filteredrevs
    wanted = (kind, key)
    return [rev for rev in candidates + list(range(start, len(changelog)))
            if rev not in filtered and rev < len(changelog)
            and wanted in keys_of(changelog, rev, key_rules)]
