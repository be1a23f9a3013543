"""zstdwire: zstd with trained dictionaries, for version control storage
and transport.

The bottom layer: it imports nothing of ours, and besides the standard
library only zstandard (neither Mercurial nor dulwich); every other layer
but ``pastbytes`` may import it.  It runs on both backends of
python-zstandard (the C extension and cffi); choose one with
``PYTHON_ZSTANDARD_IMPORT_POLICY``.

- ``training``: pick recent samples and train a dictionary (fastcover).
- ``store``: an immutable, checksummed on-disk dictionary store.
- ``chunks``: per-chunk frames that name their dictionary.
- ``streams``: threaded, long-distance streaming with a capped window, and
  a reader whose memory is bounded whatever it is given.
"""

from .chunks import ChunkCompressor, ChunkDecompressor, frame_parameters
from .errors import (
    DictionaryCorrupt,
    DictionaryError,
    DictionaryMissing,
    FrameError,
    StreamTruncated,
    TrainingError,
    ZstdWireError,
)
from .store import DictionaryStore, StoredDictionary
from .streams import (
    MAX_WINDOW_LOG,
    StreamCompressor,
    StreamReader,
    compression_parameters,
    decompress_chunks,
)
from .training import MAX_SAMPLE_SIZE, select_recent, train

__all__ = [
    "ChunkCompressor", "ChunkDecompressor", "DictionaryCorrupt",
    "DictionaryError", "DictionaryMissing", "DictionaryStore", "FrameError",
    "MAX_SAMPLE_SIZE", "MAX_WINDOW_LOG", "StoredDictionary", "StreamCompressor", "StreamReader",
    "StreamTruncated", "TrainingError", "ZstdWireError",
    "compression_parameters", "decompress_chunks", "frame_parameters", "select_recent", "train",
]
