"""Exceptions raised by zstdwire.

Every failure to decode is one of these, never wrong data.  Adapters turn
them into their own user-facing errors (``abort:`` lines in Mercurial).
"""

from __future__ import annotations


class ZstdWireError(Exception):
    """Base class of every zstdwire error."""


class TrainingError(ZstdWireError):
    """Dictionary training was impossible with the given samples."""


class DictionaryError(ZstdWireError):
    """A dictionary file is unusable.  ``path`` names the file."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__("%s: %s" % (path, message))
        self.path = path


class DictionaryMissing(DictionaryError):
    """No dictionary file exists for a dict ID that a frame asks for."""


class DictionaryCorrupt(DictionaryError):
    """A dictionary file exists but fails its header or checksum check."""


class FrameError(ZstdWireError):
    """A compressed frame or stream is truncated or corrupt."""


class StreamTruncated(FrameError):
    """A stream ended inside a frame: a cut connection or a short file."""
