"""Dictionary training from samples of a repository's own history.

Samples are taken newest first: measured on real revlogs, a dictionary
trained on recent revisions compresses new revisions better than one
trained on all of history, because content drifts.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import zstandard

from .errors import TrainingError

#: Default dictionary size.  Measured: 112 KiB is zstd's own default and
#: larger dictionaries stop paying for revlog-sized chunks.
DEFAULT_DICT_SIZE = 112 * 1024

#: Default memory budget for the samples handed to the trainer.  The
#: trainer needs roughly ten times the dictionary size to work with and
#: uses memory proportional to the samples it is given.
DEFAULT_SAMPLE_BUDGET = 16 * 1024 * 1024

#: Longest sample kept.  A dictionary helps the start of a frame; the tail
#: of a big sample only costs training time.
MAX_SAMPLE_SIZE = 128 * 1024

#: zstd refuses to train on fewer samples than this.
MIN_SAMPLES = 8

#: The smallest dictionary zstd trains (ZDICT_DICTSIZE_MIN).
MIN_DICT_SIZE = 256


def select_recent(entries_newest_first: Iterable[bytes],
                  budget: int = DEFAULT_SAMPLE_BUDGET,
                  max_sample_size: int = MAX_SAMPLE_SIZE) -> list[bytes]:
    """Take samples from an iterable of ``bytes``, newest first, until
    ``budget`` bytes are taken.

    The iterable is consumed lazily and abandoned once the budget is met, so
    a generator over a huge history costs no more memory than ``budget``.
    Empty entries are skipped; each sample is cut to ``max_sample_size``.
    Returns the samples oldest first.
    """
    samples = []
    taken = 0
    for entry in entries_newest_first:
        if not entry:
            continue
        sample = bytes(entry[:max_sample_size])
        samples.append(sample)
        taken += len(sample)
        if taken >= budget:
            break
    samples.reverse()
    return samples


def train(samples: Iterable[bytes], dict_size: int = DEFAULT_DICT_SIZE,
          level: int = 3, threads: int | None = None,
          dict_id: int = 0) -> zstandard.ZstdCompressionDict:
    """Train a dictionary with fastcover on ``samples`` (a list of bytes).

    ``level`` is the compression level the dictionary will be used at; the
    trainer tunes its parameters for it.  ``threads`` defaults to the number
    of CPUs.  ``dict_id`` is the ID the dictionary gets (a store's
    ``unused_id()``); by default zstd derives one from the dictionary's
    content, which is the same for dictionaries trained at other levels
    from the same samples.  Returns a ``zstandard.ZstdCompressionDict``
    with a non-zero dict ID.  Raises ``ValueError`` for a ``dict_size``
    below ``MIN_DICT_SIZE``, and ``TrainingError`` when the samples are too
    few or too small to make a dictionary of that size.
    """
    if dict_size < MIN_DICT_SIZE:
        raise ValueError("a dictionary is at least %d bytes, not %d"
                         % (MIN_DICT_SIZE, dict_size))
    samples = [bytes(s) for s in samples if s]
    if len(samples) < MIN_SAMPLES:
        raise TrainingError(
            "need at least %d non-empty samples to train, got %d"
            % (MIN_SAMPLES, len(samples)))
    total = sum(len(s) for s in samples)
    # zstd cannot fill a dictionary larger than a fraction of its input.
    dict_size = min(dict_size, max(total // 10, MIN_DICT_SIZE))
    if threads is None:
        threads = os.cpu_count() or 1
    try:
        # The stubs take only a list of exactly bytes | bytearray |
        # memoryview (invariant): a list of bytes is one.
        dictionary = zstandard.train_dictionary(
            dict_size, samples,  # type: ignore[arg-type]
            level=level, threads=threads, steps=8, dict_id=dict_id)
    except zstandard.ZstdError as err:
        raise TrainingError("zstd could not train a dictionary from %d "
                            "samples (%d bytes): %s"
                            % (len(samples), total, err)) from err
    if dictionary.dict_id() == 0:
        raise TrainingError("zstd produced a dictionary without an ID")
    return dictionary
