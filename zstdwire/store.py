"""An immutable, checksummed store of zstd dictionaries in one directory.

Each dictionary is one file named by its decimal dict ID.  A file is
written once, under a temporary name, fsynced and then linked into place, so
a reader never sees a partial file and an existing file is never replaced.
A new dictionary always means a new ID, so chunks compressed with an old
one keep decoding: the writer trains it with an ID from ``unused_id()``.
(zstd's own ID is a hash of the dictionary's content alone, the same for
dictionaries trained at two levels from the same samples.)

File layout (all integers big-endian)::

    magic        6 bytes   b"ZWDICT"
    version      1 byte    FORMAT_VERSION
    kind length  1 byte
    kind         n bytes   ASCII label, e.g. "changelog"
    size         4 bytes   length of the dictionary payload
    sha256      32 bytes   of the payload
    payload      size bytes
"""

from __future__ import annotations

import hashlib
import os
import random
import struct
import threading

import zstandard

from .errors import DictionaryCorrupt, DictionaryError, DictionaryMissing

MAGIC = b"ZWDICT"
#: The dict IDs zstd leaves to dictionaries nobody registered: below
#: 2^15 and from 2^31 they are reserved.
MIN_ID = 1 << 15
MAX_ID = (1 << 31) - 1
_RANDOM = random.SystemRandom()
FORMAT_VERSION = 1
_FIXED = struct.Struct(">6sBB")
_TAIL = struct.Struct(">I32s")


class StoredDictionary:
    """A dictionary loaded from the store: ``dict_id``, ``kind`` and the
    ``zstandard.ZstdCompressionDict`` itself as ``dictionary``."""

    __slots__ = ("dict_id", "kind", "dictionary")

    def __init__(self, dict_id: int, kind: str,
                 dictionary: zstandard.ZstdCompressionDict) -> None:
        self.dict_id = dict_id
        self.kind = kind
        self.dictionary = dictionary


def encode(dictionary: zstandard.ZstdCompressionDict, kind: str) -> bytes:
    """Return the file contents for ``dictionary`` labelled ``kind``."""
    payload = dictionary.as_bytes()
    label = kind.encode("ascii")
    if not 0 < len(label) < 256:
        raise ValueError("dictionary kind must be 1 to 255 ASCII characters")
    return (_FIXED.pack(MAGIC, FORMAT_VERSION, len(label)) + label
            + _TAIL.pack(len(payload), hashlib.sha256(payload).digest())
            + payload)


def decode(data: bytes, path: str
           ) -> tuple[str, zstandard.ZstdCompressionDict]:
    """Parse file contents; raise ``DictionaryCorrupt`` naming ``path``."""
    if len(data) < _FIXED.size:
        raise DictionaryCorrupt("truncated dictionary header", path)
    magic, version, label_len = _FIXED.unpack_from(data)
    if magic != MAGIC:
        raise DictionaryCorrupt("not a zstdwire dictionary file", path)
    if version != FORMAT_VERSION:
        raise DictionaryCorrupt(
            "dictionary format version %d is not supported (this zstdwire "
            "reads version %d)" % (version, FORMAT_VERSION), path)
    offset = _FIXED.size + label_len
    if len(data) < offset + _TAIL.size:
        raise DictionaryCorrupt("truncated dictionary header", path)
    kind = data[_FIXED.size:offset].decode("latin-1")
    if not (kind and kind.isascii() and kind.isprintable()):
        raise DictionaryCorrupt("dictionary kind is not printable ASCII",
                                path)
    size, digest = _TAIL.unpack_from(data, offset)
    payload = data[offset + _TAIL.size:]
    if len(payload) != size:
        raise DictionaryCorrupt(
            "dictionary payload is %d bytes, header says %d"
            % (len(payload), size), path)
    if hashlib.sha256(payload).digest() != digest:
        raise DictionaryCorrupt("dictionary checksum mismatch", path)
    return kind, zstandard.ZstdCompressionDict(payload)


class DictionaryStore:
    """Dictionaries kept in ``directory``, loaded on demand and cached.

    ``get(dict_id)`` is what decompressors call; it raises
    ``DictionaryMissing`` or ``DictionaryCorrupt`` naming the file.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._loaded: dict[int, zstandard.ZstdCompressionDict] = {}
        self._lock = threading.Lock()

    def path(self, dict_id: int) -> str:
        return os.path.join(self.directory, "%d" % dict_id)

    def ids(self) -> list[int]:
        """The dict IDs present, sorted."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        return sorted(int(name) for name in names if _is_id(name))

    def unused_id(self) -> int:
        """A dict ID no file of the store has, for a dictionary about to be
        trained: random in the range zstd leaves to unregistered
        dictionaries (2^15 to 2^31 - 1), as zstd's own IDs are.  Random,
        not the next number, so that clones which trained apart (whose
        files the help says to copy back when one is lost) almost never
        hold two dictionaries under one ID."""
        taken = set(self.ids())
        # Each draw misses with the share of the range taken: with fewer
        # than a billion files, 64 all miss less than once in 2^64 runs.
        for _attempt in range(64):
            dict_id = _RANDOM.randrange(MIN_ID, MAX_ID + 1)
            if dict_id not in taken:
                return dict_id
        raise DictionaryError("no unused dictionary ID found",
                              self.directory)

    def __contains__(self, dict_id: int) -> bool:
        return os.path.exists(self.path(dict_id))

    def add(self, dictionary: zstandard.ZstdCompressionDict, kind: str
            ) -> int:
        """Store ``dictionary`` under its dict ID and return the ID.

        Adding a dictionary that is already stored is a no-op.  A different
        dictionary under an existing ID raises ``DictionaryError``: IDs are
        never reused.
        """
        dict_id = dictionary.dict_id()
        if dict_id == 0:
            raise ValueError("only dictionaries with a dict ID can be stored")
        data = encode(dictionary, kind)
        final = self.path(dict_id)
        os.makedirs(self.directory, exist_ok=True)
        temp = "%s.tmp-%d-%d" % (final, os.getpid(), threading.get_ident())
        with open(temp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            # link() fails if the name exists, so an existing dictionary is
            # never replaced, even by a racing writer.
            os.link(temp, final)
        except FileExistsError:
            existing = self.load(dict_id)
            if existing.dictionary.as_bytes() != dictionary.as_bytes():
                raise DictionaryError(
                    "a different dictionary already has ID %d" % dict_id,
                    final)
        finally:
            os.unlink(temp)
        _fsync_directory(self.directory)
        return dict_id

    def load(self, dict_id: int) -> StoredDictionary:
        """Read and verify one dictionary file; returns StoredDictionary."""
        path = self.path(dict_id)
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            raise DictionaryMissing("dictionary %d is missing" % dict_id,
                                    path)
        kind, dictionary = decode(data, path)
        if dictionary.dict_id() != dict_id:
            raise DictionaryCorrupt(
                "file holds dictionary %d, not %d"
                % (dictionary.dict_id(), dict_id), path)
        return StoredDictionary(dict_id, kind, dictionary)

    def get(self, dict_id: int) -> zstandard.ZstdCompressionDict:
        """The ``ZstdCompressionDict`` for ``dict_id``, loaded once."""
        try:
            return self._loaded[dict_id]
        except KeyError:
            pass
        with self._lock:
            if dict_id not in self._loaded:
                self._loaded[dict_id] = self.load(dict_id).dictionary
            return self._loaded[dict_id]


def _is_id(name: str) -> bool:
    """Whether a file name is one ``path()`` gives: decimal, no sign, no
    leading zero (``str.isdigit`` also takes "²")."""
    return name.isascii() and name.isdigit() and name == "%d" % int(name)


def _fsync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
