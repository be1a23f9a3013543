# commitindex.py - the commitid extension's index of lookup keys
#
# This software may be used and distributed according to the terms of the
# GNU General Public License version 2 or any later version.
"""The Mercurial side of ``vcsperf.core.commitindex``: the index of commit
IDs, reviews and bugs in ``.hg/cache/commitindex*``, brought up to date
after each transaction (and after strip and rollback), and the lookups
that use it, falling back to reading descriptions where it cannot.

The index proves what it covers to each reader (``_covered``): a
Mercurial without the extension may have changed the history under it."""

import os
import struct
import time

from mercurial import node as nodemod

from vcsperf.core import commitid, commitindex, commitkeys

NAME = "commitindex"
# The docket's covers: a version mark, how many changesets (revisions 0
# to COUNT - 1) are indexed, then the revision of each of their heads.
# The index also keeps the node of every revision it indexed.
_COVERS = struct.Struct(">8sI")
_COVERS_MARK = b"hgheads1"
_HEAD = struct.Struct(">I")
_GONE = "it covers changesets that are gone (strip or rollback)"


def rules(ui):
    return commitkeys.KeyRules(
        [name.decode("utf-8") for name in
         ui.configlist(b'commitid', b'index-trailers')])


def _directory(repo):
    return os.fsdecode(repo.cachevfs.base)


def _covers(changelog):
    heads = sorted(rev for rev in changelog.headrevs() if rev >= 0)
    return _COVERS.pack(_COVERS_MARK, len(changelog)) + b"".join(
        _HEAD.pack(rev) for rev in heads)


def _covered(index, changelog, fingerprint):
    """The first revision the index does not cover, or the reason it
    cannot be used.

    Why the index can trust itself (a Mercurial without this extension
    may have stripped changesets and added others, in another order,
    keeping the tip): a node names its changeset and, through its
    parents, every ancestor.  So when each head the index recorded for
    revisions 0 to COUNT - 1 still has its node at its revision, those
    heads' ancestors, COUNT changesets all numbered below COUNT, are
    exactly revisions 0 to COUNT - 1: the changesets indexed, though
    perhaps numbered otherwise.  That costs a node per head, not per
    changeset.  ``Finder`` then checks the node of each revision it
    answers with."""
    docket = index.docket
    if docket.rules != fingerprint:
        return "it was built with other key rules"
    covers = docket.covers
    heads_size = len(covers) - _COVERS.size
    if heads_size < 0 or heads_size % _HEAD.size or \
            covers[:len(_COVERS_MARK)] != _COVERS_MARK or \
            docket.node_width != len(changelog.node(nodemod.nullrev)):
        return "its docket is not this version's"
    count = _COVERS.unpack_from(covers)[1]
    heads = [_HEAD.unpack_from(covers, offset)[0] for offset
             in range(_COVERS.size, len(covers), _HEAD.size)]
    if index.node_count() != count or \
            (count and (not heads or max(heads) != count - 1)):
        return "its docket is not this version's"
    if count > len(changelog):
        return _GONE
    for rev in heads:
        if changelog.node(rev) != index.node(rev):
            return _GONE
    return count


def keys_of(description, key_rules):
    return commitid.message_keys(
        description.decode("utf-8", "surrogateescape"), key_rules)


def _description(changelog, rev):
    return changelog.changelogrevision(rev).description


def _check_numbers(index, changelog, count):
    """Raise ``CorruptIndex`` when a revision below ``count`` has another
    node than the one indexed (the changesets the index covers, numbered
    otherwise since, see ``_covered``): ``hg debugupdatecaches`` then
    builds it again.  One pass over the nodes, no description read."""
    if b"".join(map(changelog.node, range(count))) != \
            index.nodes.data()[:count * index.docket.node_width]:
        raise commitindex.CorruptIndex("its revision numbers are stale "
                                       "(changesets added in another order)")


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
                if check:
                    _check_numbers(base, changelog, start)
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
                          key_rules.fingerprint, base=base,
                          nodes=map(changelog.node,
                                    range(start, len(changelog))),
                          node_width=len(changelog.node(nodemod.nullrev)))
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
        self._renumbered = False
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

    def _current(self, rev):
        """The revision that the changeset indexed as ``rev`` has now
        (another after a strip and a pull in another order: ``_covered``
        proved the changeset is here)."""
        node = self.index.node(rev)
        if self.changelog.node(rev) == node:
            return rev
        if not self._renumbered:
            self._renumbered = True
            self.repo.ui.debug(b'commitid: the index numbers changesets '
                               b'otherwise (hg debugupdatecaches renumbers '
                               b'it)\n')
        current = self.changelog.index.get_rev(node)
        if current is None or current >= self.start:
            raise commitindex.CorruptIndex("an indexed node is gone")
        return current

    def __call__(self, kind, key):
        revs = []
        if self.index is not None:
            try:
                # (A damaged entry could name a revision past those
                # covered.)
                revs = [self._current(rev) for rev in
                        self.index.lookup(kind, key) if rev < self.start]
            except commitindex.CorruptIndex as err:
                self.repo.ui.debug(b'commitid: not using the index: %s\n'
                                   % str(err).encode())
                self.close()
                self.start, self._scanned = 0, None
                revs = []
        revs += self._scan().get((kind, key), [])
        return sorted(rev for rev in revs if rev not in self.filtered)
