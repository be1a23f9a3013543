import io
import random

import pytest
import zstandard
from hypothesis import given, settings, strategies as st
from mercurial import zstd as hgzstd

import zstdwire
from zstdwire_samples import source_lines

SOURCE = b"".join(source_lines())


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=200000), level=st.integers(-50, 22),
       threads=st.sampled_from([0, 2]), ldm=st.booleans(),
       piece=st.integers(1, 70000))
def test_round_trip(data, level, threads, ldm, piece):
    compressor = zstdwire.StreamCompressor(level, threads, ldm)
    pieces = [data[i:i + piece] for i in range(0, len(data), piece)]
    compressed = b"".join(compressor.compress_chunks(pieces))
    assert b"".join(zstdwire.decompress_chunks([compressed])) == data
    reader = zstdwire.StreamReader(io.BytesIO(compressed))
    assert reader.read(7) == data[:7]
    assert reader.read() == data[7:]


@pytest.mark.parametrize("level", [
    1, 3, pytest.param(19, marks=pytest.mark.slow),
    pytest.param(22, marks=pytest.mark.slow)])
def test_window_capped_for_stock_readers(level):
    params = zstdwire.compression_parameters(level, threads=2,
                                             long_distance=True)
    assert params.window_log <= zstdwire.MAX_WINDOW_LOG
    payload = SOURCE * 3
    out = io.BytesIO()
    zstdwire.StreamCompressor(level, 2, True).copy(io.BytesIO(payload), out)
    frame = out.getvalue()
    assert zstandard.get_frame_parameters(frame).window_size <= 1 << 27
    # Mercurial's bundled zstd (what stock hg decodes bundles with) reads it.
    stock = hgzstd.ZstdDecompressor().decompressobj()
    assert stock.decompress(frame) == payload


@pytest.mark.slow
def test_stock_reader_refuses_bigger_windows_and_so_do_we():
    params = zstandard.ZstdCompressionParameters.from_level(
        19, window_log=28, enable_ldm=True)
    # Streaming, so the size is unknown and the header keeps the 2**28 window.
    cobj = zstandard.ZstdCompressor(compression_params=params).compressobj()
    frame = cobj.compress(SOURCE) + cobj.flush()
    assert zstandard.get_frame_parameters(frame).window_size == 1 << 28
    with pytest.raises(hgzstd.ZstdError, match="memory"):
        hgzstd.ZstdDecompressor().decompressobj().decompress(frame)
    with pytest.raises(zstdwire.FrameError, match="window above"):
        zstdwire.StreamReader(io.BytesIO(frame)).read()


def test_long_distance_matching_finds_far_repeats():
    block = SOURCE[:2 << 20]
    far = random.Random(0).randbytes(8 << 20)  # incompressible distance
    payload = block + far + block
    plain = b"".join(zstdwire.StreamCompressor(3).compress_chunks([payload]))
    ldm = b"".join(zstdwire.StreamCompressor(3, long_distance=True)
                   .compress_chunks([payload]))
    assert len(ldm) < len(plain) - len(block) // 10
    assert b"".join(zstdwire.decompress_chunks([ldm])) == payload


def test_concatenated_frames():
    a = b"".join(zstdwire.StreamCompressor(3).compress_chunks([b"first "]))
    b = b"".join(zstdwire.StreamCompressor(9).compress_chunks([b"second"]))
    assert zstdwire.StreamReader(io.BytesIO(a + b)).read() == b"first second"


@settings(max_examples=50, deadline=None)
@given(cut=st.integers(1, 4000))
def test_truncated_stream_raises(cut):
    compressed = b"".join(
        zstdwire.StreamCompressor(3).compress_chunks([SOURCE[:200000]]))
    with pytest.raises(zstdwire.FrameError, match="ended inside a frame"):
        b"".join(zstdwire.decompress_chunks([compressed[:-cut]]))


def test_corrupt_stream_raises():
    compressed = bytearray(b"".join(
        zstdwire.StreamCompressor(3).compress_chunks([SOURCE[:200000]])))
    compressed[len(compressed) // 2] ^= 0x55
    with pytest.raises(zstdwire.FrameError, match="corrupt"):
        zstdwire.StreamReader(io.BytesIO(bytes(compressed))).read()


def test_bad_level():
    with pytest.raises(ValueError, match="level"):
        zstdwire.StreamCompressor(23)
    with pytest.raises(ValueError, match="level"):
        zstdwire.StreamCompressor(-(1 << 17) - 1)
