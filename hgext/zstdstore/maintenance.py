# maintenance.py - hg zstd-train, zstd-recompress and zstd-stats
#
# This software may be used and distributed according to the terms of the
# GNU General Public License version 2 or any later version.
"""What zstdstore's maintenance commands do: train dictionaries, rewrite
the store with them, and report how it is stored."""

import contextlib
import heapq
import json
import os
import stat
import struct
import time

import zstandard
from mercurial import (
    error,
    pycompat,
    requirements as requirementsmod,
    scmutil,
)
from mercurial.i18n import _
from mercurial.revlogutils import constants as revlogconst
from mercurial.utils import stringutil

import zstdwire

from .engine import (
    ACTIVE_FILE,
    DICTS_DIR,
    ENGINE,
    HEADER,
    KINDS,
    MIN_CHUNK,
    REQUIREMENT,
    DamagedActive,
    configured_level,
    dicts_dir,
)

# Reading and writing revlogs -------------------------------------------


def require_engine(repo):
    if REQUIREMENT not in repo.requirements:
        raise error.Abort(
            _(b'this repository does not use the %s compression engine')
            % ENGINE,
            hint=_(b'convert it first: hg debugupgraderepo --run --config '
                   b'format.revlog-compression=%s') % ENGINE)


class _StoreRevlogs:
    """Every revlog of the store of one of ``kinds``, as ``(kind,
    revlog)``: filelogs first, then manifests, then the changelog.  Listed
    once, so that a run's progress knows the total; each revlog is opened
    when its turn comes."""

    def __init__(self, repo, kinds=KINDS):
        self._unfi = unfi = repo.unfiltered()
        self._filelogs = (_filelog_names(unfi) if b'filelog' in kinds
                          else [])
        self._trees = (list(_manifest_trees(unfi)) if b'manifest' in kinds
                       else [])
        self._changelog = b'changelog' in kinds

    def __len__(self):
        return len(self._filelogs) + len(self._trees) + self._changelog

    def __iter__(self):
        unfi = self._unfi
        for name in self._filelogs:
            yield b'filelog', unfi.file(_tracked_path(name))._revlog
        for tree in self._trees:
            yield b'manifest', unfi.manifestlog.getstorage(tree)._revlog
        if self._changelog:
            yield b'changelog', unfi.changelog


def _filelog_names(unfi):
    """The index file name of each filelog of the store, sorted.  Not
    core's walk of the store where its fncache lists them: that walk holds
    an entry object for every revlog to the end (at 463,000 revlogs, over
    100 MB for the whole run); the names listed here are the fncache's
    own, and each tracked path is made when its filelog is opened."""
    fncache = getattr(unfi.store, 'fncache', None)
    if fncache is None:
        return sorted(b'data/%s.i' % entry.target_id
                      for entry in unfi.store.walk()
                      if entry.is_revlog and entry.is_filelog)
    return sorted(name for name in fncache
                  if name.startswith(b'data/') and name.endswith(b'.i'))


def _tracked_path(name):
    return name[len(b'data/'):-len(b'.i')]


def _manifest_trees(unfi):
    """The directory of each manifest revlog: only the root's, b'', unless
    the repository stores tree manifests beside its filelogs."""
    if not scmutil.istreemanifest(unfi):
        yield b''
        return
    for entry in unfi.store.walk():
        if entry.is_revlog and entry.is_manifestlog:
            yield entry.target_id


def _chunk(rl, rev):
    return rl._inner._chunk(rev)


#: Newest revisions of each file considered for training.
_FILE_REVISIONS_SAMPLED = 8


def _newest_chunks(ui, repo, kind, budget):
    """Stored chunks of one revlog class, newest first, at least enough
    to fill ``budget`` bytes of samples.  One revlog is open at a time:
    each one read keeps caches of its own, and a store has tens of
    thousands of filelogs."""
    revlogs = (rl for _kind, rl in _StoreRevlogs(repo, (kind,)))
    if kind != b'filelog':
        for rl in revlogs:
            with rl.reading():
                for rev in range(len(rl) - 1, -1, -1):
                    yield _chunk(rl, rev)
        return
    progress = ui.makeprogress(_(b'indexing filelogs'), unit=_(b'files'))
    recent = _newest_file_revisions(revlogs, budget, progress.increment)
    progress.complete()
    unfi = repo.unfiltered()
    for rev, path in recent:
        yield _chunk(unfi.file(path)._revlog, rev)


def _newest_file_revisions(revlogs, budget, visited):
    """``(rev, path)`` of the newest revisions of every file, ordered by
    the changeset that introduced them (newest first; in walk order
    among one changeset's), read from indexes only.

    Only the newest that fill twice ``budget`` with their stored sizes
    are held: a sample is the chunk decompressed, rarely smaller than
    stored; a list of every file's revisions took hundreds of megabytes
    at Firefox's 463,000 filelogs."""
    # a heap whose smallest item is the last in the order: the one to
    # drop when the rest already hold enough
    held, held_bytes, walked = [], 0, 0
    for rl in revlogs:
        visited()
        path = rl.target[1]
        for rev in range(len(rl) - 1,
                         max(-1, len(rl) - 1 - _FILE_REVISIONS_SAMPLED), -1):
            size = min(rl.length(rev), zstdwire.MAX_SAMPLE_SIZE)
            heapq.heappush(held, (rl.linkrev(rev), -walked, rev, path,
                                  size))
            walked += 1
            held_bytes += size
            while held_bytes - held[0][4] >= 2 * budget:
                held_bytes -= heapq.heappop(held)[4]
    held.sort(reverse=True)
    return [(rev, path) for _linkrev, _walked, rev, path, _size in held]


def _remove_stale_temporaries(ui, repo):
    """Delete what killed writers left: atomictemp files (``.NAME-XXXX~``)
    and unfinished dictionary files.  Called under the store lock, so no
    live writer owns them."""
    for dirpath, _dirs, files in os.walk(repo.store.path):
        for name in files:
            if (name.startswith(b'.') and name.endswith(b'~')) or \
                    b'.tmp-' in name and dirpath.endswith(DICTS_DIR):
                path = os.path.join(dirpath, name)
                ui.debug(b'removing stale temporary file %s\n' % path)
                os.unlink(path)


def write_active(repo, active):
    payload = json.dumps({k.decode('ascii'): v
                          for k, v in sorted(active.items())}, indent=1)
    with repo.svfs(ACTIVE_FILE, b'wb', atomictemp=True) as fh:
        fh.write(payload.encode('ascii') + b'\n')


def train(ui, repo, dict_size, budget):
    """``hg zstd-train``: a new dictionary per revlog class, trained on
    its newest chunks, made the active one.  Any store can be trained,
    whatever its engine: a zlib or zstd store then converts in one rewrite,
    with the dictionaries, by ``hg debugupgraderepo``."""
    level = configured_level(ui)
    with repo.lock():
        _remove_stale_temporaries(ui, repo)
        dicts = dicts_dir(repo.svfs.join(DICTS_DIR))
        try:
            active = dict(dicts.active())
        except DamagedActive as err:
            # Training writes a new one: keep nothing from the old.
            ui.warn(_(b'warning: %s\n') % err.message)
            active = {}
        for kind in KINDS:
            start = time.monotonic()
            samples = zstdwire.select_recent(
                _newest_chunks(ui, repo, kind, budget), budget)
            # An ID of the store's choosing: zstd's own is a hash of the
            # dictionary's content, which a retrain at another level or
            # budget can repeat for a dictionary of other bytes.
            try:
                dictionary = zstdwire.train(samples, dict_size, level,
                                            dict_id=dicts.store.unused_id())
            except zstdwire.TrainingError as err:
                ui.warn(_(b'%s: no new dictionary: %s\n')
                        % (kind, stringutil.forcebytestr(err)))
                continue
            dict_id = dicts.store.add(dictionary, kind.decode('ascii'))
            active[kind] = dict_id
            ui.status(_(b'%s: dictionary %d, %d bytes, from %d samples '
                        b'(%d bytes) in %.1fs\n')
                      % (kind, dict_id, len(dictionary.as_bytes()),
                         len(samples), sum(map(len, samples)),
                         time.monotonic() - start))
        # The dictionaries are on disk before anything names them.
        write_active(repo, active)


_INDEX_ENTRY = struct.Struct(revlogconst.INDEX_ENTRY_V1.format)
_INDEX_HEADER = struct.Struct(revlogconst.INDEX_HEADER.format)


def _rewrite_revlog(repo, rl):
    """Recompress every chunk of ``rl`` with the repository's engine.

    Returns False when no chunk changes.  The revlog stays valid at every
    instant: an inline revlog is replaced by one rename; a split one first
    becomes inline (its data file is then unused), then gets its new data
    file, then its new split index.  A run killed in between leaves it
    inline beside its data file: the next run splits it again, even with
    no chunk to change.
    """
    if rl._format_version != revlogconst.REVLOGV1:
        raise error.Abort(_(b'%s: only revlog version 1 can be recompressed')
                          % rl._indexfile)
    inner = rl._inner
    svfs = repo.svfs
    split = svfs.exists(rl._datafile)
    header = rl._format_version | rl._format_flags
    entries = []
    changed = False
    inline_fh = svfs(rl._indexfile, b'wb', atomictemp=True, checkambig=True)
    data_fh = svfs(rl._datafile, b'wb', atomictemp=True) if split else None
    try:
        offset = 0
        with rl.reading():
            for rev in range(len(rl)):
                old = bytes(inner.get_segment_for_revs(rev, rev)[1])
                prefix, payload = inner.compress(inner.decompress(old))
                chunk = prefix + payload
                changed = changed or chunk != old
                entry = rl.index[rev]
                packed = _INDEX_ENTRY.pack(
                    (offset << 16) | (entry[0] & 0xFFFF), len(chunk),
                    *entry[2:8])
                if rev == 0:
                    packed = _INDEX_HEADER.pack(
                        header | revlogconst.FLAG_INLINE_DATA) + packed[4:]
                inline_fh.write(packed)
                inline_fh.write(chunk)
                if split:
                    data_fh.write(chunk)
                    entries.append(packed)
                offset += len(chunk)
        if not changed and not (split and rl._inline):
            return False
        inline_fh.close()
        if split:
            data_fh.close()
            if entries:
                entries[0] = _INDEX_HEADER.pack(
                    header & ~revlogconst.FLAG_INLINE_DATA) + entries[0][4:]
            with svfs(rl._indexfile, b'wb', atomictemp=True,
                      checkambig=True) as fh:
                fh.write(b''.join(entries))
        return True
    finally:
        inline_fh.discard()
        if data_fh is not None:
            data_fh.discard()


STATE_FILE = b'zstd-recompress.state'


def recompress(ui, repo, convert=False):
    """``hg zstd-recompress``: every revlog rewritten with the active
    dictionaries, resumable after a kill.  With ``convert``, a store of
    another engine first names this one (``_name_engine``)."""
    with contextlib.ExitStack() as held:
        if convert:
            held.enter_context(repo.wlock())
        held.enter_context(repo.lock())
        if convert and REQUIREMENT not in repo.requirements:
            _name_engine(ui, repo)
        require_engine(repo)
        _remove_stale_temporaries(ui, repo)
        active = dicts_dir(repo.svfs.join(DICTS_DIR)).active()
        done = held.enter_context(_RewrittenLog(
            repo, {k.decode('ascii'): v for k, v in active.items()}))
        # One revlog open at a time: each holds its index and caches.
        revlogs = _StoreRevlogs(repo)
        total = len(revlogs)
        progress = ui.makeprogress(_(b'recompressing'), unit=_(b'revlogs'),
                                   total=total)
        rewritten = 0
        for _kind, rl in revlogs:
            progress.increment(item=rl._indexfile)
            if rl._indexfile in done:
                continue
            if _rewrite_revlog(repo, rl):
                rewritten += 1
            done.add(rl._indexfile)
        progress.complete()
        done.finish()
        repo.invalidate(clearfilecache=True)
        ui.status(_(b'recompressed %d of %d revlogs\n')
                  % (rewritten, total))


def _name_engine(ui, repo):
    """Make ``repo``'s requirements name this engine instead of the one
    it has, and the revlogs it opens from now on use it.  Nothing is
    rewritten yet: each chunk says how it is compressed, so the store
    reads as before, and new chunks use the dictionaries.  Core's upgrade
    instead writes a second store beside the first and holds an entry for
    each of its revlogs (at 463,000 revlogs, 750 MiB of memory)."""
    if not dicts_dir(repo.svfs.join(DICTS_DIR)).active():
        raise error.Abort(_(b'no dictionaries to convert with'),
                          hint=_(b'train them first: hg zstd-train'))
    shared = repo.requirements & {requirementsmod.SHARED_REQUIREMENT,
                                  requirementsmod.RELATIVE_SHARED_REQUIREMENT}
    if shared and requirementsmod.SHARESAFE_REQUIREMENT \
            not in repo.requirements:
        raise error.Abort(
            _(b'this share keeps its own list of requirements: the source '
              b'repository would not name the engine of its converted store'),
            hint=_(b'run the command in the source repository, %s')
            % os.path.dirname(repo.sharedpath))
    newer = repo.requirements & {requirementsmod.REVLOGV2_REQUIREMENT,
                                 requirementsmod.CHANGELOGV2_REQUIREMENT}
    if newer:
        raise error.Abort(
            _(b'only revlog version 1 can be converted in place (this '
              b'repository has %s)') % b', '.join(sorted(newer)),
            hint=_(b'convert it with hg debugupgraderepo --run --config '
                   b'format.revlog-compression=%s') % ENGINE)
    requirements = {name for name in repo.requirements
                    if name != requirementsmod.REVLOG_COMPRESSION_ZSTD
                    and not name.startswith(b'exp-compression-')}
    scmutil.writereporequirements(repo, requirements | {REQUIREMENT})
    # as a repository opened now would have it (a second repository
    # object could not write under this one's locks)
    repo.svfs.options[b'feature-config'].compression_engine = ENGINE
    repo.invalidate(clearfilecache=True)
    ui.status(_(b'the repository now uses the %s engine\n') % ENGINE)


class _RewrittenLog:
    """The revlogs a run has rewritten with the ``active`` dictionaries,
    for a killed run's successor to skip: a line of JSON naming them,
    then a line per revlog, appended as each is done (a Firefox store has
    463,000, too many to rewrite as one list every second): its index
    file's name, a NUL, and that file's size and modification time once
    rewritten.  A revlog whose index file has changed since (a commit, an
    upgrade) is rewritten again, and a line a kill cut short is not
    taken."""

    def __init__(self, repo, active):
        self._svfs = repo.svfs
        self._stamps = {}
        header = json.dumps({'active': active}).encode('ascii') + b'\n'
        try:
            kind = stat.S_IFMT(self._svfs.lstat(STATE_FILE).st_mode)
        except FileNotFoundError:
            kind = None
        if kind == stat.S_IFREG:
            lines = self._svfs.read(STATE_FILE).split(b'\n')
            if lines[0] + b'\n' == header:
                # the last item is what follows the last newline
                for line in lines[1:-1]:
                    name, _nul, stamp = line.partition(b'\0')
                    self._stamps[name] = stamp
        elif kind is not None:
            # no run of ours made it: a link or a FIFO is not followed
            try:
                self._svfs.unlink(STATE_FILE)
            except OSError as err:
                raise error.Abort(
                    _(b'%s is not a file: %s')
                    % (self._svfs.join(STATE_FILE),
                       stringutil.forcebytestr(err.strerror)),
                    hint=_(b'remove it and run the command again'))
        self._file = self._svfs(STATE_FILE, b'ab' if self._stamps else b'wb')
        if not self._stamps:
            self._file.write(header)
        self._flushed = time.monotonic()

    def _stamp(self, name):
        try:
            st = self._svfs.stat(name)
        except FileNotFoundError:
            return b'missing'
        return b'%d:%d' % (st.st_size, st.st_mtime_ns)

    def __contains__(self, name):
        stamp = self._stamps.get(name)
        return bool(stamp) and stamp == self._stamp(name)

    def add(self, name):
        self._file.write(name + b'\0' + self._stamp(name) + b'\n')
        if time.monotonic() - self._flushed > 1:
            self._file.flush()
            self._flushed = time.monotonic()

    def finish(self):
        """Every revlog is done: the log goes."""
        self._file.close()
        self._svfs.tryunlink(STATE_FILE)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._file.close()


class _ClassTotals:
    """What ``hg zstd-stats`` counts for one revlog class."""

    __slots__ = ('revisions', 'chunkbytes', 'storedbytes', 'corezstdbytes',
                 'encodings')

    def __init__(self):
        self.revisions = 0
        #: Bytes of the chunks once decompressed.
        self.chunkbytes = 0
        self.storedbytes = 0
        #: Bytes core's zstd would store for the same chunks.
        self.corezstdbytes = 0
        #: ``{encoding name: chunks}``, see ``_encoding``.
        self.encodings = {}


def stats(ui, repo, opts):
    """``hg zstd-stats``: per revlog class, how its chunks are stored
    beside what core's zstd would store."""
    plain = zstandard.ZstdCompressor(level=configured_level(ui))
    totals = {kind: _ClassTotals() for kind in KINDS}
    # one revlog open at a time, as in recompress
    revlogs = _StoreRevlogs(repo)
    progress = ui.makeprogress(_(b'reading'), unit=_(b'revlogs'),
                               total=len(revlogs))
    for kind, rl in revlogs:
        progress.increment()
        counts = totals[kind]
        inner = rl._inner
        with rl.reading():
            for rev in range(len(rl)):
                stored = inner.get_segment_for_revs(rev, rev)[1]
                chunk = inner.decompress(stored)
                counts.revisions += 1
                counts.chunkbytes += len(chunk)
                counts.storedbytes += len(stored)
                counts.corezstdbytes += _core_zstd_size(plain, chunk)
                encoding = _encoding(bytes(stored[:32]))
                counts.encodings[encoding] = \
                    counts.encodings.get(encoding, 0) + 1
    progress.complete()
    active = dicts_dir(repo.svfs.join(DICTS_DIR)).active()
    fm = ui.formatter(b'zstd-stats', pycompat.byteskwargs(opts))
    for kind in KINDS:
        counts = totals[kind]
        fm.startitem()
        fm.write(b'kind revisions chunkbytes storedbytes corezstdbytes',
                 b'%-9s %8d revisions  %12d chunk bytes  %11d stored  '
                 b'%11d as core zstd', kind, counts.revisions,
                 counts.chunkbytes, counts.storedbytes, counts.corezstdbytes)
        fm.write(b'ratio', b'  (%.3f)\n',
                 counts.storedbytes / counts.corezstdbytes
                 if counts.corezstdbytes else 1.0)
        fm.data(active=active.get(kind))
        for name, n in sorted(counts.encodings.items()):
            fm.plain(b'    %-22s %6.1f%% of chunks%s\n'
                     % (name, 100.0 * n / counts.revisions,
                        b' (active)' if name == b'dictionary %d'
                        % active.get(kind, -1) else b''))
        fm.data(encodings=fm.formatdict(counts.encodings))
    fm.end()


def _core_zstd_size(plain, chunk):
    """What a core zstd revlog stores for ``chunk``."""
    if len(chunk) >= MIN_CHUNK:
        compressed = len(plain.compress(chunk))
        if compressed < len(chunk):
            return compressed
    return len(chunk) + (0 if chunk[:1] in (b'', b'\0') else 1)


def _encoding(head):
    marker = head[:1]
    if marker == HEADER:
        try:
            return b'dictionary %d' % zstdwire.frame_parameters(
                head[1:]).dict_id
        except zstdwire.FrameError:
            return b'dictionary ?'
    return {b'(': b'zstd', b'x': b'zlib', b'u': b'raw', b'\0': b'raw',
            b'': b'empty'}.get(marker, b'other')
