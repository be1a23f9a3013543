"""Streaming compression for big payloads (bundles, wire responses).

Level, worker threads and long-distance matching are configurable.  The
window never exceeds 2**27 bytes: stock Mercurial and stock zstd readers
refuse larger windows ("Frame requires too much memory").  Output made with
threads is an ordinary zstd frame that any decoder reads.
"""

import sys

import zstandard

from .errors import FrameError

#: log2 of the largest window a stock reader accepts.
MAX_WINDOW_LOG = 27

#: The fastest level libzstd accepts (negative levels trade ratio for speed).
MIN_LEVEL = -(1 << 17)

#: Bytes read from a source per step.
READ_SIZE = zstandard.COMPRESSION_RECOMMENDED_INPUT_SIZE


def compression_parameters(level=3, threads=0, long_distance=False):
    """``ZstdCompressionParameters`` for ``level`` with the window capped.

    ``threads`` is the number of worker threads (0 compresses in the calling
    thread; -1 uses every CPU).  ``long_distance`` enables long-distance
    matching, which finds repeats across the whole window: it pays on
    bundles, where a file's revisions sit far apart.
    """
    if not MIN_LEVEL <= level <= zstandard.MAX_COMPRESSION_LEVEL:
        raise ValueError("zstd level must be %d to %d, got %d"
                         % (MIN_LEVEL, zstandard.MAX_COMPRESSION_LEVEL, level))
    if long_distance:
        # Long-distance matching only pays with a big window to look in;
        # this is what ``zstd --long`` does.
        window_log = MAX_WINDOW_LOG
    else:
        base = zstandard.ZstdCompressionParameters.from_level(level)
        window_log = min(base.window_log, MAX_WINDOW_LOG)
    return zstandard.ZstdCompressionParameters.from_level(
        level, window_log=window_log,
        threads=threads, enable_ldm=bool(long_distance),
        write_checksum=True, write_content_size=False)


class StreamCompressor:
    """Compress an iterable of byte chunks into one zstd frame."""

    def __init__(self, level=3, threads=0, long_distance=False):
        self.parameters = compression_parameters(level, threads,
                                                 long_distance)
        self._cctx = zstandard.ZstdCompressor(
            compression_params=self.parameters)

    def compress_chunks(self, chunks):
        """Yield compressed bytes for an iterable of input chunks."""
        cobj = self._cctx.compressobj()
        for chunk in chunks:
            out = cobj.compress(chunk)
            if out:
                yield out
        yield cobj.flush()

    def copy(self, source, dest):
        """Compress file object ``source`` into ``dest``; returns
        ``(bytes_read, bytes_written)``."""
        return self._cctx.copy_stream(source, dest, read_size=READ_SIZE)


class StreamReader:
    """A readable file object decoding a zstd stream from ``source``.

    Concatenated frames are read in turn.  A stream that ends inside a frame
    raises ``FrameError`` instead of returning short data, and a window
    above 2**27 is refused as stock readers refuse it.
    """

    def __init__(self, source):
        self._source = source
        self._dctx = zstandard.ZstdDecompressor(
            max_window_size=1 << MAX_WINDOW_LOG)
        self._dobj = None
        # A bytearray: deleting from its front is cheap, so many small
        # reads of one big decoded block stay linear.
        self._pending = bytearray()
        self._ended = False

    def readable(self):
        return True

    def _fill(self, size):
        """Decode until ``size`` bytes are pending or the source ends."""
        while len(self._pending) < size and not self._ended:
            data = self._source.read(READ_SIZE)
            if not data:
                self._ended = True
                if self._dobj is not None and not self._dobj.eof:
                    raise FrameError("zstd stream ended inside a frame "
                                     "(truncated download or file?)")
                return
            while data:
                if self._dobj is None or self._dobj.eof:
                    self._dobj = self._dctx.decompressobj()
                try:
                    self._pending += self._dobj.decompress(data)
                except zstandard.ZstdError as err:
                    raise FrameError("corrupt zstd stream: %s" % err) from err
                data = self._dobj.unused_data if self._dobj.eof else b""

    def read(self, size=-1):
        """Return ``size`` bytes (all when ``size`` is negative or None);
        fewer only at the end of the stream."""
        if size is None or size < 0:
            size = sys.maxsize
        self._fill(size)
        out = bytes(self._pending[:size])
        del self._pending[:size]
        return out


def decompress_chunks(chunks):
    """Yield decoded bytes for an iterable of compressed chunks; raises
    ``FrameError`` if the input stops inside a frame."""
    reader = StreamReader(_IterReader(chunks))
    while True:
        out = reader.read(READ_SIZE)
        if not out:
            return
        yield out


class _IterReader:
    def __init__(self, chunks):
        self._chunks = iter(chunks)

    def read(self, size):
        return next(self._chunks, b"")
