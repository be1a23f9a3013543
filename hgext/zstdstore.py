# zstdstore.py - revlog compression with trained zstd dictionaries
#
# This software may be used and distributed according to the terms of the
# GNU General Public License version 2 or any later version.
"""store revlogs with zstd dictionaries trained on the repository's history

Small revlog chunks (changelog entries, manifest deltas, small files)
compress badly when each starts from nothing.  This extension adds the
revlog compression engine ``zstd-dict``: each chunk is a zstd frame
compressed with a dictionary trained on the repository's own recent
history, one dictionary per revlog class (changelog, manifest, filelogs).
On real repositories the changelog shrinks by about 30% against core's
zstd and zlib, and reads faster.

New chunks are compressed at ``zstdstore.level`` (default 6: the same
read speed as level 3, and measured 8% smaller filelogs, for about 3 times
the compression time).  Create a repository that uses it, or convert one::

  [extensions]
  zstdstore =

  $ hg init --config format.revlog-compression=zstd-dict repo
  $ hg debugupgraderepo --run --config format.revlog-compression=zstd-dict

Then train dictionaries and rewrite the stored chunks with them::

  $ hg zstd-train
  $ hg zstd-recompress
  $ hg zstd-stats

Such a repository carries the requirement ``exp-compression-zstd-dict``:
a Mercurial without this extension refuses it with "repository requires
features unknown to this Mercurial" instead of misreading it.  The Rust
core (``rhg`` and the Rust module policy) cannot read these chunks either.

Chunks for which a dictionary does not pay (chunks too large for a
dictionary to matter, or before any dictionary exists) are stored as core
Mercurial's own zstd chunks, which every Mercurial with zstd reads.

Dictionaries live in ``.hg/store/zstd-dicts/``, one immutable file per
dictionary, named by its dict ID; ``active`` names the dictionary new
chunks use for each class.  They travel with local clones, ``hg clone
--stream``, stream clone bundles and shares.  Pulls and pushes carry
uncompressed deltas, so any peer, with or without this extension,
exchanges changesets with such a repository; the receiver compresses
with its own engine.

Retraining happens on command only: run ``hg zstd-train`` when history has
drifted (``hg zstd-stats`` shows the share of chunks each dictionary
covers; for a busy repository, weekly from cron).  A retrained dictionary
gets a new ID and is used for new chunks; old chunks keep decoding with
their own, until ``hg zstd-recompress`` rewrites them.  Old dictionary
files are never deleted.

``hg zstd-recompress`` holds the store lock and replaces each revlog by
renames that leave a valid revlog at every instant, so it can be killed at
any point; running it again finishes the job.  Readers keep working
meanwhile (``hg log``, ``hg serve``): a reader that finds the revlog it
loaded replaced loads it again and reads on.

A missing or corrupt dictionary file stops any command that needs it with
an error that names the file: copy it back from another clone of the
repository (``.hg/store/zstd-dicts/ID``), or from a backup, or clone the
repository again.  A damaged ``active`` file stops commands that write
revisions, naming it; ``hg zstd-train`` writes a new one.  A stream clone
checks the dictionaries and the ``active`` file it receives, and refuses
damaged ones before the clone is used.
"""

import array
import contextlib
import inspect
import json
import os
import struct
import threading
import time
import weakref

from mercurial.i18n import _
from mercurial import (
    cmdutil,
    error,
    extensions,
    pycompat,
    registrar,
    revlog,
    store,
    streamclone,
    util,
)
from mercurial.revlogutils import constants as revlogconst
from mercurial.revlogutils import deltas as deltautil
from mercurial.revlogutils import flagutil, randomaccessfile
from mercurial.upgrade_utils import engine as upgrade_engine
from mercurial.utils import compression, stringutil

import zstandard
import zstdwire

testedwith = b'6.9 7.0 7.2'
minimumhgversion = b'6.9'

cmdtable = {}
command = registrar.command(cmdtable)
configtable = {}
configitem = registrar.configitem(configtable)

#: Measured on ipython's history: level 6 stores filelogs in 0.85 of core
#: zstd's bytes against 0.92 at level 3, reads as fast, and compresses
#: about 3 times slower (still over 50 MB/s).
DEFAULT_LEVEL = 6
configitem(b'zstdstore', b'level', default=DEFAULT_LEVEL)
configitem(b'zstdstore', b'dict-size', default=112 * 1024)
configitem(b'zstdstore', b'sample-budget', default=16 * 1024 * 1024)

ENGINE = b'zstd-dict'
REQUIREMENT = b'exp-compression-' + ENGINE
#: The chunk header byte of dictionary chunks.  Not b'(': a frame that
#: needs a dictionary must never reach core's plain zstd decompressor.
HEADER = b'D'
DICTS_DIR = b'zstd-dicts'
ACTIVE_FILE = DICTS_DIR + b'/active'
KINDS = (b'changelog', b'manifest', b'filelog')
_KIND_NAMES = {kind.decode('ascii'): kind for kind in KINDS}

#: Chunks shorter than this are stored raw, as core does.
MIN_CHUNK = 50
#: Above this size a chunk is also compressed without the dictionary and
#: the smaller result is kept: a dictionary matters for the start of a
#: frame, and large chunks pay little for it.
PLAIN_CHECK_SIZE = 16 * 1024

_OPT_DICTS = b'zstdstore.dicts'
_OPT_KIND = b'zstdstore.kind'
_OPT_LEVEL = b'zstdstore.level'
_KIND_OF_TARGET = {
    revlogconst.KIND_CHANGELOG: b'changelog',
    revlogconst.KIND_MANIFESTLOG: b'manifest',
}


class _DictsDir:
    """A repository's dictionaries, shared by all its revlogs in a process.

    The ``active`` file is re-read when it changes, so a long-running
    server starts using a retrained dictionary for new chunks.
    """

    def __init__(self, path):
        self.path = path
        self.store = zstdwire.DictionaryStore(os.fsdecode(path))
        self._active = {}
        self._active_stat = None
        self._compressors = {}
        self._local = threading.local()

    def active(self):
        """``{kind: dict_id}`` of the dictionaries new chunks use; aborts
        naming the ``active`` file if it is damaged."""
        path = os.path.join(self.path, b'active')
        try:
            st = os.stat(path)
            stat = (st.st_ino, st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            stat = None
        if stat != self._active_stat:
            self._active = read_active(path) if stat else {}
            self._active_stat = stat
        return self._active

    def decompressor(self):
        """This thread's decompressor: its contexts (one per dictionary) are
        shared by all revlogs, and a context serves one thread at a time."""
        decompressor = getattr(self._local, 'decompressor', None)
        if decompressor is None:
            decompressor = self._local.decompressor = \
                zstdwire.ChunkDecompressor(self)
        return decompressor

    def get(self, dict_id):
        """A dictionary by ID, for decompressors; aborts naming its file
        and how to recover."""
        try:
            return self.store.get(dict_id)
        except zstdwire.DictionaryError as err:
            raise _unusable_dictionary(dict_id, err)

    def compressor(self, kind, level):
        dict_id = self.active().get(kind)
        if dict_id is None:
            return None
        key = (dict_id, level)
        if key not in self._compressors:
            try:
                stored = self.store.load(dict_id)
                # A revlog verifies every revision's hash on read, so frames
                # need no checksum of their own (core's zstd chunks have
                # none).
                compressor = zstdwire.ChunkCompressor(
                    stored.dictionary, level, checksum=False)
            except zstandard.ZstdError as err:
                raise _unusable_dictionary(dict_id, zstdwire.DictionaryCorrupt(
                    'not a zstd dictionary (%s)' % err,
                    self.store.path(dict_id)))
            except zstdwire.DictionaryError as err:
                raise _unusable_dictionary(dict_id, err)
            if stored.kind != kind.decode('ascii'):
                raise _DamagedActive(
                    os.path.join(self.path, b'active'),
                    b'it names %s dictionary %d for %s'
                    % (stored.kind.encode('ascii'), dict_id, kind))
            self._compressors[key] = compressor
        return self._compressors[key]


_dicts_dirs = {}


def _dicts_dir(path):
    if path not in _dicts_dirs:
        _dicts_dirs[path] = _DictsDir(path)
    return _dicts_dirs[path]


#: Far more than ``active`` ever holds; a bigger file is not one.
ACTIVE_MAX_SIZE = 4096


def read_active(path):
    """The ``active`` file at ``path``, checked (see ``parse_active``)."""
    with open(path, 'rb') as fh:
        data = fh.read(ACTIVE_MAX_SIZE + 1)
    try:
        return parse_active(data)
    except ValueError as err:
        raise _DamagedActive(path, stringutil.forcebytestr(err))


def parse_active(data):
    """``{kind: dict_id}`` from the contents of an ``active`` file: a JSON
    object mapping some of ``KINDS`` to dictionary IDs.  Anything else
    raises ``ValueError`` saying what is wrong."""
    if len(data) > ACTIVE_MAX_SIZE:
        raise ValueError('more than %d bytes' % ACTIVE_MAX_SIZE)
    try:
        parsed = json.loads(data.decode('ascii'))
    except (ValueError, RecursionError):
        # UnicodeDecodeError and JSONDecodeError are ValueErrors.
        raise ValueError('not a JSON object of dictionary IDs')
    if not isinstance(parsed, dict):
        raise ValueError('not a JSON object of dictionary IDs')
    active = {}
    for name, dict_id in parsed.items():
        kind = _KIND_NAMES.get(name)
        if kind is None:
            raise ValueError('unknown revlog class %s' % ascii(name)[:40])
        # bool is an int to Python, not to JSON.
        if type(dict_id) is not int or not 0 < dict_id < 2 ** 32:
            raise ValueError('the %s entry is not a dictionary ID' % name)
        active[kind] = dict_id
    return active


class _DamagedActive(error.Abort):
    def __init__(self, path, reason):
        super().__init__(
            _(b'%s is damaged: %s') % (path, reason),
            hint=_(b'copy it from another clone of this repository, or run '
                   b'hg zstd-train to write a new one'))


def _unusable_dictionary(dict_id, err):
    return error.Abort(
        _(b'zstd dictionary %d unusable: %s')
        % (dict_id, stringutil.forcebytestr(err)),
        hint=_(b'copy %s from another clone of this repository, restore it '
               b'from a backup, or clone the repository again')
        % os.fsencode(err.path))


def _revlog_error(err):
    """A corrupt frame is a revlog error, reported per revision."""
    return error.RevlogError(
        _(b'zstd dictionary chunk: %s') % stringutil.forcebytestr(err))


_plain_compressors = {}


def _plain_compressor(level):
    """One plain zstd compressor per level for the whole process: once
    used, a compression context holds megabytes, and a command such as
    ``hg zstd-recompress`` writes to every revlog of the store (measured:
    1.6 GB for ipython's 7,818 revlogs with one context each)."""
    if level not in _plain_compressors:
        _plain_compressors[level] = zstandard.ZstdCompressor(level=level)
    return _plain_compressors[level]


class _RevlogCodec:
    """The compressor and decompressor of one revlog."""

    def __init__(self, options):
        self._dicts = _dicts_dir(options[_OPT_DICTS]) \
            if options.get(_OPT_DICTS) else None
        self._kind = options.get(_OPT_KIND, b'filelog')
        self._level = options.get(_OPT_LEVEL, DEFAULT_LEVEL)

    def compress(self, data):
        size = len(data)
        if size < MIN_CHUNK:
            return None
        best = None
        compressor = None
        if self._dicts is not None:
            compressor = self._dicts.compressor(self._kind, self._level)
        if compressor is not None:
            best = HEADER + compressor.compress(data)
        if best is None or size > PLAIN_CHECK_SIZE:
            # A core zstd frame, header b'(': readable by any Mercurial.
            plain = _plain_compressor(self._level).compress(data)
            if best is None or len(plain) < len(best):
                best = plain
        if len(best) < size:
            return best
        return None

    def decompress(self, data):
        # try/except, not a context manager: this is the per-chunk hot path.
        try:
            return self._chunk_decompressor().decompress(
                memoryview(data)[1:])
        except zstdwire.FrameError as err:
            raise _revlog_error(err)

    def decompress_segments(self, data, segments):
        """Decode many dictionary frames of ``data`` (without their header
        byte) at once; see ``zstdwire.ChunkDecompressor``."""
        try:
            return self._chunk_decompressor().decompress_segments(
                data, segments)
        except zstdwire.FrameError as err:
            raise _revlog_error(err)

    def _chunk_decompressor(self):
        if self._dicts is None:
            raise error.StorageError(
                _(b'zstd dictionary chunk read outside a repository store'))
        return self._dicts.decompressor()


class _ZstdDictEngine(compression.compressionengine):
    def name(self):
        return ENGINE

    def revlogheader(self):
        return HEADER

    def revlogcompressor(self, opts=None):
        return _RevlogCodec(opts or {})


def _revlog_init(orig, self, opener, *args, **kwargs):
    """Tell each revlog's codec where its repository's dictionaries are and
    which class it belongs to: the compression engine API passes only the
    revlog's options."""
    orig(self, opener, *args, **kwargs)
    # Before 7.1 the fncache vfs keeps its base on the vfs it wraps.
    base = getattr(opener, 'base', None) or getattr(
        getattr(opener, 'vfs', None), 'base', None)
    if base is not None:
        options = self.feature_config.compression_engine_options
        options[_OPT_DICTS] = os.path.join(base, DICTS_DIR)
        options[_OPT_KIND] = _KIND_OF_TARGET.get(self.target[0], b'filelog')
        if _OPT_LEVEL in opener.options:
            options[_OPT_LEVEL] = opener.options[_OPT_LEVEL]


# Readers while hg zstd-recompress replaces revlogs ------------------------
#
# A revlog keeps its index in memory and opens its data file for each read
# (or once per ``reading()``).  Recompression renames a new index and a new
# data file into place (index first), so a reader that loaded the old index
# and opens the data file afterwards would read the new file at the old
# offsets.  Revlog version 1 has no docket to name data files per
# generation, and nothing tells when the last reader of an old file is
# gone; so readers check instead.  After opening a file of the revlog, a
# reader compares the index file on disk with the one it loaded: unchanged
# means the file it opened is the one its index describes (recompression
# replaces a data file only after its index).  Otherwise it loads the
# revlog again and reads through the new one.  Recompression keeps every
# revision number, node and delta base, so what the reader computed from
# the old index still holds; only offsets and stored lengths changed.


class _RevlogReplaced(error.RevlogError):
    """The files of a revlog changed since its index was loaded.  Caught
    where a read can start over on the reloaded revlog; elsewhere the
    message says what happened."""

    def __init__(self, rl):
        super().__init__(
            _(b'%s was replaced while it was read') % rl.display_id,
            hint=_(b'run the command again'))


def _identity(opener, path):
    """What tells one file at ``path`` from any later one: a replaced
    file's inode may be reused, never with the same times and size."""
    try:
        st = opener.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _get_data(orig, self, filepath, *args, **kwargs):
    """Note which index file a dictionary revlog loads.  Taken before the
    read: if the file is replaced in between, the next check reloads for
    nothing, but never misses a replacement."""
    if self.feature_config.compression_engine == ENGINE:
        self._zstdstore_index = (filepath, _identity(self.opener, filepath))
    return orig(self, filepath, *args, **kwargs)


class _LoadedIndex:
    """The index file one inner revlog was built from."""

    def __init__(self, rl, path, identity):
        self._revlog = weakref.ref(rl)
        self._inner = weakref.ref(rl._inner)
        self.path = path
        self.identity = identity

    def replaced(self):
        rl, inner = self._revlog(), self._inner()
        if rl is None or inner is None or inner.is_writing or \
                inner.is_delaying:
            # This process writes the revlog: its index is the newest.
            return False
        return _identity(inner.opener, self.path) != self.identity

    def reloaded(self):
        """The revlog's current inner revlog, loaded again if this one is
        still current."""
        rl = self._revlog()
        if rl._inner is self._inner():
            _reload(rl)
        return rl._inner


# 7.2's _loadindex returns the index and the chunk cache, 6.9's only the
# chunk cache.
_LOAD_INNER_TAKES_INDEX = 'index' in inspect.signature(
    revlog.revlog._load_inner).parameters


def _reload(rl):
    """Load ``rl`` from disk again, as core does after rewriting one."""
    known = len(rl.index)
    last = rl.index[known - 1][7] if known else None
    # _loadindex registers the flag processors again, and resets what the
    # changelog turns off after it.
    rl._flagprocessors = dict(flagutil.flagprocessors)
    storedeltachains = rl._storedeltachains
    loaded = rl._loadindex()
    if _LOAD_INNER_TAKES_INDEX:
        rl._load_inner(*loaded)
    else:
        rl._load_inner(loaded)
    rl._storedeltachains = storedeltachains
    if len(rl.index) < known or (known and rl.index[known - 1][7] != last):
        raise error.RevlogError(
            _(b'%s was rewritten with other revisions while it was read')
            % rl.display_id, hint=_(b'run the command again'))


@contextlib.contextmanager
def _writing(orig, self, *args, **kwargs):
    """This process's own writes change the index file in place: what it
    loaded is still current afterwards, so note the file as it is now.
    Otherwise the next read would load the revlog again from disk and
    lose what this process's transaction holds in memory."""
    with orig(self, *args, **kwargs):
        yield
    loaded = getattr(self._inner, '_zstdstore_loaded', None)
    if loaded is not None and loaded._inner() is self._inner:
        loaded.identity = _identity(self._inner.opener, loaded.path)


def _load_inner(orig, self, *args, **kwargs):
    orig(self, *args, **kwargs)
    path, identity = getattr(self, '_zstdstore_index', (None, None))
    segments = getattr(self._inner, '_segmentfile', None)
    if identity is not None and segments is not None:
        self._inner._zstdstore_loaded = loaded = _LoadedIndex(
            self, path, identity)
        segments._zstdstore_loaded = loaded


def _open_segment(orig, self, *args, **kwargs):
    """Open a revlog file for reading, unless the revlog was replaced
    since its index was loaded."""
    fp = orig(self, *args, **kwargs)
    loaded = getattr(self, '_zstdstore_loaded', None)
    if loaded is not None and loaded.replaced():
        fp.close()
        raise _RevlogReplaced(loaded._revlog())
    return fp


def _inner_chunk(orig, self, rev, *args, **kwargs):
    try:
        return orig(self, rev, *args, **kwargs)
    except _RevlogReplaced:
        return self._zstdstore_loaded.reloaded()._chunk(rev, *args, **kwargs)


def _raw_comp_chunk(orig, self, rev, *args, **kwargs):
    try:
        return orig(self, rev, *args, **kwargs)
    except _RevlogReplaced:
        self._inner._zstdstore_loaded.reloaded()
        return self.raw_comp_chunk(rev, *args, **kwargs)


@contextlib.contextmanager
def _reading(orig, self, *args, **kwargs):
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(orig(self, *args, **kwargs))
        except _RevlogReplaced:
            self._inner._zstdstore_loaded.reloaded()
            stack.enter_context(self.reading(*args, **kwargs))
        yield


#: Decoded changelog chunks at least this big go into core's uncompressed
#: chunk cache, and every manifest and filelog chunk.  Measured on ipython
#: and requests: caching none made full-text manifest reads up to 2.1x
#: slower than core zstd (a read decodes the whole delta chain again),
#: caching all of them brings them to core's time or better; caching every
#: changelog chunk made its full-text reads 1.3x slower (an insert costs
#: more than decoding a small chunk).
CACHED_CHANGELOG_CHUNK_MIN = 1024


def _chunks(orig, self, revs, targetsize=None, *args, **kwargs):
    try:
        return _decode_chunks(orig, self, revs, targetsize, *args, **kwargs)
    except _RevlogReplaced:
        return self._zstdstore_loaded.reloaded()._chunks(
            revs, targetsize, *args, **kwargs)


def _decode_chunks(orig, self, revs, targetsize, *args, **kwargs):
    """Decompress the dictionary chunks of one read in a single call.

    This covers single-chunk reads too: reading history in order (``hg
    log``) reads one delta per revision.

    Core spends about 5 us of Python per chunk, several times what zstd
    needs for a small one.  This follows core's sparse slicing, one read
    per slice, but locates the chunks of a slice from the index in one pass
    and hands every dictionary chunk to the codec's batch decoder: one C
    call on the C backend.  Chunks found in core's uncompressed chunk cache
    are not decoded again (a full-text read decodes a whole delta chain,
    mostly the one the previous read decoded); but a cache insert (about
    10 us with its cost accounting) costs more than decoding a small
    dictionary chunk in a batch (under 1 us), so small changelog chunks
    are not cached (``CACHED_CHANGELOG_CHUNK_MIN``).  Revlogs of other
    engines, revlogs with a docket, and calls with arguments a later
    Mercurial adds keep core's path.
    """
    if (args or kwargs or not revs
            or self._default_compression_header is not None
            or self.feature_config.compression_engine != ENGINE):
        return orig(self, revs, targetsize, *args, **kwargs)
    found = {}
    cache = getattr(self, '_uncompressed_chunk_cache', None)
    if cache is not None and len(cache):
        for rev in revs:
            chunk = cache.get(rev)
            if chunk is not None:
                found[rev] = chunk
    missing = [rev for rev in revs if rev not in found] if found else revs
    if len(missing) > 1 and self.data_config.with_sparse_read:
        inlined = {'inlined': self.inline} if _SLICE_KNOWS_INLINE else {}
        slices = deltautil.slicechunk(self, missing, targetsize=targetsize,
                                      **inlined)
    else:
        slices = (missing,) if missing else ()
    kind = self.feature_config.compression_engine_options.get(_OPT_KIND)
    smallest = CACHED_CHANGELOG_CHUNK_MIN if kind == b'changelog' else 0
    try:
        for piece in slices:
            decoded = {}
            _decode_slice(self, piece, decoded)
            found.update(decoded)
            if cache is not None:
                for rev, chunk in decoded.items():
                    if len(chunk) >= smallest:
                        cache.insert(rev, chunk, cost=len(chunk))
    except OverflowError:
        # A slice over 2 GiB: core reads it chunk by chunk.
        return orig(self, revs, targetsize=targetsize)
    return [found[rev] for rev in revs]


# Mercurial 7.1 added slicechunk's ``inlined``; 7.0 reads it off the revlog.
_SLICE_KNOWS_INLINE = 'inlined' in inspect.signature(
    deltautil.slicechunk).parameters


def _decode_slice(inner, revs, found):
    index = inner.index
    step = index.entry_size if inner.inline else 0
    offset, data = inner.get_segment_for_revs(revs[0], revs[-1])
    data = bytes(data)
    marker = HEADER[0]
    batched = []
    segments = array.array('Q')
    decompress = inner.decompress
    for rev in revs:
        entry = index[rev]
        length = entry[1]
        if not length:
            found[rev] = b''
            continue
        start = (entry[0] >> 16) + (rev + 1) * step - offset
        if data[start] == marker:
            batched.append(rev)
            segments.append(start + 1)
            segments.append(length - 1)
        else:
            found[rev] = decompress(data[start:start + length])
    if len(batched) == 1:
        start = segments[0] - 1
        found[batched[0]] = inner._get_decompressor(HEADER).decompress(
            data[start:start + 1 + segments[1]])
    elif batched:
        decoded = inner._get_decompressor(HEADER).decompress_segments(
            data, segments)
        found.update(zip(batched, decoded))


def _check_streamed(orig, repo, *args, **kwargs):
    """Refuse a stream clone whose dictionaries its repository could not
    use, before anything reads or writes with them."""
    orig(repo, *args, **kwargs)
    _check_received_dictionaries(repo)


def _check_local_copy(orig, src_repo, dest_repo, *args, **kwargs):
    orig(src_repo, dest_repo, *args, **kwargs)
    _check_received_dictionaries(dest_repo)


def _check_received_dictionaries(repo):
    if not repo.svfs.isdir(DICTS_DIR):
        return
    dicts = zstdwire.DictionaryStore(os.fsdecode(repo.svfs.join(DICTS_DIR)))
    without = _(b'; a clone without --stream does not need it')
    kinds = {}
    for dict_id in dicts.ids():
        try:
            kinds[dict_id] = dicts.load(dict_id).kind.encode('ascii')
        except zstdwire.DictionaryError as err:
            raise error.Abort(
                _(b'zstd dictionary %d of the source is unusable: %s')
                % (dict_id, stringutil.forcebytestr(err)),
                hint=_(b'the source needs its %s/%d copied from another '
                       b'clone or a backup') % (DICTS_DIR, dict_id) + without)
    if not repo.svfs.exists(ACTIVE_FILE):
        return
    with repo.svfs(ACTIVE_FILE, b'rb') as fh:
        data = fh.read(ACTIVE_MAX_SIZE + 1)
    try:
        active = parse_active(data)
    except ValueError as err:
        reason = stringutil.forcebytestr(err)
    else:
        wrong = [(kind, dict_id) for kind, dict_id in sorted(active.items())
                 if kinds.get(dict_id) != kind]
        if not wrong:
            return
        reason = b'it names dictionary %d for %s, which the source has ' \
            b'not as a %s dictionary' % (wrong[0][1], wrong[0][0], wrong[0][0])
    raise error.Abort(_(b'%s of the source is damaged: %s')
                      % (ACTIVE_FILE, reason),
                      hint=_(b'the source needs hg zstd-train') + without)


def _walkstreamfiles(orig, repo, *args, **kwargs):
    """Send dictionaries with stream clones, stream bundles and local
    clones: without them the copied revlogs cannot be read."""
    yield from orig(repo, *args, **kwargs)
    for name in sorted(repo.svfs.listdir(DICTS_DIR)
                       if repo.svfs.isdir(DICTS_DIR) else []):
        if name.isdigit():
            path = DICTS_DIR + b'/' + name
            yield store.SimpleStoreEntry(
                entry_path=path, is_volatile=False,
                file_size=repo.svfs.stat(path).st_size)
    if repo.svfs.exists(ACTIVE_FILE):
        yield store.SimpleStoreEntry(entry_path=ACTIVE_FILE,
                                     is_volatile=True)


def _clonerevlogs(orig, ui, srcrepo, dstrepo, *args, **kwargs):
    """Give an upgrade's new store the dictionaries before revlogs are
    copied into it: core copies compressed chunks as they are, and the new
    store must decode them, and keep decoding them after the swap."""
    if srcrepo.svfs.isdir(DICTS_DIR):
        dstrepo.svfs.makedirs(DICTS_DIR)
        for name in srcrepo.svfs.listdir(DICTS_DIR):
            if name.isdigit() or name == b'active':
                path = DICTS_DIR + b'/' + name
                util.copyfile(srcrepo.svfs.join(path), dstrepo.svfs.join(path),
                              hardlink=True)
    return orig(ui, srcrepo, dstrepo, *args, **kwargs)


def reposetup(ui, repo):
    if repo.local():
        repo.svfs.options[_OPT_LEVEL] = ui.configint(b'zstdstore', b'level')


def extsetup(ui):
    if ENGINE not in util.compengines:
        util.compengines.register(_ZstdDictEngine())
    extensions.wrapfunction(revlog.revlog, '__init__', _revlog_init)
    extensions.wrapfunction(revlog._InnerRevlog, '_chunks', _chunks)
    extensions.wrapfunction(revlog._InnerRevlog, '_chunk', _inner_chunk)
    extensions.wrapfunction(revlog.revlog, '_get_data', _get_data)
    extensions.wrapfunction(revlog.revlog, '_load_inner', _load_inner)
    extensions.wrapfunction(revlog.revlog, 'reading', _reading)
    extensions.wrapfunction(revlog.revlog, '_writing', _writing)
    if hasattr(revlog.revlog, 'raw_comp_chunk'):  # not in 6.9
        extensions.wrapfunction(revlog.revlog, 'raw_comp_chunk',
                                _raw_comp_chunk)
    extensions.wrapfunction(randomaccessfile.randomaccessfile, '_open',
                            _open_segment)
    extensions.wrapfunction(streamclone, '_walkstreamfiles', _walkstreamfiles)
    for consume in ('consumev1', 'consumev2', 'consumev3'):
        extensions.wrapfunction(streamclone, consume, _check_streamed)
    extensions.wrapfunction(streamclone, 'local_copy', _check_local_copy)
    extensions.wrapfunction(upgrade_engine, '_clonerevlogs', _clonerevlogs)


# Reading and writing revlogs -------------------------------------------


def _require_engine(repo):
    if REQUIREMENT not in repo.requirements:
        raise error.Abort(
            _(b'this repository does not use the %s compression engine')
            % ENGINE,
            hint=_(b'convert it first: hg debugupgraderepo --run --config '
                   b'format.revlog-compression=%s') % ENGINE)


def _store_revlogs(repo):
    """``(kind, revlog)`` for every revlog of the store: filelogs first,
    then manifests, then the changelog."""
    unfi = repo.unfiltered()
    entries = [e for e in unfi.store.walk() if e.is_revlog]
    for entry in entries:
        if entry.is_filelog:
            yield b'filelog', unfi.file(entry.target_id)._revlog
    for entry in entries:
        if entry.is_manifestlog:
            yield b'manifest', unfi.manifestlog.getstorage(
                entry.target_id)._revlog
    yield b'changelog', unfi.changelog


def _chunk(rl, rev):
    return rl._inner._chunk(rev)


def _newest_chunks(ui, repo, kind, revlogs):
    """Stored chunks of one revlog class, newest first."""
    if kind != b'filelog':
        for rl in revlogs:
            with rl.reading():
                for rev in range(len(rl) - 1, -1, -1):
                    yield _chunk(rl, rev)
        return
    # Filelogs: order the newest revisions of every file by the changeset
    # that introduced them, reading only indexes until chunks are needed.
    recent = []
    progress = ui.makeprogress(_(b'indexing filelogs'), unit=_(b'files'),
                               total=len(revlogs))
    for rl in revlogs:
        progress.increment()
        for rev in range(len(rl) - 1, max(-1, len(rl) - 9), -1):
            recent.append((rl.linkrev(rev), rev, rl))
    progress.complete()
    recent.sort(key=lambda item: item[0], reverse=True)
    for _linkrev, rev, rl in recent:
        yield _chunk(rl, rev)


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


@command(
    b'zstd-train',
    [
        (b'', b'dict-size', 0, _(b'dictionary size in bytes (default: '
                                 b'zstdstore.dict-size)'), _(b'BYTES')),
        (b'', b'sample-budget', 0, _(b'bytes of recent chunks to train on '
                                     b'per class (default: '
                                     b'zstdstore.sample-budget)'), _(b'BYTES')),
    ],
    _(b'hg zstd-train [--dict-size BYTES] [--sample-budget BYTES]'),
    helpcategory=command.CATEGORY_MAINTENANCE,
)
def zstd_train(ui, repo, **opts):
    """train new dictionaries from the repository's recent history

    One dictionary is trained per revlog class (changelog, manifest,
    filelogs) from its most recent stored chunks, and becomes the one new
    chunks use.  Existing chunks keep their dictionary until
    :hg:`zstd-recompress` rewrites them.  A class with too little history
    keeps its current dictionary (or none).
    """
    dict_size = opts['dict_size'] or ui.configint(b'zstdstore', b'dict-size')
    budget = opts['sample_budget'] or ui.configint(b'zstdstore',
                                                   b'sample-budget')
    level = ui.configint(b'zstdstore', b'level')
    with repo.lock():
        _require_engine(repo)
        _remove_stale_temporaries(ui, repo)
        dicts = _dicts_dir(repo.svfs.join(DICTS_DIR))
        by_kind = {kind: [] for kind in KINDS}
        for kind, rl in _store_revlogs(repo):
            by_kind[kind].append(rl)
        try:
            active = dict(dicts.active())
        except _DamagedActive as err:
            # Training writes a new one: keep nothing from the old.
            ui.warn(_(b'warning: %s\n') % err.message)
            active = {}
        for kind in KINDS:
            start = time.monotonic()
            samples = zstdwire.select_recent(
                _newest_chunks(ui, repo, kind, by_kind[kind]), budget)
            try:
                dictionary = zstdwire.train(samples, dict_size, level)
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


_ENTRY = struct.Struct(revlogconst.INDEX_ENTRY_V1.format)
_HEADER = struct.Struct(revlogconst.INDEX_HEADER.format)


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
                packed = _ENTRY.pack((offset << 16) | (entry[0] & 0xFFFF),
                                     len(chunk), *entry[2:8])
                if rev == 0:
                    packed = _HEADER.pack(
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
                entries[0] = _HEADER.pack(
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


@command(
    b'zstd-recompress',
    [],
    _(b'hg zstd-recompress'),
    helpcategory=command.CATEGORY_MAINTENANCE,
)
def zstd_recompress(ui, repo, **opts):
    """rewrite every stored chunk with the active dictionaries

    Runs under the store lock.  Each revlog is replaced atomically, so the
    command can be interrupted at any point; running it again skips the
    revlogs already done with the same dictionaries and finishes the rest.
    """
    with repo.lock():
        _require_engine(repo)
        _remove_stale_temporaries(ui, repo)
        active = _dicts_dir(repo.svfs.join(DICTS_DIR)).active()
        signature = {k.decode('ascii'): v for k, v in active.items()}
        done = set()
        if repo.svfs.exists(STATE_FILE):
            state = json.loads(repo.svfs.read(STATE_FILE))
            if state.get('active') == signature:
                done = set(state['done'])
        # One revlog open at a time: each holds its index and caches.
        total = sum(1 for e in repo.unfiltered().store.walk() if e.is_revlog)
        progress = ui.makeprogress(_(b'recompressing'), unit=_(b'revlogs'),
                                   total=total)
        rewritten = 0
        last_save = time.monotonic()
        for _kind, rl in _store_revlogs(repo):
            progress.increment(item=rl._indexfile)
            name = rl._indexfile.decode('utf-8', 'surrogateescape')
            if name in done:
                continue
            if _rewrite_revlog(repo, rl):
                rewritten += 1
            done.add(name)
            if time.monotonic() - last_save > 1:
                _save_state(repo, signature, done)
                last_save = time.monotonic()
        progress.complete()
        repo.svfs.tryunlink(STATE_FILE)
        repo.invalidate(clearfilecache=True)
        ui.status(_(b'recompressed %d of %d revlogs\n')
                  % (rewritten, total))


def _save_state(repo, signature, done):
    payload = json.dumps({'active': signature, 'done': sorted(done)})
    with repo.svfs(STATE_FILE, b'wb', atomictemp=True) as fh:
        fh.write(payload.encode('utf-8'))


@command(
    b'zstd-stats',
    cmdutil.formatteropts,
    _(b'hg zstd-stats'),
    helpcategory=command.CATEGORY_MAINTENANCE,
    intents={registrar.INTENT_READONLY},
)
def zstd_stats(ui, repo, **opts):
    """show how each revlog class is stored, beside core's zstd

    Per class: revisions, the bytes of the chunks once decompressed, the
    bytes stored now, the bytes core Mercurial's zstd would store for the
    same chunks (each recompressed here at zstdstore.level), and the share
    of chunks stored with each dictionary, core's zstd, zlib, or raw.
    """
    plain = zstandard.ZstdCompressor(level=ui.configint(b'zstdstore',
                                                        b'level'))
    totals = {kind: [0, 0, 0, 0, {}] for kind in KINDS}
    revlogs = list(_store_revlogs(repo))
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
                counts[0] += 1
                counts[1] += len(chunk)
                counts[2] += len(stored)
                counts[3] += _core_zstd_size(plain, chunk)
                encoding = _encoding(bytes(stored[:32]))
                counts[4][encoding] = counts[4].get(encoding, 0) + 1
    progress.complete()
    active = _dicts_dir(repo.svfs.join(DICTS_DIR)).active()
    fm = ui.formatter(b'zstd-stats', pycompat.byteskwargs(opts))
    for kind in KINDS:
        count, chunkbytes, stored, corezstd, encodings = totals[kind]
        fm.startitem()
        fm.write(b'kind revisions chunkbytes storedbytes corezstdbytes',
                 b'%-9s %8d revisions  %12d chunk bytes  %11d stored  '
                 b'%11d as core zstd', kind, count, chunkbytes, stored,
                 corezstd)
        fm.write(b'ratio', b'  (%.3f)\n',
                 stored / corezstd if corezstd else 1.0)
        fm.data(active=active.get(kind))
        for name, n in sorted(encodings.items()):
            fm.plain(b'    %-22s %6.1f%% of chunks%s\n'
                     % (name, 100.0 * n / count,
                        b' (active)' if name == b'dictionary %d'
                        % active.get(kind, -1) else b''))
        fm.data(encodings=fm.formatdict(encodings))
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
