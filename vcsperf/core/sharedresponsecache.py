"""The response cache of ``responsecache`` shared by several servers
through S3-compatible object storage, so that a fleet of servers behind a
load balancer computes each response once.

Entries are objects ``PREFIX/entries/KEY`` in the format of the disk
cache's entries (the payload between magic bytes, its length, CPU seconds
and BLAKE2b digest in a trailer).  The local directory keeps what belongs
to one server: the key locks (one writer per key in this server),
temporary files, markers of responses not worth storing, the counters.
What this module adds to the disk cache's guarantees:

- an object is downloaded whole to a temporary file and checked against
  its digest before any of it is sent: a truncated, corrupt or oversized
  object is a miss (the response is computed and the object replaced),
  never served;
- one writer per key across servers, as far as the store allows: the
  writer first creates ``PREFIX/writing/KEY`` with a conditional PUT
  (``If-None-Match: *``); another server that finds it there waits for
  the entry (at most ``wait`` seconds, then computes the response itself),
  and takes over a marker older than ``wait`` plus ``timeout`` seconds
  (its writer died);
- every request to the store runs in a thread of its own and is given up
  after ``timeout`` seconds, however the server stalls or trickles; a
  store that fails or lies (errors, stalls, wrong lengths) is left alone
  for ``BACKOFF_SECONDS`` by every process of this server, with one
  warning (``warn``), and the responses are computed here meanwhile;
- the total size of the entries stays under ``max_size``: each writer
  lists the prefix after its upload and deletes the oldest entries
  (oldest written first: a GET does not change an object's time) and
  markers of dead writers; only names of the form this module writes are
  ever deleted.
"""

import email.utils
import os
import re
import threading
import time
from typing import (
    Any,
    BinaryIO,
    Callable,
    Dict,
    List,
    Optional,
    Set,
    Tuple,
    TypeVar,
)

from vcsperf.core import bundlestore
from vcsperf.core.responsecache import (
    READ_SIZE,
    Entry,
    Filling,
    ResponseCache,
    remove_if_ours,
)

#: Seconds the store is left alone after one of its requests failed.
BACKOFF_SECONDS = 30.0
#: How often a request waiting for another server's writer looks for the
#: entry.
REMOTE_POLL_SECONDS = 0.25
#: Pages of a listing read by one eviction (1,000 objects each).
LIST_PAGES = 100
ENTRIES = "entries/"
WRITING = "writing/"
#: The file whose time says when the store last failed.
FAILED_FILE = "store-failed"

_KEY = re.compile(r"[0-9a-f]{64}\Z")
_CLIENTS: Dict[Tuple[Any, ...], bundlestore.Client] = {}
_CLIENTS_LOCK = threading.Lock()
_Result = TypeVar("_Result")


class StoreFailed(Exception):
    """A request to the store failed, took too long, or was answered with
    something that is not an entry."""


class NotAnEntry(StoreFailed):
    """What the store sent for an entry is not one (its length, its
    digest): a miss, and the entry is written again."""


class _Missing(Exception):
    """The store has no such object."""


class _Taken(Exception):
    """A conditional PUT found the object there already."""


def _client(destination: bundlestore.Destination,
            timeout: float) -> bundlestore.Client:
    """One client per store and timeout in a process (boto3's clients
    are thread-safe, and slow to make)."""
    key = (destination.bucket, destination.region, destination.endpoint,
           destination.profile, timeout)
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = _CLIENTS[key] = destination.client(
                connect_timeout=timeout, read_timeout=timeout, attempts=1)
    return client


class _SharedFilling(Filling):
    """A filling that also gives up this server's ``writing`` marker of
    the key when it is released."""

    def release(self) -> None:
        super().release()
        cache = self._cache
        if isinstance(cache, SharedResponseCache):
            cache.stop_writing(self.key)


class SharedResponseCache(ResponseCache):
    """Entries in ``destination`` (its bucket and prefix), at most
    ``max_size`` bytes of them; this server's locks, temporary files and
    counters in the directory ``root``.  ``timeout`` bounds each request
    to the store (seconds); ``warn`` is given one line when the store
    fails."""

    def __init__(self, root: str, max_size: int, min_size: int,
                 wait: float, destination: bundlestore.Destination,
                 timeout: float, warn: Callable[[str], None]) -> None:
        super().__init__(root, max_size, min_size, wait)
        self.destination = destination
        self.timeout = timeout
        self._warn = warn
        #: Keys whose ``writing`` marker this process created.
        self._writing: Set[str] = set()
        self._writing_lock = threading.Lock()
        #: Why the last listing of the store failed, if it did.
        self.scan_error: Optional[str] = None

    @property
    def url(self) -> str:
        return "s3://%s/%s" % (self.destination.bucket,
                               self.destination.prefix)

    # Requests, bounded ---------------------------------------------------

    def _call(self, what: str,
              request: Callable[[bundlestore.Client, threading.Event],
                                _Result]) -> _Result:
        """``request(client, cancelled)`` in a thread of its own; raises
        StoreFailed when it fails or is still running after ``timeout``
        seconds (it is then told to stop through ``cancelled``, and its
        reads end at the client's own timeout), _Missing on a 404 and
        _Taken on a 412."""
        outcome: Dict[str, Any] = {}
        cancelled = threading.Event()
        try:
            # Made here, outside the bound: importing boto3 and making a
            # client take no network, but seconds on a busy machine.
            client = _client(self.destination, self.timeout)
        except Exception as unusable:  # boto3 missing, an unknown profile
            raise StoreFailed("%s: %s" % (what,
                                          bundlestore.reason(unusable)))

        def run() -> None:
            try:
                outcome["value"] = request(client, cancelled)
            except BaseException as err:  # reported to the caller
                outcome["error"] = err

        worker = threading.Thread(target=run, name="wirecache-store",
                                  daemon=True)
        worker.start()
        worker.join(self.timeout)
        if worker.is_alive():
            cancelled.set()
            raise StoreFailed("%s took longer than %g seconds"
                              % (what, self.timeout))
        err = outcome.get("error")
        if err is None:
            return outcome["value"]
        if isinstance(err, StoreFailed):
            raise err
        if type(err).__name__ == "FlexibleChecksumError":
            # The bytes do not match the checksum the store holds: an
            # entry damaged or cut on its way, replaced as one whose
            # digest fails.
            raise NotAnEntry("%s: %s" % (what, bundlestore.reason(err)))
        if isinstance(err, (ValueError, OSError)) and cancelled.is_set():
            raise StoreFailed("%s was given up" % what)
        status = bundlestore.http_status(err)
        code = (getattr(err, "response", None) or {}).get("Error", {}) \
            .get("Code")
        if status == 404 and code in ("NoSuchKey", "404", "NotFound"):
            raise _Missing()
        if status == 412:
            raise _Taken()
        raise StoreFailed("%s: %s" % (what, bundlestore.reason(err)))

    def backing_off(self) -> bool:
        """Whether the store failed in the last ``BACKOFF_SECONDS``."""
        try:
            failed = os.stat(os.path.join(self.root, FAILED_FILE)).st_mtime
        except OSError:
            return False
        return 0 <= time.time() - failed < BACKOFF_SECONDS

    def _failed(self, err: StoreFailed) -> None:
        """Leave the store alone for a while; say so once.  An entry
        that is not one is only said."""
        self.count(store_errors=1)
        if isinstance(err, NotAnEntry):
            self._warn("store %s: %s; computed again" % (self.url, err))
            return
        if self.backing_off():
            return
        try:
            path = os.path.join(self._dir(), FAILED_FILE)
            with open(path, "a"):
                os.utime(path)
        except OSError:
            pass  # every request tries the store then, each bounded
        self._warn("store %s failed, computing responses here for %d s: "
                   "%s" % (self.url, BACKOFF_SECONDS, err))

    def _key(self, kind: str, key: str) -> str:
        return self.destination.key(kind + key)

    # Reading -------------------------------------------------------------

    def lookup(self, key: str) -> Optional[Entry]:
        """The entry for ``key`` downloaded and checked, or None."""
        if self.backing_off():
            return None
        try:
            path, fd = self._create_tmp(key)
        except OSError:
            return None
        try:
            with os.fdopen(fd, "wb") as out:
                size = self._call(
                    "GET %s" % key[:12],
                    lambda client, cancelled: self._download(
                        client, key, out, cancelled))
            fh: BinaryIO = open(path, "rb")
        except _Missing:
            self.count(store_misses=1)
            return None
        except StoreFailed as err:
            self._failed(err)
            return None
        except (OSError, _Taken):
            return None
        finally:
            # The entry is read through ``fh``: nothing is left behind.
            remove_if_ours(path)
        entry = self._check(path, key, fh)
        if entry is None or not entry.check_read():
            fh.close()
            self._failed(NotAnEntry("entry %s fails its check (%d bytes)"
                                    % (key[:12], size)))
            return None
        self.count(store_hits=1, store_bytes_read=size)
        return entry

    def _download(self, client: bundlestore.Client, key: str, out: BinaryIO,
                  cancelled: threading.Event) -> int:
        answer = client.get_object(Bucket=self.destination.bucket,
                                   Key=self._key(ENTRIES, key))
        length = answer.get("ContentLength")
        body = answer["Body"]
        try:
            if not isinstance(length, int) or length > self.max_size:
                raise NotAnEntry("entry %s announced %r bytes"
                                  % (key[:12], length))
            got = 0
            while not cancelled.is_set():
                data = body.read(READ_SIZE)
                if not data:
                    break
                got += len(data)
                if got > length:
                    raise NotAnEntry("entry %s is longer than announced"
                                      % key[:12])
                out.write(data)
            if got != length:
                raise NotAnEntry("entry %s: %d of %d bytes"
                                  % (key[:12], got, length))
        finally:
            body.close()
        return got

    def _found_locked(self, key: str, waited: bool) -> Optional[Entry]:
        """With this server's lock of the key held: the entry written
        meanwhile by the request that held it before, or the one another
        server is writing (waited for); None when this request writes
        it."""
        if waited:
            entry = self.lookup(key)
            if entry is not None:
                return entry
        if self.backing_off():
            return None
        marker = self._key(WRITING, key)
        body = ("%s %d\n" % (os.uname().nodename, os.getpid())).encode()
        try:
            self._call("PUT writing %s" % key[:12],
                       lambda client, _: client.put_object(
                           Bucket=self.destination.bucket, Key=marker,
                           Body=body, IfNoneMatch="*"))
        except _Taken:
            return self._wait_for_writer(key, marker, body)
        except StoreFailed as err:
            self._failed(err)
            return None
        except _Missing:
            return None
        with self._writing_lock:
            self._writing.add(key)
        return None

    def _wait_for_writer(self, key: str, marker: str,
                         body: bytes) -> Optional[Entry]:
        """Another server writes ``key``: its entry once it is there, or
        None (this request computes it) when the other server's marker
        is older than ``wait`` plus ``timeout`` (taken over) or ``wait``
        seconds have passed."""
        try:
            age = self._call("HEAD writing %s" % key[:12],
                             lambda client, _: _age(client.head_object(
                                 Bucket=self.destination.bucket,
                                 Key=marker)))
            if age > self.wait + self.timeout:
                self._call("PUT writing %s" % key[:12],
                           lambda client, _: client.put_object(
                               Bucket=self.destination.bucket, Key=marker,
                               Body=body))
                with self._writing_lock:
                    self._writing.add(key)
                return None
            deadline = time.monotonic() + self.wait
            while time.monotonic() < deadline:
                time.sleep(REMOTE_POLL_SECONDS)
                try:
                    self._call("HEAD %s" % key[:12],
                               lambda client, _: client.head_object(
                                   Bucket=self.destination.bucket,
                                   Key=self._key(ENTRIES, key)))
                except _Missing:
                    continue
                return self.lookup(key)
        except StoreFailed as err:
            self._failed(err)
        except (_Missing, _Taken):
            pass  # the writer finished and its marker went: compute
        return None

    def stop_writing(self, key: str) -> None:
        """Delete this process's ``writing`` marker of ``key``, if it
        made one (a marker left behind is taken over after a while)."""
        with self._writing_lock:
            if key not in self._writing:
                return
            self._writing.discard(key)
        try:
            self._call("DELETE writing %s" % key[:12],
                       lambda client, _: client.delete_object(
                           Bucket=self.destination.bucket,
                           Key=self._key(WRITING, key)))
        except StoreFailed as err:
            self._failed(err)
        except (_Missing, _Taken):
            pass

    # Writing -------------------------------------------------------------

    def _filling(self, key: str, lock_fd: int) -> Filling:
        return _SharedFilling(self, key, lock_fd)

    def _commit(self, key: str, tmp_path: str) -> bool:
        """Upload the complete entry at ``tmp_path``; whether it is
        stored.  Then the store is brought under its bound."""
        if self.backing_off():
            return False
        try:
            size = os.path.getsize(tmp_path)
            with open(tmp_path, "rb") as fh:
                self._call("PUT %s" % key[:12],
                           lambda client, _: client.put_object(
                               Bucket=self.destination.bucket,
                               Key=self._key(ENTRIES, key), Body=fh,
                               ContentLength=size,
                               ChecksumAlgorithm="SHA256"))
        except StoreFailed as err:
            self._failed(err)
            return False
        except (OSError, _Missing, _Taken):
            return False
        self.count(store_bytes_written=size)
        self.evict_store()
        return True

    # Eviction ------------------------------------------------------------

    def _list(self, kind: str) -> Tuple[List[Tuple[float, int, str]],
                                        float]:
        """(time, size, key) of the objects of ``kind`` this module
        named, and the store's clock (Unix time)."""
        def request(client: bundlestore.Client,
                    cancelled: threading.Event) -> Tuple[
                        List[Tuple[float, int, str]], float]:
            found = []
            now = time.time()
            prefix = self._key(kind, "")
            pages = client.get_paginator("list_objects_v2").paginate(
                Bucket=self.destination.bucket, Prefix=prefix)
            for number, page in enumerate(pages):
                if number == LIST_PAGES or cancelled.is_set():
                    break
                now = _server_time(page, now)
                for item in page.get("Contents", ()):
                    name = item["Key"][len(prefix):]
                    if _KEY.match(name):
                        found.append((item["LastModified"].timestamp(),
                                      int(item["Size"]), name))
            return found, now
        return self._call("LIST %s" % kind.rstrip("/"), request)

    def scan(self) -> List[Tuple[float, int, str]]:
        """(time written, size, key) of every entry in the store; an
        empty list, and ``scan_error`` set, when it cannot be listed."""
        try:
            return self._list(ENTRIES)[0]
        except (StoreFailed, _Missing, _Taken) as err:
            self.scan_error = str(err) or "no such bucket"
            return []

    def evict_store(self) -> None:
        """Delete the oldest entries until the rest fit in ``max_size``,
        and markers of writers that died."""
        try:
            entries = self._list(ENTRIES)[0]
            markers, now = self._list(WRITING)
        except StoreFailed as err:
            self._failed(err)
            return
        except (_Missing, _Taken):
            return
        total = sum(size for _, size, _ in entries)
        doomed = []
        for _, size, key in sorted(entries):
            if total <= self.max_size:
                break
            doomed.append(ENTRIES + key)
            total -= size
        doomed += [WRITING + key for written, _, key in markers
                   if now - written > self.wait + self.timeout]
        if doomed:
            try:
                self._call("DELETE", lambda client, _:
                           bundlestore.delete_objects(
                               self.destination, doomed, client=client))
            except StoreFailed as err:
                self._failed(err)
            except (_Missing, _Taken):
                pass  # deleted meanwhile by another head's eviction


def _server_time(page: Dict[str, Any], default: float) -> float:
    """The time the store's answer was sent, by its own clock."""
    date = page.get("ResponseMetadata", {}).get("HTTPHeaders", {}) \
        .get("date")
    try:
        return email.utils.parsedate_to_datetime(date).timestamp()
    except (TypeError, ValueError):
        return default


def _age(head: Dict[str, Any]) -> float:
    """Seconds since the object a HEAD answered for was written, by the
    store's clock."""
    return _server_time(head, time.time()) - head["LastModified"].timestamp()
