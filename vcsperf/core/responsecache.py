"""A disk cache of server responses, computed once and served many times.

A response is stored under a key that its caller derives from everything
that determines it (the repository's state, the request, the encoding), so
an entry is never stale: a change to the repository makes new keys and
leaves the old entries to eviction.  What this module guarantees:

- one writer per key (``flock`` on ``locks/KEY``, released by the kernel if
  the writer dies); others asking for the key meanwhile wait for it, up to
  a bound, and then read the entry; the writer computes the whole entry
  before sending any of it, so that no client holds the key;
- an entry appears only complete: it is written under ``tmp/`` and renamed
  into ``entries/`` after its trailer (length, production CPU seconds,
  BLAKE2b digest); a truncated, swapped or corrupt entry is found by that
  trailer before or while it is read and is never served whole;
- the total size stays under a bound: the least recently used entries
  (by the time each was last served) are removed after each write; only
  files named as this module names them are ever removed;
- anything wrong with the directory (missing, read-only, full) makes the
  cache step aside: the caller computes the response as if it had none.

It imports neither Mercurial nor dulwich: the Mercurial extension
``wirecache`` uses it for ``getbundle`` responses, ``gitbridge
pack-cache`` for the packs of ``git pack-objects``.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import stat
import struct
import time
import weakref

# For the annotations only: ``typing`` is a fifth of the start-up of
# ``gitbridge pack-cache``, which runs for every fetch.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import (
        BinaryIO,
        Callable,
        Dict,
        Iterable,
        Iterator,
        List,
        Optional,
        Tuple,
        Union,
    )

#: First bytes of every entry (2: the digest is keyed by the entry's key;
#: entries of version 1 are not entries, so they are made again).
HEAD_MAGIC = b"VCSPRC2\n"
#: Last bytes of every entry, after the trailer's fields.
TAIL_MAGIC = b"\nVCSPRC2"
#: Trailer: payload length, CPU seconds it took to produce, BLAKE2b-256
#: keyed by the entry's key, so that an entry is sound only under the key
#: it was written for (one renamed, copied between caches or listed under
#: another key by a shared store is a miss, never another key's answer).
_TRAILER = struct.Struct(">Qd32s")
TRAILER_SIZE = _TRAILER.size + len(TAIL_MAGIC)
#: Entries up to this size are read and checked whole before they are sent.
CHECK_WHOLE_UP_TO = 8 * 1024 * 1024
#: Every file counts at least one filesystem block towards the size bound,
#: so that tiny entries cannot make their number unbounded.
BLOCK = 4096
#: Read size when an entry is streamed.
READ_SIZE = 256 * 1024
#: How often a waiting request checks whether the writer has finished:
#: first after ``FIRST_POLL_SECONDS``, then twice as long each time up to
#: ``POLL_SECONDS`` (a small pull's response is written in tens of
#: milliseconds: a waiter polling every 50 ms could wait longer for the
#: entry than its writer took to make it).
FIRST_POLL_SECONDS = 0.005
POLL_SECONDS = 0.05
#: A temporary file whose writer holds no lock and that is older than
#: this is left over from a writer that died, and a lock file that old of
#: a key with no entry is idle; eviction removes both.
STALE_TMP_SECONDS = 60.0

_KEY = re.compile(r"[0-9a-f]{64}")
_TMP = re.compile(r"([0-9a-f]{64})\.[0-9]+\.[0-9a-f]{16}")
_SMALL_SUFFIX = ".small"
_LARGE_SUFFIX = ".large"
#: Markers: responses too small to be worth storing, or too large to fit.
MARKER_SUFFIXES = (_SMALL_SUFFIX, _LARGE_SUFFIX)

#: Counters kept in ``stats.json`` and ``stats.log``; those of a shared
#: store (``sharedresponsecache``) stay 0 on local disk alone.
COUNTERS = ("hits", "misses", "uncached", "bytes_saved", "cpu_saved",
            "store_hits", "store_misses", "store_errors", "store_bytes_read",
            "store_bytes_written")
#: One count in ``stats.log``: a magic, then each of ``COUNTERS``.
_COUNT_MAGIC = b"VCSC"
_COUNT = struct.Struct(">4s%dd" % len(COUNTERS))
#: ``stats.log`` is folded into ``stats.json`` once it is this long (about
#: 700 counts; what is past 16 times this is not counted): each count is one append, not a rewrite of ``stats.json``
#: (a rename over a file on ext4 cost 0.2 ms of CPU and 1.6 ms of wall
#: time under the lock that orders every response's count).
STATS_LOG_LIMIT = 64 * 1024


class CacheUnusable(OSError):
    """The cache directory cannot be used; the caller goes without it."""


class Entry:
    """A complete entry, open for reading: ``size`` payload bytes that took
    ``cpu`` seconds to produce."""

    def __init__(self, path: str, key: str, fh: BinaryIO, size: int,
                 cpu: float, digest: bytes) -> None:
        self.path = path
        self.key = key
        self.size = size
        self.cpu = cpu
        self._fh = fh
        self._digest = digest
        self._whole: Optional[bytes] = None

    def check_whole(self) -> bool:
        """Read and check a small entry before anything of it is sent."""
        self._fh.seek(len(HEAD_MAGIC))
        data = self._fh.read(self.size)
        if len(data) != self.size or _digest(self.key, data) != self._digest:
            return False
        self._whole = data
        return True

    def head(self, size: int) -> bytes:
        """The payload's first ``size`` bytes (all of a shorter one)."""
        if self._whole is not None:
            return self._whole[:size]
        return os.pread(self._fh.fileno(), min(size, self.size),
                        len(HEAD_MAGIC))

    def check_read(self) -> bool:
        """Check the whole entry before anything of it is sent (a Git pack
        or a shared store's download cut short cannot be taken back): a
        small one read into memory (``check_whole``), a larger one read
        through once more as it is sent."""
        if self._whole is not None:
            return True
        if self.size <= CHECK_WHOLE_UP_TO:
            return self.check_whole()
        self._fh.seek(len(HEAD_MAGIC))
        hasher = _hasher(self.key)
        left = self.size
        while left:
            data = self._fh.read(min(READ_SIZE, left))
            if not data:
                return False
            left -= len(data)
            hasher.update(data)
        return hasher.digest() == self._digest

    def chunks(self) -> Iterator[bytes]:
        """The payload; a large entry is checked as it is read, and one
        found corrupt at its end raises ``CorruptEntry`` instead of its
        last chunk, so that the receiver sees a cut response."""
        try:
            if self._whole is not None:
                yield self._whole
                return
            self._fh.seek(len(HEAD_MAGIC))
            hasher = _hasher(self.key)
            left = self.size
            pending = b""
            while left:
                data = self._fh.read(min(READ_SIZE, left))
                if not data:
                    raise CorruptEntry(self.path, "shorter than its trailer")
                left -= len(data)
                hasher.update(data)
                # Held back one chunk: the last is sent only once the
                # digest of the whole matches.
                if pending:
                    yield pending
                pending = data
            if hasher.digest() != self._digest:
                raise CorruptEntry(self.path, "digest mismatch")
            if pending:
                yield pending
        finally:
            self._fh.close()

    def close(self) -> None:
        self._fh.close()


class CorruptEntry(Exception):
    """An entry that failed its check while it was being sent."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__("%s: %s" % (path, why))
        self.path = path


def _hasher(key: str) -> "hashlib.blake2b":
    return hashlib.blake2b(digest_size=32, key=bytes.fromhex(key))


def _digest(key: str, data: bytes) -> bytes:
    hasher = _hasher(key)
    hasher.update(data)
    return hasher.digest()


def make_key(parts: List[bytes]) -> str:
    """The key for a list of byte strings (unambiguous: each is
    length-prefixed)."""
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(b"%d:" % len(part))
        hasher.update(part)
    return hasher.hexdigest()


class Filling:
    """The right to write one key's entry (its lock is held).

    ``fill(chunks, clock)`` produces the whole response into the entry,
    releases the key and returns the chunks to send.  The response is
    produced before any of it is sent, in the requester's own thread: no
    client, slow or gone, holds the key while others wait, and whatever
    the response is computed from is used only while the request runs.
    A response below ``min_size`` leaves a marker instead of an entry, so
    that later requests for the key compute it without waiting for one
    another; so does one that would not fit in ``max_size``, whose
    writing stops at the bound (the rest is sent as it is produced)."""

    def __init__(self, cache: "ResponseCache", key: str, lock_fd: int) -> None:
        self._cache = cache
        self.key = key
        # Also released when the filling is dropped unused.
        self._unlock = weakref.finalize(self, os.close, lock_fd)
        self.stored: Optional[bool] = None
        self.size = 0
        self.cpu = 0.0

    def release(self) -> None:
        self._unlock()

    def fill(self, chunks: Iterable[bytes],
             clock: Callable[[], float]) -> Iterator[bytes]:
        """Write ``chunks`` to the entry and return them to send.
        ``clock`` is the CPU clock whose time producing them is recorded
        with the entry (``cpu``, added to what it held).  Raises OSError
        when the cache's disk fails (nothing is stored: the caller
        computes the response without the cache), and whatever producing
        raises (nothing is stored either)."""
        cache = self._cache
        try:
            tmp_path, fd = cache._create_tmp(self.key)
        except OSError:
            self.release()
            raise
        committed = False
        rest = iter(chunks)
        overflow: Optional[bytes] = None
        try:
            hasher = _hasher(self.key)
            with os.fdopen(fd, "wb") as out:
                out.write(HEAD_MAGIC)
                start = clock()
                for data in rest:
                    if (len(HEAD_MAGIC) + self.size + len(data)
                            + TRAILER_SIZE > cache.max_size):
                        overflow = data
                        break
                    out.write(data)
                    hasher.update(data)
                    self.size += len(data)
                self.cpu += clock() - start
                digest = hasher.digest()
                if overflow is None:
                    out.write(_TRAILER.pack(self.size, self.cpu, digest))
                    out.write(TAIL_MAGIC)
            # Opened before the rename: eviction may remove the entry
            # while it is being sent.
            reader = open(tmp_path, "rb")
            entry = Entry(tmp_path, self.key, reader, self.size, self.cpu,
                          digest)
            if overflow is not None:
                cache._mark(self.key, _LARGE_SUFFIX)
                self.stored = False
                return _then(entry.chunks(), overflow, rest)
            if self.size < cache.min_size:
                entry.check_whole()
                reader.close()
                cache._mark(self.key, _SMALL_SUFFIX)
                self.stored = False
            else:
                committed = self.stored = cache._commit(self.key, tmp_path)
            return entry.chunks()
        finally:
            # A committed entry was moved away or copied: its temporary
            # name (unique) is gone or no longer needed.
            _unlink_quietly(tmp_path)
            self.release()
            if committed:
                cache.evict()


class ResponseCache:
    """The cache in directory ``root``: at most ``max_size`` bytes, entries
    of at least ``min_size`` bytes; a request waits at most ``wait``
    seconds for another one writing the entry it wants."""

    def __init__(self, root: str, max_size: int, min_size: int,
                 wait: float) -> None:
        self.root = root
        self.max_size = max_size
        self.min_size = min_size
        self.wait = wait

    # Paths --------------------------------------------------------------

    def _entry_path(self, key: str) -> str:
        return os.path.join(self.root, "entries", key[:2], key)

    def entry_path(self, key: str) -> str:
        """Where the entry of ``key`` is (or would be) on local disk."""
        return self._entry_path(key)

    def _dir(self, *parts: str) -> str:
        """The directory ``parts`` of the cache, made if missing.  A
        symbolic link planted as one of its directories is replaced by a
        directory (never followed: what it points at is outside the
        cache); anything else there makes the cache unusable."""
        path = self.root
        try:
            os.makedirs(path, exist_ok=True)
            for part in parts:
                path = os.path.join(path, part)
                _make_real_dir(path)
        except OSError as err:
            raise CacheUnusable("%s: %s" % (path, err.strerror)) from err
        return path

    def _linked(self, *parts: str) -> bool:
        """Whether a directory of the cache on the way to ``parts`` is a
        symbolic link (or missing)."""
        path = self.root
        for part in parts:
            path = os.path.join(path, part)
            try:
                if not stat.S_ISDIR(os.lstat(path).st_mode):
                    return True
            except OSError:
                return True
        return False

    # Reading ------------------------------------------------------------

    def lookup(self, key: str) -> Optional[Entry]:
        """The complete entry for ``key``, marked as just used, or None.
        An entry that fails its checks is removed."""
        path = self._entry_path(key)
        if self._linked("entries", key[:2]):
            return None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return None
        fh = os.fdopen(fd, "rb")
        entry = self._check(path, key, fh)
        if entry is None:
            fh.close()
            remove_if_ours(path)
            return None
        if entry.size <= CHECK_WHOLE_UP_TO and not entry.check_whole():
            entry.close()
            remove_if_ours(path)
            return None
        try:
            os.utime(fd)
        except OSError:
            pass  # a read-only cache still serves; its LRU order is older
        return entry

    @staticmethod
    def _check(path: str, key: str, fh: BinaryIO) -> Optional[Entry]:
        try:
            st = os.fstat(fh.fileno())
            if st.st_size < len(HEAD_MAGIC) + TRAILER_SIZE:
                return None
            if fh.read(len(HEAD_MAGIC)) != HEAD_MAGIC:
                return None
            fh.seek(st.st_size - TRAILER_SIZE)
            trailer = fh.read(TRAILER_SIZE)
        except OSError:
            return None
        if trailer[_TRAILER.size:] != TAIL_MAGIC:
            return None
        size, cpu, digest = _TRAILER.unpack(trailer[:_TRAILER.size])
        if len(HEAD_MAGIC) + size + TRAILER_SIZE != st.st_size:
            return None
        return Entry(path, key, fh, size, cpu, digest)

    def _is_marked(self, key: str) -> bool:
        path = self._entry_path(key)
        return any(os.path.lexists(path + suffix)
                   for suffix in MARKER_SUFFIXES)

    # Writing ------------------------------------------------------------

    def acquire(self, key: str) -> Union[Entry, "Filling", None]:
        """For a key that ``lookup`` did not find: an ``Entry`` (another
        request wrote it while this one waited), a ``Filling`` (this
        request writes it), or None (compute it without the cache: it is
        below the size worth caching or above the bound, its writer took longer than
        ``wait``, or the cache is unusable)."""
        if self._is_marked(key):
            return None
        try:
            lock_path = os.path.join(self._dir("locks", key[:2]), key)
            lock_fd = os.open(lock_path,
                              os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        except OSError:
            return None
        deadline = time.monotonic() + self.wait
        waited = False
        delay = FIRST_POLL_SECONDS
        try:
            while True:
                try:
                    fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as err:
                    if err.errno not in (errno.EAGAIN, errno.EACCES):
                        raise
                if time.monotonic() >= deadline:
                    os.close(lock_fd)
                    return None
                waited = True
                time.sleep(delay)
                delay = min(2 * delay, POLL_SECONDS)
        except OSError:
            os.close(lock_fd)
            return None
        entry = self._found_locked(key, waited)
        if entry is not None or self._is_marked(key):
            os.close(lock_fd)
            return entry
        return self._filling(key, lock_fd)

    def _found_locked(self, key: str, waited: bool) -> Optional[Entry]:
        """With the key's lock held: the entry a previous holder wrote
        meanwhile (it may have, or died, whether or not this request
        ``waited`` for the lock)."""
        return self.lookup(key)

    def _filling(self, key: str, lock_fd: int) -> Filling:
        return Filling(self, key, lock_fd)

    def _create_tmp(self, key: str) -> Tuple[str, int]:
        tmp_dir = self._dir("tmp")
        path = os.path.join(tmp_dir, "%s.%d.%s" % (key, os.getpid(),
                                                    os.urandom(8).hex()))
        return path, os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                             0o666)

    def _commit(self, key: str, tmp_path: str) -> bool:
        """Store the complete entry written at ``tmp_path``; whether it
        is stored."""
        self._dir("entries", key[:2])
        os.rename(tmp_path, self._entry_path(key))
        return True

    def _mark(self, key: str, suffix: str) -> None:
        marker = os.path.join(self._dir("entries", key[:2]), key + suffix)
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW,
                         0o666))
        self.evict()

    # Eviction -----------------------------------------------------------

    def scan(self) -> List[Tuple[float, int, str]]:
        """(last use, size counted, path) of every entry and marker."""
        found = []
        top = os.path.join(self.root, "entries")
        try:
            subdirs = [d for d in os.scandir(top)
                       if d.is_dir(follow_symlinks=False)
                       and re.fullmatch(r"[0-9a-f]{2}", d.name)]
        except OSError:
            return []
        for sub in subdirs:
            try:
                files = list(os.scandir(sub.path))
            except OSError:
                continue
            for item in files:
                name = item.name
                for suffix in MARKER_SUFFIXES:
                    if name.endswith(suffix):
                        name = name[:-len(suffix)]
                if not _KEY.fullmatch(name):
                    continue
                try:
                    st = item.stat(follow_symlinks=False)
                except OSError:
                    continue
                found.append((st.st_mtime, max(st.st_size, BLOCK), item.path))
        return found

    def evict(self) -> None:
        """Remove the least recently used entries until the total is at
        most ``max_size``, and temporary files of dead writers.  One
        process evicts at a time; another that finds it busy skips."""
        try:
            fd = os.open(os.path.join(self.root, "evict.lock"),
                         os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        except OSError:
            return
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return
            self._remove_linked_dirs()
            entries = self.scan()
            total = sum(size for _, size, _ in entries)
            entries.sort()
            for _, size, path in entries:
                if total <= self.max_size:
                    break
                if remove_if_ours(path):
                    total -= size
            self._remove_dead_tmp()
            self._remove_idle_locks()
        finally:
            os.close(fd)

    def _remove_linked_dirs(self) -> None:
        """Symbolic links planted as the cache's directories: the links
        go (never what they point at), so that nothing is written through
        them and no entry escapes the bound."""
        for name in ("entries", "locks", "tmp"):
            top = os.path.join(self.root, name)
            try:
                if stat.S_ISLNK(os.lstat(top).st_mode):
                    remove_if_ours(top)
                    continue
                subdirs = list(os.scandir(top))
            except OSError:
                continue
            for sub in subdirs:
                if sub.is_symlink() and re.fullmatch(r"[0-9a-f]{2}",
                                                     sub.name):
                    remove_if_ours(sub.path)

    def _remove_idle_locks(self) -> None:
        """Lock files of keys with no entry, that nobody holds and nobody
        made for a while: without this, every key ever asked for would
        leave one.  (A request that opened one just before it goes may
        write its key beside another that made a new one: the key is then
        computed twice, and stored whole either way.)"""
        top = os.path.join(self.root, "locks")
        try:
            subdirs = [d.path for d in os.scandir(top)
                       if d.is_dir(follow_symlinks=False)]
        except OSError:
            return
        now = time.time()
        for sub in subdirs:
            try:
                items = list(os.scandir(sub))
            except OSError:
                continue
            for item in items:
                if not _KEY.fullmatch(item.name):
                    continue
                try:
                    st = item.stat(follow_symlinks=False)
                except OSError:
                    continue
                if (not stat.S_ISREG(st.st_mode)
                        or now - st.st_mtime < STALE_TMP_SECONDS
                        or os.path.lexists(self._entry_path(item.name))):
                    continue
                try:
                    fd = os.open(item.path, os.O_RDWR | os.O_NOFOLLOW)
                except OSError:
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    os.unlink(item.path)
                except OSError:
                    pass
                finally:
                    os.close(fd)

    def _remove_dead_tmp(self) -> None:
        tmp_dir = os.path.join(self.root, "tmp")
        try:
            items = list(os.scandir(tmp_dir))
        except OSError:
            return
        now = time.time()
        for item in items:
            found = _TMP.fullmatch(item.name)
            if not found:
                continue
            try:
                if now - item.stat(follow_symlinks=False).st_mtime \
                        < STALE_TMP_SECONDS:
                    continue
            except OSError:
                continue
            if not self._writer_alive(found.group(1)):
                remove_if_ours(item.path)

    def _writer_alive(self, key: str) -> bool:
        path = os.path.join(self.root, "locks", key[:2], key)
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return False
        except OSError:
            return True
        finally:
            os.close(fd)

    # Counters -----------------------------------------------------------

    def count(self, **add: float) -> None:
        """Add to the counters: one record appended to ``stats.log``,
        under a shared lock; a log grown to ``STATS_LOG_LIMIT`` is folded
        into ``stats.json`` under the exclusive lock.  A failure to count
        never fails a request."""
        record = _COUNT.pack(_COUNT_MAGIC,
                             *(float(add.get(name, 0)) for name in COUNTERS))
        try:
            lock_fd = os.open(os.path.join(self._dir(), "stats.lock"),
                              os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        except OSError:
            return
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_SH)
            log_fd = _open_stats_log(os.path.join(self.root, "stats.log"))
            if log_fd is None:
                return
            try:
                if os.fstat(log_fd).st_size % _COUNT.size:
                    # Not whole records (not ours): folded away first, so
                    # that this record is read where records are.
                    fcntl.flock(lock_fd, fcntl.LOCK_EX)
                    self._fold()
                os.write(log_fd, record)
                size = os.fstat(log_fd).st_size
            finally:
                os.close(log_fd)
            if size >= STATS_LOG_LIMIT:
                fcntl.flock(lock_fd, fcntl.LOCK_EX)
                self._fold()
        except OSError:
            pass
        finally:
            os.close(lock_fd)

    def _fold(self) -> None:
        """With the exclusive lock: ``stats.log`` added to ``stats.json``
        (replaced by write-then-rename), then emptied."""
        counters = self._read_counters()
        # O_EXCL under an unguessable name: a link planted there is never
        # followed, nor its target written.
        tmp = os.path.join(self.root, "stats.json.%d.%s.tmp"
                           % (os.getpid(), os.urandom(8).hex()))
        tmp_fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                         | os.O_NOFOLLOW, 0o666)
        try:
            with os.fdopen(tmp_fd, "w") as fh:
                json.dump(counters, fh)
            os.rename(tmp, os.path.join(self.root, "stats.json"))
        except OSError:
            _unlink_quietly(tmp)
            raise
        log_fd = _open_stats_log(os.path.join(self.root, "stats.log"))
        if log_fd is not None:
            try:
                os.ftruncate(log_fd, 0)
            finally:
                os.close(log_fd)

    def counters(self) -> Dict[str, float]:
        """The counters; a missing or unreadable ``stats.json`` counts as
        zeros, and so does a record of ``stats.log`` that is not one (they
        hold figures, nothing a response depends on)."""
        try:
            lock_fd = os.open(os.path.join(self.root, "stats.lock"),
                              os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return self._read_counters()
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_SH)
            return self._read_counters()
        except OSError:
            return self._read_counters()
        finally:
            os.close(lock_fd)

    def _read_counters(self) -> Dict[str, float]:
        counters: Dict[str, float] = {name: 0 for name in COUNTERS}
        try:
            with open(os.path.join(self.root, "stats.json"), "rb") as fh:
                saved = json.loads(fh.read(65536))
        except (OSError, ValueError):
            saved = None
        if isinstance(saved, dict):
            for name in COUNTERS:
                value = saved.get(name)
                if isinstance(value, (int, float)) and value >= 0:
                    counters[name] = value
        log_fd = _open_stats_log(os.path.join(self.root, "stats.log"),
                                 os.O_RDONLY)
        if log_fd is None:
            return counters
        try:
            with os.fdopen(log_fd, "rb") as fh:
                # Counts appended while a fold waited for the lock are
                # past the limit; a planted file's size is not.
                data = fh.read(16 * STATS_LOG_LIMIT)
        except OSError:
            return counters
        for at in range(0, len(data) - _COUNT.size + 1, _COUNT.size):
            magic, *values = _COUNT.unpack_from(data, at)
            if magic != _COUNT_MAGIC or not all(
                    0 <= value < float("inf") for value in values):
                continue
            for name, value in zip(COUNTERS, values):
                counters[name] += value
        return counters


def _open_stats_log(path: str, flags: int = os.O_WRONLY | os.O_APPEND
                    | os.O_CREAT) -> Optional[int]:
    """A descriptor of ``stats.log``, or None when what is there is not a
    file of the cache's own: a symbolic link, a FIFO or device, or a hard
    link to a file elsewhere (never written through nor read)."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK, 0o666)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
    except OSError:
        st = None
    if st is None or not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        return None
    return fd


def _then(written: Iterator[bytes], overflow: bytes,
          rest: Iterator[bytes]) -> Iterator[bytes]:
    """What was written before the bound, then the rest as produced."""
    yield from written
    yield overflow
    yield from rest


def _make_real_dir(path: str) -> None:
    """Make ``path`` a directory; a symbolic link there is replaced."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if stat.S_ISDIR(st.st_mode):
            return
        if not stat.S_ISLNK(st.st_mode):
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
        os.unlink(path)
    try:
        os.mkdir(path, 0o777)
    except FileExistsError:
        # Made by another process meanwhile; a link made meanwhile fails
        # here.
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            raise


def remove_if_ours(path: str) -> bool:
    """Remove ``path`` if it is a regular file or a symbolic link (the
    link, never what it points to); a directory or anything else planted
    under our name is left alone."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
        return False
    return _unlink_quietly(path)


def _unlink_quietly(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except OSError:
        return False
