import os

import pytest
import zstandard
from hypothesis import given, settings, strategies as st

import zstdwire
from zstdwire_samples import chunks

SETTINGS = settings(max_examples=int(os.environ.get("VCSPERF_EXAMPLES", 200)), deadline=None)


@pytest.fixture(scope="module")
def dictionary():
    return zstdwire.train(chunks()[:1500], dict_size=16384)


def test_backend_is_the_one_requested():
    policy = os.environ.get("PYTHON_ZSTANDARD_IMPORT_POLICY", "default")
    expected = {"cffi": "cffi", "cext": "cext"}.get(policy, "cext")
    assert zstandard.backend == expected


@SETTINGS
@given(data=st.binary(max_size=4096), level=st.integers(-50, 22),
       use_dict=st.booleans())
def test_round_trip(dictionary, data, level, use_dict):
    compressor = zstdwire.ChunkCompressor(dictionary if use_dict else None,
                                          level)
    frame = compressor.compress(data)
    params = zstdwire.frame_parameters(frame)
    assert params.dict_id == (dictionary.dict_id() if use_dict else 0)
    decompressor = zstdwire.ChunkDecompressor(dictionaries=[dictionary])
    assert decompressor.decompress(frame) == data


def test_dictionary_pays_on_unseen_chunks(dictionary):
    held_out = chunks()[1500:]
    plain = zstdwire.ChunkCompressor(None, 3)
    with_dict = zstdwire.ChunkCompressor(dictionary, 3)
    plain_size = sum(len(plain.compress(c)) for c in held_out)
    dict_size = sum(len(with_dict.compress(c)) for c in held_out)
    assert dict_size < 0.8 * plain_size


def test_frame_selects_dictionary_from_store(tmp_path, dictionary):
    other = zstdwire.train(chunks()[500:], dict_size=8192)
    store = zstdwire.DictionaryStore(str(tmp_path))
    store.add(dictionary, "filelog")
    store.add(other, "manifest")
    decompressor = zstdwire.ChunkDecompressor(store)
    for d in (dictionary, other, None):
        frame = zstdwire.ChunkCompressor(d).compress(chunks()[7])
        assert decompressor.decompress(frame) == chunks()[7]


def test_unknown_dictionary_names_the_missing_file(tmp_path, dictionary):
    frame = zstdwire.ChunkCompressor(dictionary).compress(b"x" * 100)
    decompressor = zstdwire.ChunkDecompressor(
        zstdwire.DictionaryStore(str(tmp_path)))
    with pytest.raises(zstdwire.DictionaryMissing) as info:
        decompressor.decompress(frame)
    assert info.value.path == os.path.join(str(tmp_path),
                                           str(dictionary.dict_id()))
    assert str(dictionary.dict_id()) in str(info.value)


def test_frame_with_dictionary_and_no_store(dictionary):
    frame = zstdwire.ChunkCompressor(dictionary).compress(b"y" * 100)
    with pytest.raises(zstdwire.FrameError, match="needs dictionary"):
        zstdwire.ChunkDecompressor().decompress(frame)


@SETTINGS
@given(data=st.binary(min_size=1, max_size=2048), cut=st.integers(1, 4096),
       use_dict=st.booleans())
def test_truncated_frames_raise(dictionary, data, cut, use_dict):
    frame = zstdwire.ChunkCompressor(dictionary if use_dict else None
                                     ).compress(data)
    truncated = frame[:max(0, len(frame) - cut)]
    decompressor = zstdwire.ChunkDecompressor(dictionaries=[dictionary])
    with pytest.raises(zstdwire.FrameError):
        decompressor.decompress(truncated)


@SETTINGS
@given(data=st.binary(min_size=1, max_size=2048), position=st.integers(0),
       flip=st.integers(1, 255), use_dict=st.booleans())
def test_corrupt_frames_never_return_wrong_data(dictionary, data, position,
                                                flip, use_dict):
    frame = bytearray(zstdwire.ChunkCompressor(
        dictionary if use_dict else None).compress(data))
    frame[position % len(frame)] ^= flip
    decompressor = zstdwire.ChunkDecompressor(dictionaries=[dictionary])
    try:
        out = decompressor.decompress(bytes(frame))
    except (zstdwire.FrameError, zstdwire.DictionaryError):
        return
    assert out == data


def test_extra_bytes_after_frame_are_refused():
    frame = zstdwire.ChunkCompressor().compress(b"abc" * 50)
    with pytest.raises(zstdwire.FrameError):
        zstdwire.ChunkDecompressor().decompress(frame + b"junk")


def test_decompress_many_matches_one_by_one(dictionary):
    sample = chunks()[1500:1700]
    compressor = zstdwire.ChunkCompressor(dictionary)
    frames = [compressor.compress(c) for c in sample]
    decompressor = zstdwire.ChunkDecompressor(dictionaries=[dictionary])
    assert decompressor.decompress_many(frames) == sample
    mixed = frames[:5] + [zstdwire.ChunkCompressor().compress(b"plain")]
    assert decompressor.decompress_many(mixed) == sample[:5] + [b"plain"]
    with pytest.raises(zstdwire.FrameError):
        decompressor.decompress_many(frames[:3] + [frames[3][:-2]])


def test_absurd_content_size_is_refused_before_allocating():
    frame = bytearray(zstdwire.ChunkCompressor().compress(b"\0"))
    # Frame header descriptor 0x20 + 1-byte size; make it an 8-byte size
    # field claiming 2**40 bytes.
    assert frame[4] & 0xC0 == 0
    claimed = bytes(frame[:4]) + bytes([frame[4] | 0xC0]) + \
        (1 << 40).to_bytes(8, "little") + bytes(frame[6:])
    assert zstdwire.frame_parameters(claimed).content_size == 1 << 40
    with pytest.raises(zstdwire.FrameError, match="claims"):
        zstdwire.ChunkDecompressor().decompress(claimed)


@pytest.mark.parametrize("position", [0, 1])
def test_absurd_content_size_among_many_frames_is_refused(position):
    # The C backend decodes many frames into one buffer sized by their
    # headers; a claim of 2**40 bytes must not surface as MemoryError.
    claimed = (b"\x28\xb5\x2f\xfd\xc0\x38" + (1 << 40).to_bytes(8, "little")
               + b"\x03\x00\x00\x00")  # one last RLE block of 0 bytes
    frames = [zstdwire.ChunkCompressor().compress(b"plain")]
    frames.insert(position, claimed)
    with pytest.raises(zstdwire.FrameError, match="claims"):
        zstdwire.ChunkDecompressor().decompress_many(frames)


@pytest.mark.parametrize("bad", [b"", b"\x28\xb5", b"\x28\xb5\x2f\xfd\x24"])
def test_truncated_frame_among_many_frames_is_a_frame_error(bad):
    # The C backend's many-frames path raised ValueError ("could not
    # determine decompressed size") for a frame cut inside its header.
    good = zstdwire.ChunkCompressor().compress(b"plain")
    with pytest.raises(zstdwire.FrameError):
        zstdwire.ChunkDecompressor().decompress_many([good, bad])
