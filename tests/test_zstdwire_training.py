import pytest

import zstdwire
from zstdwire_samples import chunks


def test_select_recent_prefers_newest_and_stops_early():
    consumed = []

    def newest_first():
        for i in range(10000):
            consumed.append(i)
            yield b"%06d" % i * 10

    samples = zstdwire.select_recent(newest_first(), budget=600)
    assert samples == [b"%06d" % i * 10 for i in (9, 8, 7, 6, 5, 4, 3, 2, 1,
                                                  0)]
    assert len(consumed) == 10


def test_select_recent_caps_sample_size_and_skips_empty():
    samples = zstdwire.select_recent([b"", b"a" * 1000, b"b" * 10],
                                     budget=10**6, max_sample_size=100)
    assert samples == [b"b" * 10, b"a" * 100]


def test_too_few_samples():
    with pytest.raises(zstdwire.TrainingError, match="at least"):
        zstdwire.train([b"one", b"two"])


def test_recent_samples_beat_old_ones_on_new_data():
    data = chunks(3000)
    new = data[2700:]
    recent = zstdwire.train(zstdwire.select_recent(reversed(data[:2700]),
                                                   budget=200000), 16384)
    oldest = zstdwire.train(data[:400], 16384)
    size = lambda d: sum(len(zstdwire.ChunkCompressor(d).compress(c))
                         for c in new)
    assert size(recent) < size(oldest)


def test_zstd_gives_one_id_to_dictionaries_trained_at_two_levels():
    # Why a store names its dictionaries itself: zstd's ID hashes the
    # dictionary's content only, and a retrain at another level from the
    # same samples makes other bytes under the same ID.
    samples = chunks(400)
    at3 = zstdwire.train(samples, 4096, level=3)
    at9 = zstdwire.train(samples, 4096, level=9)
    assert at3.dict_id() == at9.dict_id()
    assert at3.as_bytes() != at9.as_bytes()


def test_train_gives_the_dictionary_the_id_it_is_asked_for():
    samples = chunks(400)
    dictionary = zstdwire.train(samples, 4096, level=9, dict_id=123456)
    assert dictionary.dict_id() == 123456
    assert int.from_bytes(dictionary.as_bytes()[4:8], "little") == 123456
    compressed = zstdwire.ChunkCompressor(dictionary).compress(samples[0])
    assert zstdwire.frame_parameters(compressed).dict_id == 123456


@pytest.mark.parametrize("dict_size", [-5, 0, 10, 255])
def test_a_dictionary_smaller_than_zstd_trains_is_refused(dict_size):
    with pytest.raises(ValueError, match="at least 256 bytes"):
        zstdwire.train(chunks(400), dict_size)
