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
import time

from mercurial import node as nodemod

from vcsperf.core import commitids, commitindex, commitkeys

NAME = "commitindex"
# The docket's covers: the tip revision indexed and its node, as
# Mercurial's own caches record theirs.
_COVERS = struct.Struct(">i")


def rules(ui):
    return commitkeys.KeyRules(
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


def keys_of(description, key_rules):
    return commitids.message_keys(
        description.decode("utf-8", "surrogateescape"), key_rules)


def _description(changelog, rev):
    return changelog.changelogrevision(rev).description


#: Descriptions read at a time by an update, which times reading them
#: apart from the rest (the rest is what the index costs).
_BATCH = 4096


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
        began = time.process_time()
        reading, triples = 0.0, []
        for first in range(start, len(changelog), _BATCH):
            read = time.process_time()
            descriptions = [_description(changelog, rev) for rev in
                            range(first, min(first + _BATCH, len(changelog)))]
            reading += time.process_time() - read
            triples.extend((kind, key, rev) for rev, description
                           in enumerate(descriptions, first)
                           for kind, key in keys_of(description, key_rules))
        commitindex.write(directory, NAME, triples, _covers(changelog),
                          key_rules.fingerprint, base=base)
        ui.debug(b'commitid: indexed %d changesets (%d keys) in %.1f ms '
                 b'of CPU, %.1f of them reading descriptions\n' % (
                     len(changelog) - start, len(triples),
                     (time.process_time() - began) * 1000, reading * 1000))
    except commitindex.CorruptIndex as err:
        # Found by ``check``: start again from nothing.
        ui.debug(b'commitid: rebuilding the index: %s\n' % str(err).encode())
        commitindex.remove(directory, NAME)
        return update(repo)
    finally:
        if base is not None:
            base.close()


class Finder:
    """Lookups in ``repo`` (filtered as it is): ``finder(kind, key)`` is
    the ascending revisions whose description carries ``(kind, key)``,
    from the index for the changesets it covers, and for the others (all
    of them when the index cannot be used) from their descriptions, read
    once for every key asked.

    The index's entries are 64-bit hashes of the keys: a false match needs
    two keys of one repository to collide, which at a million keys has a
    chance of one in 10**13 per lookup; damage to the entries is what
    ``hg debugupdatecaches`` checks for.  A ``Finder`` holds the index
    open: close it (``with``)."""

    def __init__(self, repo):
        self.repo = repo
        self.index = None
        self.changelog = repo.unfiltered().changelog
        self.filtered = repo.changelog.filteredrevs
        self.rules = rules(repo.ui)
        self.start = 0
        self._scanned = None
        debug = repo.ui.debug
        try:
            self.index = commitindex.Index(_directory(repo), NAME)
        except FileNotFoundError:
            debug(b'commitid: no index (hg debugupdatecaches builds it)\n')
        except commitindex.CorruptIndex as err:
            debug(b'commitid: not using the index: %s\n' % str(err).encode())
        if self.index is not None:
            covered = _covered(self.index, self.changelog,
                               self.rules.fingerprint)
            if isinstance(covered, str):
                debug(b'commitid: not using the index: %s\n'
                      % covered.encode())
                self.close()
            else:
                self.start = covered

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self.index is not None:
            self.index.close()
            self.index = None

    def _scan(self):
        """{(kind, key): [rev, ...]} of the changesets the index does not
        cover."""
        if self._scanned is None:
            count = len(self.changelog) - self.start
            if count:
                self.repo.ui.debug(b'commitid: scanning %d changesets\n'
                                   % count)
            self._scanned = {}
            for rev in range(self.start, len(self.changelog)):
                for found in keys_of(_description(self.changelog, rev),
                                     self.rules):
                    self._scanned.setdefault(found, []).append(rev)
        return self._scanned

    def __call__(self, kind, key):
        # (A damaged entry could name a revision past those covered.)
        revs = [rev for rev in self.index.lookup(kind, key)
                if rev < self.start] if self.index else []
        revs += self._scan().get((kind, key), [])
        return [rev for rev in revs if rev not in self.filtered]
