"""Streaming compression for big payloads (bundles, wire responses).

Level, worker threads and long-distance matching are configurable.  The
window never exceeds 2**27 bytes: stock Mercurial and stock zstd readers
refuse larger windows ("Frame requires too much memory").  Output made with
threads is an ordinary zstd frame that any decoder reads.
"""

from __future__ import annotations

import collections
import sys
from collections.abc import Iterable, Iterator
from typing import IO, Protocol

import zstandard

from .errors import FrameError, StreamTruncated

#: log2 of the largest window a stock reader accepts.
MAX_WINDOW_LOG = 27

#: The fastest level libzstd accepts (negative levels trade ratio for speed).
MIN_LEVEL = -(1 << 17)

#: Bytes read from a source at once.
READ_SIZE = zstandard.COMPRESSION_RECOMMENDED_INPUT_SIZE

#: Compressed bytes a reader decodes per step.  A zstd block costs at least
#: 4 bytes (3 of header, 1 of RLE content) and yields at most 128 KiB, and
#: a step may finish one block begun in the step before, so a step yields
#: at most ``STEP_OUTPUT_MAX`` bytes (8 MiB) however the input was
#: crafted.  Ordinary data yields about a KiB per step; the steps cost
#: less than the copies the reader made before it had them.
STEP_INPUT = 256
STEP_OUTPUT_MAX = (STEP_INPUT // 4 + 1) * (128 << 10)

# libzstd's words for a frame whose window is above max_window_size.
_WINDOW_TOO_LARGE = "Frame requires too much memory"


class Readable(Protocol):
    """What a ``StreamReader`` reads from: a binary file object, or
    anything else whose ``read(size)`` returns bytes, empty at the end."""

    def read(self, size: int, /) -> bytes: ...


def compression_parameters(level: int = 3, threads: int = 0,
                           long_distance: bool = False
                           ) -> zstandard.ZstdCompressionParameters:
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

    def __init__(self, level: int = 3, threads: int = 0,
                 long_distance: bool = False) -> None:
        self.parameters = compression_parameters(level, threads,
                                                 long_distance)
        self._cctx = zstandard.ZstdCompressor(
            compression_params=self.parameters)

    def compress_chunks(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        """Yield compressed bytes for an iterable of input chunks."""
        cobj = self._cctx.compressobj()
        for chunk in chunks:
            out = cobj.compress(chunk)
            if out:
                yield out
        yield cobj.flush()

    def copy(self, source: IO[bytes], dest: IO[bytes]) -> tuple[int, int]:
        """Compress file object ``source`` into ``dest``; returns
        ``(bytes_read, bytes_written)``."""
        return self._cctx.copy_stream(source, dest, read_size=READ_SIZE)


class StreamReader:
    """A readable file object decoding a zstd stream from ``source``.

    Concatenated frames are read in turn.  A stream that ends inside a frame
    raises ``StreamTruncated`` instead of returning short data; a corrupt
    one, or a frame asking for a window above 2**27 (as stock readers
    refuse it), raises ``FrameError``.

    Memory is bounded whatever the input: the decoder holds one window
    (at most 2**27 bytes) and decodes ``STEP_INPUT`` compressed bytes at a
    time, so besides what a read asks for it holds at most one step's
    output, ``STEP_OUTPUT_MAX`` bytes (python-zstandard briefly holds a
    step two or three times while it joins its pieces).
    """

    def __init__(self, source: Readable) -> None:
        self._source = source
        self._dctx = zstandard.ZstdDecompressor(
            max_window_size=1 << MAX_WINDOW_LOG)
        self._dobj: zstandard.ZstdDecompressionObj | None = None
        self._input = memoryview(b"")
        # Decoded steps not read yet, whole (slicing a step would copy
        # it), and how far into the first one reads have got.
        self._decoded: collections.deque[bytes] = collections.deque()
        self._offset = 0
        self._available = 0
        self._ended = False

    def readable(self) -> bool:
        return True

    def _fill(self, size: int) -> None:
        """Decode until ``size`` bytes are available or the source ends."""
        while self._available < size and not self._ended:
            if not self._input:
                data = self._source.read(READ_SIZE)
                if not data:
                    self._ended = True
                    if self._dobj is not None and not self._dobj.eof:
                        raise StreamTruncated(
                            "zstd stream ended inside a frame (truncated "
                            "download or file?)")
                    return
                self._input = memoryview(data)
            self._step()

    def _step(self) -> None:
        if self._dobj is None or self._dobj.eof:
            self._dobj = self._dctx.decompressobj()
        # bytes, not a view: given views, the cffi backend of
        # python-zstandard 0.25 crashed the interpreter in its garbage
        # collector.
        piece = bytes(self._input[:STEP_INPUT])
        try:
            out = self._dobj.decompress(piece)
        except zstandard.ZstdError as err:
            if _WINDOW_TOO_LARGE in str(err):
                raise FrameError(
                    "zstd frame needs a window above %d bytes (2**%d), "
                    "the most this reader and stock zstd readers accept"
                    % (1 << MAX_WINDOW_LOG, MAX_WINDOW_LOG)) from err
            raise FrameError("corrupt zstd stream: %s" % err) from err
        used = len(piece)
        if self._dobj.eof:
            # The frame ended inside the piece; the rest begins the next.
            used -= len(self._dobj.unused_data)
        self._input = self._input[used:]
        if out:
            self._decoded.append(out)
            self._available += len(out)

    def read(self, size: int | None = -1) -> bytes:
        """Return ``size`` bytes (all when ``size`` is negative or None);
        fewer only at the end of the stream."""
        if size is None or size < 0:
            size = sys.maxsize
        self._fill(size)
        parts = []
        while size and self._decoded:
            first = self._decoded[0]
            end = min(len(first), self._offset + size)
            if self._offset == 0 and end == len(first):
                parts.append(first)
            else:
                parts.append(first[self._offset:end])
            size -= end - self._offset
            self._available -= end - self._offset
            if end == len(first):
                self._decoded.popleft()
                self._offset = 0
            else:
                self._offset = end
        return parts[0] if len(parts) == 1 else b"".join(parts)


def decompress_chunks(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Yield decoded bytes for an iterable of compressed chunks; raises
    ``StreamTruncated`` if the input stops inside a frame."""
    reader = StreamReader(_IterReader(chunks))
    while True:
        out = reader.read(READ_SIZE)
        if not out:
            return
        yield out


class _IterReader:
    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)

    def read(self, size: int) -> bytes:
        return next(self._chunks, b"")
