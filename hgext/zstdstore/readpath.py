# readpath.py - zstdstore's revlog reads: batches, and revlogs replaced
#
# This software may be used and distributed according to the terms of the
# GNU General Public License version 2 or any later version.
"""How revlogs of the ``zstd-dict`` engine are read: their dictionary
chunks decoded in batches, and a revlog that ``hg zstd-recompress``
replaced under a reader loaded again."""

import array
import contextlib
import itertools
import operator
import sys
import weakref

from mercurial import error
from mercurial.i18n import _
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
    mostly the one the previous read decoded).  What goes into that cache
    is chosen by ``_cache_decoded``.  Revlogs of other engines, revlogs
    with a docket, and calls with arguments a later Mercurial adds keep
    core's path.
    """
    if (args or kwargs or not revs
            or self._default_compression_header is not None
            or self.feature_config.compression_engine != ENGINE):
        return orig(self, revs, targetsize, *args, **kwargs)
    if len(revs) == 1:
        return [_one_chunk(self, revs[0])]
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
    try:
        decoded = [(piece, _decode_slice(self, piece)) for piece in slices]
    except OverflowError:
        # A slice over 2 GiB: core reads it chunk by chunk.
        return orig(self, revs, targetsize=targetsize)
    if cache is not None:
        _cache_decoded(self, cache, decoded)
    if not found and len(decoded) == 1:
        return decoded[0][1]
    for piece, piece_chunks in decoded:
        found.update(zip(piece, piece_chunks))
    return [found[rev] for rev in revs]


def _one_chunk(inner, rev):
    """The decompressed chunk of ``rev`` alone: most reads of history in
    order (``hg log``, ``hg annotate``) apply one delta to the text read
    before it, and need nothing of the batch's bookkeeping."""
    cache = getattr(inner, '_uncompressed_chunk_cache', None)
    if cache is not None:
        chunk = cache.get(rev)
        if chunk is not None:
            return chunk
    chunk = inner.decompress(inner.get_segment_for_revs(rev, rev)[1])
    if cache is not None and _smallest_cached(inner) <= len(chunk) \
            <= cache.maxcost:
        cache.insert(rev, chunk, cost=len(chunk))
    return chunk


def _smallest_cached(inner):
    """The size from which a decoded chunk of ``inner`` is cached."""
    kind = inner.feature_config.compression_engine_options.get(OPT_KIND)
    return CACHED_CHANGELOG_CHUNK_MIN if kind == b'changelog' else 1


def _cache_decoded(inner, cache, decoded):
    """Put the newest chunks of one read into core's uncompressed chunk
    cache, as many as its cost limit holds.

    Core inserts every chunk it decodes.  Inserting more than the limit
    only evicts what the same read inserted, and the cache evicts by
    walking its ring of nodes past every empty one: on sympy's 62,675
    changesets, reading the whole changelog spent 107 us per insert there
    (0.14 of 0.33 s), a cost that grows with history.  Small changelog
    chunks are left out (``CACHED_CHANGELOG_CHUNK_MIN``).
    """
    smallest = _smallest_cached(inner)
    room = cache.maxcost
    keep = []
    for piece, piece_chunks in reversed(decoded):
        for i in range(len(piece) - 1, -1, -1):
            size = len(piece_chunks[i])
            if size >= smallest:
                if size > room:
                    break
                room -= size
                keep.append((piece[i], piece_chunks[i]))
        else:
            continue
        break
    for rev, chunk in reversed(keep):
        cache.insert(rev, chunk, cost=len(chunk))


def _decode_slice(inner, revs):
    """The decompressed chunks of ``revs``, read from the revlog at once:
    every dictionary chunk in one call to the codec, any other chunk as
    core decodes it."""
    offset, data = inner.get_segment_for_revs(revs[0], revs[-1])
    data = bytes(data)
    starts, lengths = (_contiguous_chunks(inner, revs, len(data))
                       or _located_chunks(inner, revs, offset))
    marker = HEADER[0]
    if 0 in lengths:
        # An empty chunk's start is the next chunk's, or the end of data.
        markers = [data[start] if length else None
                   for start, length in zip(starts, lengths)]
    elif len(starts) > 1:
        markers = operator.itemgetter(*starts)(data)
    else:
        markers = (data[starts[0]],)
    count = markers.count(marker)
    if count == len(markers):
        chosen = None
    else:
        chosen = [m == marker for m in markers]
        starts_of, lengths_of = (list(itertools.compress(starts, chosen)),
                                 list(itertools.compress(lengths, chosen)))
    decompressor = inner._get_decompressor(HEADER)
    if count == 1:
        start, length = (starts, lengths) if chosen is None else \
            (starts_of, lengths_of)
        decoded = [decompressor.decompress(
            data[start[0]:start[0] + length[0]])]
    elif count:
        segments = array.array('Q', bytes(16 * count))
        segments[0::2] = array.array('Q', map(
            _one_more, starts if chosen is None else starts_of))
        segments[1::2] = array.array('Q', map(
            _one_less, lengths if chosen is None else lengths_of))
        decoded = decompressor.decompress_segments(data, segments)
    else:
        decoded = []
    if chosen is None:
        return decoded
    frames = iter(decoded)
    decompress = inner.decompress
    return [next(frames) if dictionary
            else decompress(data[start:start + length]) if length else b''
            for dictionary, start, length in zip(chosen, starts, lengths)]


_one_more = (1).__add__
_one_less = (-1).__add__


def _located_chunks(inner, revs, offset):
    """``(starts, lengths)`` of the chunks of ``revs`` in the data read
    from ``offset``, from the index entries."""
    index = inner.index
    step = index.entry_size if inner.inline else 0
    entries = [index[rev] for rev in revs]
    return ([(entry[0] >> 16) + (rev + 1) * step - offset
             for rev, entry in zip(revs, entries)],
            [entry[1] for entry in entries])


#: Index entries of revlog version 1: 16 big-endian 32-bit words, the
#: stored length of the chunk is the third.
_V1_ENTRY_WORDS = 16
_V1_LENGTH_WORD = 2


def _contiguous_chunks(inner, revs, size):
    """``(starts, lengths)`` of the chunks of ``revs`` in the ``size``
    bytes read for them, when ``revs`` are consecutive revisions of a split
    version 1 revlog stored back to back; else None.

    This is the common case (a whole revlog, a run of history), and it is
    found without Python work per revision: the lengths from the binary
    index entries, the starts as their running sum.  Per revision, building
    an index entry's tuple cost about as much as zstd's decoding of a
    changelog chunk.
    """
    index = inner.index
    count = len(revs)
    if (count < 2 or inner.inline or index.entry_size != 4 * _V1_ENTRY_WORDS
            or revs[-1] - revs[0] != count - 1):
        return None
    entries = b''.join(map(index.entry_binary, revs))
    if revs[0] == 0:
        # The first entry comes without the 4 bytes the revlog header
        # takes in the index file.
        entries = bytes(4) + entries
    if len(entries) != count * 4 * _V1_ENTRY_WORDS:
        return None
    words = array.array('I', entries)
    if sys.byteorder == 'little':
        words.byteswap()
    lengths = words[_V1_LENGTH_WORD::_V1_ENTRY_WORDS]
    # Chunks never overlap: lengths that add up to the span read leave no
    # gap between them.
    if sum(lengths) != size:
        return None
    return list(itertools.accumulate(lengths[:-1], initial=0)), lengths
