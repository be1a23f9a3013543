"""Publishing pre-built bundles to S3-compatible object storage, and
retiring old generations of them: what ``hg bundlegen`` and ``gitbridge
bundlegen`` share.  Standard library and boto3 only (imported when an
upload needs it: the ``s3`` extra of the checkout, ``pip install
'/path/to/vcsperf[s3]'``).

A *destination* is where one copy of every bundle goes: an ``s3://BUCKET/
PREFIX`` URL with its region and (for a non-AWS server) endpoint, the
public URL clients download from (``base-url``; by default the bucket's
S3 URL), and the attributes its manifest lines carry for clients to select
on (``attributes = ec2region=us-west-2``, ``cdn = true``).  Destinations
come in the order of the adapter's list, which is the clients' order of
preference.

A *generation* is what one run published: its tip, when, and the object
keys and local files of its bundles.  ``Generations`` is the JSON record of
them beside the local bundles.  ``retire(keep)`` keeps the newest
``keep`` generations, and always the one the newest replaced: a run never
deletes the generation it replaces, since clients may have just read the
list naming it.  The files only older ones hold become *pending
deletions*, recorded per place (each destination, the adapter's own
places) before anything is deleted.  ``sweep`` deletes them; what a place
refuses (an Object-Lock bucket, a no-delete policy, a server that is
down) stays pending for the next run, and the other places are still
tried.

Every request to a server is bounded: each read by a timeout, and a
whole phase of a run (checks, uploads, deletes) by ``Deadline``, which
interrupts a request that a stalled or trickling server holds.  Uploads
therefore run in the calling thread, part after part.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import tempfile
import threading
import time
import urllib.parse
from types import FrameType, TracebackType
from typing import (
    IO,
    Any,
    AnyStr,
    Callable,
    Dict,
    Iterable,
    List,
    Literal,
    Mapping,
    Tuple,
)

from vcsperf.core import pooling
from vcsperf.core.errors import Abort
from vcsperf.core.settings import parse_bool

#: A bundle as the record holds it: ``file``, ``size``, ``sha256``...
#: (JSON).
Bundle = Dict[str, Any]
#: An S3 client of boto3's (no type information published).
Client = Any
#: What ``upload_all`` sent: where, through which client, which name.
Sent = List[Tuple["Destination", Client, str]]

#: Keys a destination's configuration may hold.
DESTINATION_KEYS = ("url", "region", "endpoint", "base-url", "attributes",
                    "cdn", "cache-control", "profile")
DEFAULT_CACHE_CONTROL = "public, max-age=31536000, immutable"
# Parts above this size go up in parts of this size, each with its own
# checksum; S3 takes at most 10,000 parts.
MULTIPART_CHUNK = 64 * 1024 * 1024
# Each connect and each read of a request, and how often one is tried.
CONNECT_TIMEOUT = 20
READ_TIMEOUT = 60
ATTEMPTS = 5
# How long taking back what a failed run uploaded may take, after its
# deadline passed.
CLEANUP_SECONDS = 30
INSTALL_HINT = ("install the s3 extra from your vcsperf checkout: "
                "pip install '/path/to/vcsperf[s3]'")
_S3_URL = re.compile(r"s3://([a-z0-9][a-z0-9.\-]{1,61}[a-z0-9])(/.*)?\Z")
_ATTRIBUTE = re.compile(r"[A-Za-z0-9_.\-]+=[^\s]+\Z")
# What a base URL may be: http, https or file, then only characters a URL
# holds as they are (RFC 3986's unreserved and reserved ones, but not the
# ``?`` and ``#`` after which a bundle's name could not be appended) and
# %XX escapes.  Clients open the URL as it is written: Mercurial splits a
# manifest line at whitespace, Git reads a bundle list as Git config.
_URL_CHAR = r"(?:[A-Za-z0-9\-._~:/@!$&'()*+,;=\[\]]|%[0-9A-Fa-f]{2})"
_BASE_URL = re.compile(r"(?:(?i:https?)://(?!/)%s+|(?i:file):///%s+)\Z"
                       % (_URL_CHAR, _URL_CHAR))


class Destination:
    """One configured destination; see the module's docstring."""

    def __init__(self, name: str, settings: Mapping[str, str]) -> None:
        self.name = name
        unknown = sorted(set(settings) - set(DESTINATION_KEYS))
        if unknown:
            raise Abort("destination %s: unknown setting %s"
                        % (name, ", ".join(unknown)),
                        hint="known settings: %s"
                        % ", ".join(DESTINATION_KEYS))
        url = settings.get("url", "")
        found = _S3_URL.match(url)
        if not found:
            raise Abort("destination %s: url must be s3://BUCKET/PREFIX, "
                        "not %r" % (name, url),
                        hint="a bucket name is 3 to 63 lower-case letters, "
                             "digits, dots and dashes")
        self.bucket = found.group(1)
        self.prefix = (found.group(2) or "").strip("/")
        self.region = settings.get("region") or "us-east-1"
        self.endpoint = settings.get("endpoint") or None
        self.profile = settings.get("profile") or None
        self.cache_control = settings.get("cache-control",
                                          DEFAULT_CACHE_CONTROL)
        base = settings.get("base-url") or self._s3_base_url()
        if not re.match(r"(?i)https?://[^\s?#]+\Z", base):
            raise Abort("destination %s: base-url must be an http or https "
                        "URL without spaces, query or fragment: %r"
                        % (name, base))
        self.base_url = base.rstrip("/")
        self.attributes: list[tuple[str, str]] = []
        for item in (settings.get("attributes") or "").replace(",", " ") \
                .split():
            if not _ATTRIBUTE.match(item):
                raise Abort("destination %s: attribute %r is not KEY=VALUE"
                            % (name, item))
            key, value = item.split("=", 1)
            self.attributes.append((key, value))
        if parse_bool(settings.get("cdn") or "false",
                      "destination %s: cdn" % name):
            self.attributes.append(("cdn", "true"))

    def _s3_base_url(self) -> str:
        if self.endpoint:
            base = "%s/%s" % (self.endpoint.rstrip("/"), self.bucket)
        else:
            base = "https://%s.s3.%s.amazonaws.com" % (self.bucket,
                                                       self.region)
        return base + ("/" + urllib.parse.quote(self.prefix)
                       if self.prefix else "")

    def key(self, name: str) -> str:
        return "%s/%s" % (self.prefix, name) if self.prefix else name

    def public_url(self, name: str) -> str:
        return "%s/%s" % (self.base_url, urllib.parse.quote(name))

    def client(self, connect_timeout: float = CONNECT_TIMEOUT,
               read_timeout: float = READ_TIMEOUT,
               attempts: int = ATTEMPTS) -> Client:
        """A boto3 S3 client for this destination: each connect and each
        read bounded by the timeouts (seconds), each request tried
        ``attempts`` times."""
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            raise Abort("destination %s needs boto3, which is not installed"
                        % self.name, hint=INSTALL_HINT)
        try:
            session = boto3.session.Session(profile_name=self.profile)
            return session.client(
                "s3", region_name=self.region, endpoint_url=self.endpoint,
                config=Config(retries={"max_attempts": attempts,
                                       "mode": "standard"},
                              connect_timeout=connect_timeout,
                              read_timeout=read_timeout,
                              s3={"addressing_style": "path"}
                              if self.endpoint else {}))
        except Exception as err:  # botocore: an unknown profile, a bad URL
            raise Abort("destination %s: %s" % (self.name, reason(err)))


def check_base_url(url: str, setting: str = "bundlegen.base-url") -> str:
    """``url`` without trailing slashes, if clients can fetch
    ``<url>/<bundle name>`` from it; else abort naming ``setting``."""
    if not _BASE_URL.match(url.rstrip("/")):
        raise Abort("%s is not a URL clients can fetch from: %s"
                    % (setting, ascii(url)),
                    hint="give an absolute http, https or file URL without "
                         "query or fragment; percent-encode other "
                         "characters (a space as %20)")
    return url.rstrip("/")


def destinations(table: Mapping[str, Mapping[str, str]],
                 order: list[str]) -> list[Destination]:
    """The destinations named in ``order`` (a list of names), from
    ``table`` (name -> {key: value}); abort on an unknown name or a name
    listed twice."""
    if len(set(order)) != len(order):
        raise Abort("a destination is listed twice: %s" % ", ".join(order))
    missing = [name for name in order if name not in table]
    if missing:
        raise Abort("destination %s is not configured" % missing[0],
                    hint="give it at least a url (s3://BUCKET/PREFIX)")
    return [Destination(name, table[name]) for name in order]


def check_output_outside(output: str, repository_files: Iterable[str],
                         vcs: str) -> None:
    """Abort when the output directory ``output`` is, or is inside, one
    of ``repository_files``: the directories of the repository's own
    files (``.git``, a bare repository, ``.hg``, a share's source).
    Those are no publication directory: ``vcs`` keeps its own files
    there, packs or deletes what it finds among them (``git gc``), and
    may take a bundle's name for one of its files.  Symbolic links are
    followed; ``output`` need not exist yet."""
    for files in repository_files:
        top = os.path.realpath(files)
        if pooling.is_inside(output, top):
            raise Abort("output directory %s is inside the repository's "
                        "own files (%s)" % (output, top),
                        hint="%s keeps its files there, not bundles: give "
                        "a directory outside %s" % (vcs, top))


class DeadlinePassed(BaseException):
    """Raised into whatever request is waiting when a ``Deadline`` passes;
    a BaseException, so that no retry loop of botocore takes it for a
    network error and tries again."""


class Deadline:
    """``with deadline:`` bounds the requests of the block by wall-clock
    time, however a server stalls or trickles: when it passes, the request
    waiting then is interrupted (SIGALRM) and the block ends in an Abort
    naming ``setting``.  One Deadline is one budget of ``seconds``,
    counted from the first block: later blocks (not nested) get what is
    left.  In a thread other than the main one (no signals there), only
    the per-read timeouts apply."""

    def __init__(self, seconds: float, setting: str) -> None:
        self.seconds = seconds
        self.setting = setting
        self._until: float | None = None
        self._previous: Any = None  # the handler SIGALRM had

    def __enter__(self) -> Deadline:
        global _armed
        if self._until is None:
            self._until = time.monotonic() + self.seconds
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGALRM, _expire)
            signal.setitimer(signal.ITIMER_REAL,
                             max(self._until - time.monotonic(), 0.001))
            _armed = True
        return self

    def __exit__(self, kind: type[BaseException] | None,
                 value: BaseException | None,
                 traceback: TracebackType | None) -> Literal[False]:
        global _armed
        if _armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous)
            _armed = False
        if kind is DeadlinePassed:
            raise Abort("object storage took longer than %s seconds "
                        "(%s)" % (self.seconds, self.setting),
                        hint="a server stalled or is too slow; raise %s "
                             "for very large bundles" % self.setting) \
                from None
        return False


# Whether a Deadline's timer is set in this process.
_armed = False


def _expire(signum: int, frame: FrameType | None) -> None:
    raise DeadlinePassed()


class _Grace:
    """A short time of its own for cleaning up after a failure, even when
    the deadline has passed (the cleanup then ends quietly at its own
    limit); the deadline's timer goes on after it."""

    _left = 0.0
    _started = 0.0

    def __enter__(self) -> _Grace:
        if _armed:
            self._left = signal.getitimer(signal.ITIMER_REAL)[0]
            self._started = time.monotonic()
            signal.setitimer(signal.ITIMER_REAL, CLEANUP_SECONDS)
        return self

    def __exit__(self, kind: type[BaseException] | None,
                 value: BaseException | None,
                 traceback: TracebackType | None) -> bool:
        if _armed:
            left = self._left - (time.monotonic() - self._started)
            # a deadline that passed already is being raised
            signal.setitimer(signal.ITIMER_REAL,
                             max(left, 0.001) if self._left else 0)
        return kind is DeadlinePassed


def check(destinations: Iterable[Destination]) -> dict[str, Client]:
    """Before a run builds anything: each destination's client can be
    made (boto3 installed, its profile known), and its bucket answers a
    HEAD with its credentials; else one Abort naming the destination.
    Returns a client per destination, by name."""
    clients = {}
    for destination in destinations:
        client = destination.client()
        try:
            client.head_bucket(Bucket=destination.bucket)
        except Exception as err:
            raise Abort("destination %s (s3://%s) cannot be used: %s"
                        % (destination.name, destination.bucket,
                           reason(err)),
                        hint=_hint(err))
        clients[destination.name] = client
    return clients


def reason(err: BaseException) -> str:
    """One line saying why a request failed."""
    return " ".join(str(err).split()) or type(err).__name__


def _hint(err: BaseException) -> str:
    name = type(err).__name__
    if name in ("NoCredentialsError", "PartialCredentialsError"):
        return ("give credentials the way boto3 finds them: "
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, ~/.aws, an "
                "instance role, or the destination's profile")
    if http_status(err) in (403, 401):
        return "check the credentials and the bucket's policy"
    if http_status(err) == 404:
        return "create the bucket, or fix the destination's url"
    return "check the destination's endpoint and region, and the network"


def _stored(head: Mapping[str, Any], size: int, sha256: str) -> bool:
    """Whether a HEAD answer describes the object we would upload: its
    size, and its sha256 where it was uploaded with one (a name holds
    only the start of the digest)."""
    stored = (head.get("Metadata") or {}).get("sha256")
    return head.get("ContentLength") == size and stored in (None, sha256)


def missing(destination: Destination, bundles: Iterable[Bundle],
            client: Client = None) -> list[str]:
    """The files of ``bundles`` (dicts with ``file``, ``size`` and
    ``sha256``) that the destination lacks or holds other bytes under:
    one HEAD each."""
    client = client or destination.client()
    lacking = []
    for bundle in bundles:
        key = destination.key(bundle["file"])
        try:
            head = client.head_object(Bucket=destination.bucket, Key=key)
        except Exception as err:
            if http_status(err) != 404:
                raise Abort("cannot check s3://%s/%s on %s: %s"
                            % (destination.bucket, key, destination.name,
                               reason(err)), hint=_hint(err))
            lacking.append(bundle["file"])
            continue
        if not _stored(head, bundle["size"], bundle["sha256"]):
            lacking.append(bundle["file"])
    return lacking


def upload(destination: Destination, path: str, name: str,
           content_type: str, sha256: str, client: Client = None,
           chunk: int = MULTIPART_CHUNK) -> int:
    """Upload the file ``path`` as ``name`` under the destination's prefix
    with its content type and cache headers, in checksummed parts of
    ``chunk`` bytes (SHA-256 per part, checked by the server).  An object
    of that name, size and sha256 is there already: nothing is sent.
    Returns the bytes sent."""
    client = client or destination.client()
    key = destination.key(name)
    size = os.path.getsize(path)
    try:
        head = client.head_object(Bucket=destination.bucket, Key=key)
        if _stored(head, size, sha256):
            return 0
    except Exception as err:  # botocore's ClientError: 404 on a new key
        if http_status(err) != 404:
            raise Abort("cannot reach %s (s3://%s/%s): %s"
                        % (destination.name, destination.bucket, key,
                           reason(err)), hint=_hint(err))
    extra = {"Bucket": destination.bucket, "Key": key,
             "ContentType": content_type,
             "CacheControl": destination.cache_control,
             "ChecksumAlgorithm": "SHA256", "Metadata": {"sha256": sha256}}
    try:
        with open(path, "rb") as fh:
            if size <= chunk:
                client.put_object(Body=fh.read(), **extra)
            else:
                _upload_parts(client, fh, extra, chunk)
    except Exception as err:
        raise Abort("upload of %s to %s failed: %s"
                    % (name, destination.name, reason(err)),
                    hint=_hint(err))
    return size


def _upload_parts(client: Client, fh: IO[bytes], extra: dict[str, Any],
                  chunk: int) -> None:
    """A multipart upload of ``fh``; on any failure, or when the deadline
    passes, the parts sent are dropped (abort_multipart_upload)."""
    upload_id = client.create_multipart_upload(**extra)["UploadId"]
    where = {"Bucket": extra["Bucket"], "Key": extra["Key"],
             "UploadId": upload_id}
    try:
        parts = []
        for number in range(1, 10001):
            data = fh.read(chunk)
            if not data:
                break
            answer = client.upload_part(PartNumber=number, Body=data,
                                        ChecksumAlgorithm="SHA256", **where)
            part = {"PartNumber": number, "ETag": answer["ETag"]}
            if answer.get("ChecksumSHA256"):
                part["ChecksumSHA256"] = answer["ChecksumSHA256"]
            parts.append(part)
        client.complete_multipart_upload(MultipartUpload={"Parts": parts},
                                         **where)
    except BaseException:
        with _Grace():
            try:
                client.abort_multipart_upload(**where)
            except Exception:
                pass  # a lifecycle rule removes incomplete uploads
        raise


def upload_all(destinations: Iterable[Destination], folder: str,
               bundles: Iterable[Bundle], content_type: str,
               report: Callable[[Destination, int, float], None],
               clients: Mapping[str, Client] | None = None,
               ) -> tuple[int, Sent]:
    """Upload every bundle (a dict with ``file`` in ``folder`` and its
    ``sha256``) to every destination; ``report(destination, bytes,
    seconds)`` after each destination.  Returns the bytes sent and what
    was uploaded, for ``take_back``.  If one upload fails (or the
    deadline passes), what this call uploaded is deleted again (nothing
    names it yet) and the error goes on.  ``clients``: those ``check``
    made, by destination name."""
    sent: Sent = []
    total = 0
    try:
        for destination in destinations:
            client = (clients or {}).get(destination.name) \
                or destination.client()
            started = time.monotonic()
            size = 0
            for bundle in bundles:
                count = upload(destination,
                               os.path.join(folder, bundle["file"]),
                               bundle["file"], content_type,
                               bundle["sha256"], client=client)
                if count:
                    sent.append((destination, client, bundle["file"]))
                size += count
            total += size
            report(destination, size, time.monotonic() - started)
    except (Abort, DeadlinePassed):
        with _Grace():
            take_back(sent)
        raise
    return total, sent


def take_back(sent: Sent) -> None:
    """Delete what ``upload_all`` uploaded, as far as the servers let us:
    no manifest or list names it, so what stays is only storage."""
    for destination, client, name in sent:
        delete_objects(destination, [name], client=client)


def put_bytes(destination: Destination, name: str, data: bytes,
              content_type: str, cache_control: str | None = None,
              client: Client = None) -> None:
    """Store ``data`` as ``name`` (a small index such as a bundle list),
    with a SHA-256 checksum and a short cache lifetime."""
    client = client or destination.client()
    try:
        client.put_object(
            Bucket=destination.bucket, Key=destination.key(name), Body=data,
            ContentType=content_type, ChecksumAlgorithm="SHA256",
            CacheControl=cache_control or "public, max-age=60")
    except Exception as err:
        raise Abort("upload of %s to %s failed: %s"
                    % (name, destination.name, reason(err)))


def delete_objects(destination: Destination, names: Iterable[str],
                   client: Client = None) -> dict[str, str]:
    """Delete the objects ``names`` (missing ones count as deleted);
    return the ones the server refused, name -> reason (an Object-Lock
    bucket, a policy, a server that is down)."""
    refused: dict[str, str] = {}
    names = list(names)
    try:
        client = client or destination.client()
    except Abort as err:
        return dict.fromkeys(names, str(err))
    for start in range(0, len(names), 1000):
        batch = names[start:start + 1000]
        try:
            result = client.delete_objects(
                Bucket=destination.bucket,
                Delete={"Objects": [{"Key": destination.key(name)}
                                    for name in batch], "Quiet": True})
        except Exception as err:
            refused.update(dict.fromkeys(batch, reason(err)))
            continue
        by_key = {destination.key(name): name for name in batch}
        for error in result.get("Errors", ()):
            if error.get("Code") != "NoSuchKey":
                name = by_key.get(error.get("Key"), error.get("Key"))
                refused[name] = "%s: %s" % (error.get("Code"),
                                            error.get("Message"))
    return refused


def delete(destination: Destination, names: Iterable[str],
           client: Client = None) -> None:
    """Delete the objects ``names`` (missing ones are no error), or abort
    naming the first one the server refused."""
    refused = delete_objects(destination, names, client)
    if refused:
        name = sorted(refused)[0]
        raise Abort("deleting %s from %s failed: %s"
                    % (name, destination.name, refused[name]))


def http_status(err: BaseException) -> int | None:
    response = getattr(err, "response", None) or {}
    return response.get("ResponseMetadata", {}).get("HTTPStatusCode")


def remove_leftovers(folder: AnyStr, prefix: AnyStr) -> None:
    """Remove what killed runs left in ``folder``: every entry whose name
    starts with ``prefix`` (a run's temporary files and directories).
    The caller holds the bundlegen lock, so no live run owns any of it; a
    symbolic link is removed, never followed."""
    for name in os.listdir(folder):
        if name.startswith(prefix):
            path = os.path.join(folder, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass


def sha256_file(path: str) -> tuple[str, int]:
    """The hex SHA-256 and the size of a file."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


class Generations:
    """The generations published so far, newest first, kept as JSON in
    ``path`` (written by rename): each a dict with at least ``tip``,
    ``generated`` (Unix time) and ``files`` (the bundles' names, the same
    on every destination and in the local directory)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.record: dict[str, Any]
        try:
            with open(path) as fh:
                self.record = json.load(fh)
        except FileNotFoundError:
            self.record = {}
        except ValueError as err:
            raise Abort("%s is not valid JSON: %s" % (path, err),
                        hint="remove it: the next run rebuilds every bundle")
        except OSError as err:  # a directory, no permission
            raise Abort("cannot read %s: %s" % (path, err.strerror))
        if not isinstance(self.record, dict):
            raise Abort("%s is not a record of generations" % path,
                        hint="remove it: the next run rebuilds every bundle")
        self.list: list[dict[str, Any]] = self.record.get("generations",
                                                          [])

    @property
    def latest(self) -> dict[str, Any] | None:
        return self.list[0] if self.list else None

    def add(self, generation: dict[str, Any]) -> None:
        self.list.insert(0, generation)

    @property
    def pending(self) -> dict[str, list[str]]:
        """Deletions still to do: place -> names (see ``sweep``)."""
        return self.record.setdefault("undeleted", {})

    def held(self) -> set[str]:
        """The names the generations in the record hold."""
        return {name for generation in self.list
                for name in generation["files"]}

    def retire(self, keep: int, places: Iterable[str] = ()) -> list[str]:
        """Keep the newest ``keep`` generations in the record, and always
        the one the newest replaced; return the names of the files only
        dropped ones hold, which become pending deletions in every one of
        ``places``.  A name a kept generation holds again is pending
        nowhere."""
        kept = self.list[:max(keep, 2)]
        dropped = self.list[len(kept):]
        self.list = kept
        held = self.held()
        names = {name for generation in dropped
                 for name in generation["files"]} - held
        for place in places:
            self.pending[place] = sorted(
                set(self.pending.get(place, ())) | names)
        for place, pending in list(self.pending.items()):
            self.pending[place] = sorted(set(pending) - held)
            if not self.pending[place]:
                del self.pending[place]
        return sorted(names)

    def sweep(self, deleters: Mapping[str, Callable[[list[str]],
                                                    Mapping[str, str]]],
              ) -> dict[str, tuple[list[str], Mapping[str, str]]]:
        """Do the pending deletions: ``deleters`` is place -> function
        taking names and returning the refused ones (name -> reason).
        Refused names stay pending, for the next run; a place without a
        deleter (a destination no longer configured) keeps its own.
        Returns place -> (names deleted, refused), for the places tried."""
        results = {}
        for place, delete in deleters.items():
            names = self.pending.get(place)
            if not names:
                continue
            refused = delete(names)
            results[place] = ([n for n in names if n not in refused],
                              refused)
            if refused:
                self.pending[place] = sorted(refused)
            else:
                del self.pending[place]
        return results

    def save(self, **fields: Any) -> None:
        """Write the record, with ``fields`` besides the generations."""
        self.record.update(fields, generations=self.list)
        folder = os.path.dirname(self.path) or "."
        fd, temp = tempfile.mkstemp(dir=folder, prefix=".generations-")
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(self.record, fh, indent=2)
                fh.write("\n")
            os.replace(temp, self.path)
        except BaseException:
            os.unlink(temp)
            raise


def freshness(moved_changesets: int, moved_bytes: int, min_changesets: int,
              min_bytes: int) -> str | None:
    """Why a new generation is due, or None: the repository moved by at
    least one threshold (a threshold of 0 is off)."""
    if min_changesets and moved_changesets >= min_changesets:
        return "%d new changesets (threshold %d)" % (moved_changesets,
                                                     min_changesets)
    if min_bytes and moved_bytes >= min_bytes:
        return "%d new bytes (threshold %d)" % (moved_bytes, min_bytes)
    return None


def now() -> int:
    """Unix time, in whole seconds (a bundle's creation token)."""
    return int(time.time())
