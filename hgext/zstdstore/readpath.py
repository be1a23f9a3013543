# readpath.py - zstdstore's revlog reads: batches, and revlogs replaced
#
# This software may be used and distributed according to the terms of the
# GNU General Public License version 2 or any later version.
"""How revlogs of the ``zstd-dict`` engine are read: their dictionary
chunks decoded in batches, and a revlog that ``hg zstd-recompress``
replaced under a reader loaded again."""

import array
import contextlib
import weakref

from mercurial.i18n import _
from mercurial import error
from mercurial.revlogutils import flagutil

from hgext3rd import _hgcompat
from .engine import ENGINE, HEADER, OPT_KIND


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


def get_data(orig, self, filepath, *args, **kwargs):
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


def _reload(rl):
    """Load ``rl`` from disk again, as core does after rewriting one."""
    known = len(rl.index)
    last = rl.index[known - 1][7] if known else None
    # _loadindex registers the flag processors again, and resets what the
    # changelog turns off after it.
    rl._flagprocessors = dict(flagutil.flagprocessors)
    storedeltachains = rl._storedeltachains
    _hgcompat.load_index(rl)
    rl._storedeltachains = storedeltachains
    if len(rl.index) < known or (known and rl.index[known - 1][7] != last):
        raise error.RevlogError(
            _(b'%s was rewritten with other revisions while it was read')
            % rl.display_id, hint=_(b'run the command again'))


@contextlib.contextmanager
def writing(orig, self, *args, **kwargs):
    """This process's own writes change the index file in place: what it
    loaded is still current afterwards, so note the file as it is now.
    Otherwise the next read would load the revlog again from disk and
    lose what this process's transaction holds in memory."""
    with orig(self, *args, **kwargs):
        yield
    loaded = getattr(self._inner, '_zstdstore_loaded', None)
    if loaded is not None and loaded._inner() is self._inner:
        loaded.identity = _identity(self._inner.opener, loaded.path)


def load_inner(orig, self, *args, **kwargs):
    orig(self, *args, **kwargs)
    path, identity = getattr(self, '_zstdstore_index', (None, None))
    segments = getattr(self._inner, '_segmentfile', None)
    if identity is not None and segments is not None:
        self._inner._zstdstore_loaded = loaded = _LoadedIndex(
            self, path, identity)
        segments._zstdstore_loaded = loaded


def open_segment(orig, self, *args, **kwargs):
    """Open a revlog file for reading, unless the revlog was replaced
    since its index was loaded."""
    fp = orig(self, *args, **kwargs)
    loaded = getattr(self, '_zstdstore_loaded', None)
    if loaded is not None and loaded.replaced():
        fp.close()
        raise _RevlogReplaced(loaded._revlog())
    return fp


def inner_chunk(orig, self, rev, *args, **kwargs):
    try:
        return orig(self, rev, *args, **kwargs)
    except _RevlogReplaced:
        return self._zstdstore_loaded.reloaded()._chunk(rev, *args, **kwargs)


def raw_comp_chunk(orig, self, rev, *args, **kwargs):
    try:
        return orig(self, rev, *args, **kwargs)
    except _RevlogReplaced:
        self._inner._zstdstore_loaded.reloaded()
        return self.raw_comp_chunk(rev, *args, **kwargs)


@contextlib.contextmanager
def reading(orig, self, *args, **kwargs):
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


def chunks(orig, self, revs, targetsize=None, *args, **kwargs):
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
        slices = _hgcompat.slicechunk(self, missing, targetsize)
    else:
        slices = (missing,) if missing else ()
    kind = self.feature_config.compression_engine_options.get(OPT_KIND)
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

