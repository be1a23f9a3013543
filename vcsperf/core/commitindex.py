"""A persistent index from lookup keys (commit IDs, reviews, bugs) to
revisions: opened with ``mmap``, nothing parsed at open, a lookup reads
O(log n) entries.  Mercurial and Git adapters feed it ``(kind, key, rev)``
triples; it imports neither.

Files, in one directory, all named after ``name``:

- ``NAME``, the docket: which table and tail files are current and how
  many entries of each count, the rules fingerprint, and ``covers``, the
  adapter's record of what was indexed (Mercurial: how many changesets
  and the revisions of their heads; Git: the ref tips, and whether every
  indexed commit is reachable).  Small, rewritten whole by write-then-rename, so a
  reader sees the old docket or the new one, never a mix.
- ``NAME-UID.table``: entries sorted, searched by bisection.
- ``NAME-UID.tail``: entries appended since the table was written,
  searched linearly; once it holds more than ``TAIL_LIMIT`` entries, the
  next update writes a new table of both (compaction).
- ``NAME-UID.nodes``: the node of each revision number, fixed width,
  appended.

An entry is 12 bytes: the first 8 bytes of the BLAKE2b hash of kind and
key, then the revision (big-endian, so byte order is numeric order).  Two
keys of one repository share a hash with a chance of about n / 2**64 per
lookup (n keys); the Git adapter checks each candidate against its
message only when the index may hold commits no ref reaches.

Appends go past every length a docket names, so readers of an older
docket read what they read before.  Each data file starts with a header
(magic, format version, entry width, its own uid, CRC-32 of the header;
the table's also carries the CRC-32 of its entries, which ``verify``
checks);
a header that does not check out, or a file shorter than the docket says,
raises ``CorruptIndex``.  Callers rebuild on it, never trust.
"""

from __future__ import annotations

import bisect
import mmap
import os
import stat
import struct
import zlib

try:
    # hashlib's own BLAKE2b, without hashlib's import of OpenSSL (a tenth
    # of a Git lookup's time).
    from _blake2 import blake2b
except ImportError:  # a Python without the module: the same function
    from hashlib import blake2b

# For the annotations only, so a lookup imports no typing machinery.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    #: ``(uid, count)`` of a data file, as a docket names it.
    FileRef = tuple[bytes, int]

FORMAT = 2
ENTRY = struct.Struct(">8sI")
#: Past this many entries the tail is merged into a new table.
TAIL_LIMIT = 4096
_DOCKET_MAGIC = b"VCSCIDX\n"
# magic, version, table uid, table count, tail uid, tail count, nodes uid,
# nodes count, node width, rules length, covers length; CRC-32 of all.
_DOCKET = struct.Struct(">8sI16sQ16sQ16sQIII")
_DATA_MAGIC = {"table": b"CIDXTABL", "tail": b"CIDXTAIL",
               "nodes": b"CIDXNODE"}
# magic, version, record width, CRC-32 of the records (table only), the
# file's uid (so a file copied over it from another index is not read as
# its own); CRC-32 of those five fields.
_HEADER = struct.Struct(">8sIII16s")
_HEADER_SIZE = _HEADER.size + 4
# A docket holds a few numbers, the rules and the covers (Git: a line per
# ref): far larger is no docket.
_DOCKET_LIMIT = 256 << 20


class CorruptIndex(Exception):
    """The index is unreadable, or not in this format: rebuild it."""


def key_hash(kind: str, key: str) -> bytes:
    """The 8 bytes an entry stores for ``(kind, key)``."""
    return blake2b(("%s\0%s" % (kind, key)).encode(
        "utf-8", "surrogateescape"), digest_size=8).digest()


class Docket:
    """What one version of the index is made of.  ``table``, ``tail`` and
    ``nodes`` are ``(uid, count)``; a uid of empty bytes means no file."""

    def __init__(self, table: FileRef, tail: FileRef, nodes: FileRef,
                 node_width: int, rules: bytes, covers: bytes) -> None:
        self.table, self.tail, self.nodes = table, tail, nodes
        self.node_width, self.rules, self.covers = node_width, rules, covers

    def pack(self) -> bytes:
        body = _DOCKET.pack(
            _DOCKET_MAGIC, FORMAT, self.table[0], self.table[1],
            self.tail[0], self.tail[1], self.nodes[0], self.nodes[1],
            self.node_width, len(self.rules), len(self.covers))
        data = body + self.rules + self.covers
        return data + struct.pack(">I", zlib.crc32(data))

    @classmethod
    def unpack(cls, data: bytes) -> Docket:
        if len(data) < _DOCKET.size + 4 or \
                struct.unpack(">I", data[-4:])[0] != zlib.crc32(data[:-4]):
            raise CorruptIndex("bad docket checksum")
        (magic, version, table_uid, table_count, tail_uid, tail_count,
         nodes_uid, nodes_count, node_width, rules_length,
         covers_length) = _DOCKET.unpack_from(data)
        if magic != _DOCKET_MAGIC or version != FORMAT:
            raise CorruptIndex("not a version %d docket" % FORMAT)
        if _DOCKET.size + rules_length + covers_length + 4 != len(data):
            raise CorruptIndex("bad docket length")
        rules = data[_DOCKET.size:_DOCKET.size + rules_length]
        covers = data[_DOCKET.size + rules_length:-4]
        return cls((_uid(table_uid), table_count), (_uid(tail_uid), tail_count),
                   (_uid(nodes_uid), nodes_count), node_width, rules, covers)


def _uid(raw: bytes) -> bytes:
    """A data file's uid: hex digits (its name's part), or empty."""
    uid = raw.rstrip(b"\0")
    if uid.strip(b"0123456789abcdef"):
        raise CorruptIndex("bad uid in the docket")
    return uid


def _new_uid() -> bytes:
    return os.urandom(8).hex().encode("ascii")


def read_docket(directory: str, name: str) -> Docket | None:
    """The current docket, or None when there is no index."""
    try:
        fd = _open_regular(os.path.join(directory, name), os.O_RDONLY)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fd).st_size
        if size > _DOCKET_LIMIT:
            raise CorruptIndex("the docket is larger than %d bytes"
                               % _DOCKET_LIMIT)
        return Docket.unpack(fh.read(size + 1))


def _open_regular(path: str, flags: int, mode: int = 0o666) -> int:
    """A descriptor of the regular file at ``path``, never of what a
    symbolic link there points to, nor of a directory, device or FIFO
    (which blocks no open: ``O_NONBLOCK``), which raise ``CorruptIndex``;
    ``FileNotFoundError`` when there is nothing."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK
                     | getattr(os, "O_CLOEXEC", 0), mode)
    except FileNotFoundError:
        raise
    except OSError as err:
        # ELOOP (a symbolic link), EISDIR (opened for writing), ENXIO
        # (a FIFO without a reader), EACCES ...
        raise CorruptIndex("cannot open %s: %s" % (
            os.path.basename(path), err.strerror))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise CorruptIndex("%s is not a regular file" % os.path.basename(path))
    return fd


def _path(directory: str, name: str, uid: bytes, part: str) -> str:
    return os.path.join(directory, "%s-%s.%s" % (name, uid.decode(), part))


class _Records:
    """The records of one data file, mapped, of which the docket counts
    ``count``."""

    def __init__(self, directory: str, name: str, part: str, uid: bytes,
                 count: int, width: int) -> None:
        self.count, self.width = count, width
        self.map: mmap.mmap | None = None
        if not uid:
            if count:
                raise CorruptIndex("%s entries without a file" % part)
            return
        with os.fdopen(_open_regular(_path(directory, name, uid, part),
                                     os.O_RDONLY), "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size < _HEADER_SIZE + count * width:
                raise CorruptIndex("%s file is truncated" % part)
            self.map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        header = self.map[:_HEADER_SIZE]
        magic, version, record_width, self.crc, own_uid = \
            _HEADER.unpack_from(header)
        if struct.unpack(">I", header[-4:])[0] != zlib.crc32(header[:-4]) \
                or magic != _DATA_MAGIC[part] or version != FORMAT \
                or record_width != width or own_uid.rstrip(b"\0") != uid:
            raise CorruptIndex("bad %s header" % part)

    def record(self, position: int) -> bytes:
        start = _HEADER_SIZE + position * self.width
        assert self.map is not None  # a file with records is mapped
        return self.map[start:start + self.width]

    def data(self) -> bytes:
        if self.map is None:
            return b""
        return self.map[_HEADER_SIZE:_HEADER_SIZE + self.count * self.width]

    def close(self) -> None:
        if self.map is not None:
            self.map.close()


class Index:
    """An open index.  ``Index(directory, name)`` raises
    ``FileNotFoundError`` when there is none and ``CorruptIndex`` when it
    cannot be used."""

    def __init__(self, directory: str, name: str) -> None:
        self.directory, self.name = directory, name
        # A writer may replace the files between the docket and the
        # opening; then the docket read again names the new ones.
        for attempt in (1, 2):
            docket = read_docket(directory, name)
            if docket is None:
                raise FileNotFoundError(os.path.join(directory, name))
            self.docket = docket
            try:
                self._open()
                return
            except FileNotFoundError:
                if attempt == 2:
                    raise CorruptIndex("the index files are gone")

    def _open(self) -> None:
        docket = self.docket
        self.table = _Records(self.directory, self.name, "table",
                              *docket.table, ENTRY.size)
        self.tail = _Records(self.directory, self.name, "tail", *docket.tail,
                             ENTRY.size)
        self.nodes = _Records(self.directory, self.name, "nodes",
                              *docket.nodes, docket.node_width)

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for records in (self.table, self.tail, self.nodes):
            records.close()

    @property
    def covers(self) -> bytes:
        return self.docket.covers

    def lookup(self, kind: str, key: str) -> list[int]:
        """The revisions indexed for ``(kind, key)``, sorted (what a hash
        collision or damaged entries may add to)."""
        wanted = key_hash(kind, key)
        table = self.table
        low, high = 0, table.count
        while low < high:
            middle = (low + high) // 2
            if table.record(middle)[:8] < wanted:
                low = middle + 1
            else:
                high = middle
        revs = []
        while low < table.count:
            digest, rev = ENTRY.unpack(table.record(low))
            if digest != wanted:
                break
            revs.append(rev)
            low += 1
        tail = self.tail.data()
        position = tail.find(wanted)
        while position >= 0:
            if position % ENTRY.size == 0:
                revs.append(ENTRY.unpack_from(tail, position)[1])
            position = tail.find(wanted, position + 1)
        return sorted(set(revs))

    def node(self, rev: int) -> bytes:
        """The node indexed as revision ``rev``, as bytes."""
        if not 0 <= rev < self.nodes.count:
            raise CorruptIndex("revision %d has no node" % rev)
        return self.nodes.record(rev)

    def node_count(self) -> int:
        return self.nodes.count

    def verify(self) -> None:
        """Read everything: raise ``CorruptIndex`` when the table's
        entries do not match their checksum or are out of order."""
        data = self.table.data()
        if self.table.map is not None and zlib.crc32(data) != self.table.crc:
            raise CorruptIndex("table entries do not match their checksum")
        if any(data[i:i + ENTRY.size] > data[i + ENTRY.size:i + 2 * ENTRY.size]
               for i in range(0, len(data) - ENTRY.size, ENTRY.size)):
            raise CorruptIndex("table entries out of order")


def _header(part: str, uid: bytes, width: int, crc: int = 0) -> bytes:
    fields = _HEADER.pack(_DATA_MAGIC[part], FORMAT, width, crc, uid)
    return fields + struct.pack(">I", zlib.crc32(fields))


def _write_new(directory: str, name: str, part: str, width: int,
               records: bytes, crc: int = 0) -> bytes:
    """A new data file of ``records`` (bytes), written then renamed;
    its uid."""
    uid = _new_uid()
    path = _path(directory, name, uid, part)
    _atomic_write(path, _header(part, uid, width, crc) + records)
    return uid


def _atomic_write(path: str, data: bytes) -> None:
    # A new name (O_EXCL), so nothing already there is written through.
    temporary = "%s.tmp-%s" % (path, _new_uid().decode())
    fd = _open_regular(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def _append(directory: str, name: str, part: str, uid: bytes, count: int,
            width: int, records: bytes) -> None:
    """``records`` appended after the ``count`` that a docket names (what
    a crashed writer left past them is overwritten)."""
    with os.fdopen(_open_regular(_path(directory, name, uid, part),
                                 os.O_RDWR), "r+b") as fh:
        fh.seek(_HEADER_SIZE + count * width)
        fh.write(records)
        fh.truncate()


def _pack(triples: Iterable[tuple[str, str, int]]) -> list[bytes]:
    return [ENTRY.pack(key_hash(kind, key), rev) for kind, key, rev in triples]


def write(directory: str, name: str,
          triples: Iterable[tuple[str, str, int]], covers: bytes,
          rules: bytes, base: Index | None = None,
          nodes: Iterable[bytes] = (), node_width: int = 0,
          tail_limit: int = TAIL_LIMIT) -> Docket:
    """Index ``triples`` (``(kind, key, rev)``) and write a docket with
    ``covers`` and ``rules`` (bytes).  With ``base`` (an open ``Index`` with
    the same rules) the entries are added to it, else the index starts from
    nothing.  ``nodes``: the nodes of the new revisions, in order,
    each ``node_width`` bytes.  Returns the new docket.

    The caller holds the repository's lock: one writer at a time.
    """
    os.makedirs(directory, exist_ok=True)
    new = _pack(triples)
    old = base.docket if base is not None else None
    if old is not None and old.node_width != node_width and \
            old.nodes[1]:
        raise CorruptIndex("node width changed")
    if old is None or old.tail[1] + len(new) > tail_limit:
        if base is None:
            data = b"".join(sorted(set(new)))
        else:
            # The table is sorted already: the few entries of the tail
            # and the new ones go into it, never the whole table into
            # Python objects (a million changesets hold millions of
            # entries, and this runs every ``tail_limit`` of them).
            data = _merged(base.table.data(),
                           sorted(set(_split(base.tail.data())) | set(new)))
        table = (_write_new(directory, name, "table", ENTRY.size, data,
                            zlib.crc32(data)), len(data) // ENTRY.size)
        tail = (_write_new(directory, name, "tail", ENTRY.size, b""), 0)
    else:
        table = old.table
        _append(directory, name, "tail", old.tail[0], old.tail[1],
                ENTRY.size, b"".join(new))
        tail = (old.tail[0], old.tail[1] + len(new))
    nodes = list(nodes)
    if old is not None and old.nodes[0]:
        _append(directory, name, "nodes", old.nodes[0], old.nodes[1],
                node_width, b"".join(nodes))
        node_file = (old.nodes[0], old.nodes[1] + len(nodes))
    elif node_width:
        node_file = (_write_new(directory, name, "nodes", node_width,
                                b"".join(nodes)), len(nodes))
    else:
        node_file = (b"", 0)
    docket = Docket(table, tail, node_file, node_width, rules, covers)
    _atomic_write(os.path.join(directory, name), docket.pack())
    _remove_unnamed(directory, name, docket)
    return docket


class _Sorted:
    """The entries of a sorted table's bytes, as a sequence ``bisect``
    searches without splitting them."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data) // ENTRY.size

    def __getitem__(self, position: int) -> bytes:
        start = position * ENTRY.size
        return self.data[start:start + ENTRY.size]


def _merged(table: bytes, extra: list[bytes]) -> bytes:
    """The sorted, distinct entries of ``table`` (sorted, distinct
    entries as bytes) and ``extra`` (a sorted list of distinct ones)."""
    entries = _Sorted(table)
    pieces, done = [], 0
    for entry in extra:
        position = bisect.bisect_left(entries, entry, done)
        pieces.append(table[done * ENTRY.size:position * ENTRY.size])
        done = position
        if entries[position] != entry:  # (past the end: b"")
            pieces.append(entry)
    pieces.append(table[done * ENTRY.size:])
    return b"".join(pieces)


def _split(data: bytes) -> list[bytes]:
    return [data[i:i + ENTRY.size] for i in range(0, len(data), ENTRY.size)]


def _remove_unnamed(directory: str, name: str, docket: Docket) -> None:
    """Remove the data files the docket no longer names (a reader that has
    one open keeps it; one that has yet to open it reads the docket
    again)."""
    keep = {os.path.basename(_path(directory, name, uid, part))
            for uid, part in ((docket.table[0], "table"),
                              (docket.tail[0], "tail"),
                              (docket.nodes[0], "nodes")) if uid}
    prefix = name + "-"
    for entry in os.listdir(directory):
        if entry.startswith(prefix) and entry not in keep and \
                entry.rsplit(".", 1)[-1] in _DATA_MAGIC:
            try:
                os.unlink(os.path.join(directory, entry))
            except OSError:
                # Gone, or a directory: either way never read again.
                pass


def remove(directory: str, name: str) -> None:
    """Remove the index (the docket first, so no reader finds half)."""
    try:
        os.unlink(os.path.join(directory, name))
    except FileNotFoundError:
        return
    _remove_unnamed(directory, name, Docket((b"", 0), (b"", 0), (b"", 0), 0,
                                            b"", b""))
