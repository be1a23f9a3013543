"""Publishing pre-built bundles to S3-compatible object storage, and
retiring old generations of them: what ``hg bundlegen`` and ``gitbridge
bundlegen`` share.  Standard library and boto3 only (imported when an
upload needs it; ``pip install vcsperf[s3]``).

A *destination* is where one copy of every bundle goes: an ``s3://BUCKET/
PREFIX`` URL with its region and (for a non-AWS server) endpoint, the
public URL clients download from (``base-url``; by default the bucket's
S3 URL), and the attributes its manifest lines carry for clients to select
on (``attributes = ec2region=us-west-2``, ``cdn = true``).  Destinations
come in the order of the adapter's list, which is the clients' order of
preference.

A *generation* is what one run published: its tip, when, and the object
keys and local files of its bundles.  ``Generations`` is the JSON record of
them beside the local bundles; ``retire`` names what falls out of the last
N, for deletion once the new manifest or bundle list is published.
"""

import hashlib
import json
import os
import re
import tempfile
import time
import urllib.parse

from vcsperf.core.errors import Abort

#: Keys a destination's configuration may hold.
DESTINATION_KEYS = ("url", "region", "endpoint", "base-url", "attributes",
                    "cdn", "cache-control", "profile")
DEFAULT_CACHE_CONTROL = "public, max-age=31536000, immutable"
# Parts above this size go up in parts of this size, each with its own
# checksum; S3 takes at most 10,000 parts.
MULTIPART_CHUNK = 64 * 1024 * 1024
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

    def __init__(self, name, settings):
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
        self.attributes = []
        for item in (settings.get("attributes") or "").replace(",", " ") \
                .split():
            if not _ATTRIBUTE.match(item):
                raise Abort("destination %s: attribute %r is not KEY=VALUE"
                            % (name, item))
            self.attributes.append(tuple(item.split("=", 1)))
        cdn = (settings.get("cdn") or "false").lower()
        if cdn not in ("true", "false", "yes", "no", "1", "0"):
            raise Abort("destination %s: cdn must be true or false, not %r"
                        % (name, cdn))
        if cdn in ("true", "yes", "1"):
            self.attributes.append(("cdn", "true"))

    def _s3_base_url(self):
        if self.endpoint:
            base = "%s/%s" % (self.endpoint.rstrip("/"), self.bucket)
        else:
            base = "https://%s.s3.%s.amazonaws.com" % (self.bucket,
                                                       self.region)
        return base + ("/" + urllib.parse.quote(self.prefix)
                       if self.prefix else "")

    def key(self, name):
        return "%s/%s" % (self.prefix, name) if self.prefix else name

    def public_url(self, name):
        return "%s/%s" % (self.base_url, urllib.parse.quote(name))

    def client(self):
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            raise Abort("uploading to %s needs boto3" % self.name,
                        hint="pip install 'vcsperf[s3]'")
        session = boto3.session.Session(profile_name=self.profile)
        return session.client(
            "s3", region_name=self.region, endpoint_url=self.endpoint,
            config=Config(retries={"max_attempts": 8, "mode": "standard"},
                          connect_timeout=20, read_timeout=120,
                          s3={"addressing_style": "path"}
                          if self.endpoint else {}))


def check_base_url(url, setting="bundlegen.base-url"):
    """``url`` without trailing slashes, if clients can fetch
    ``<url>/<bundle name>`` from it; else abort naming ``setting``."""
    if not _BASE_URL.match(url.rstrip("/")):
        raise Abort("%s is not a URL clients can fetch from: %s"
                    % (setting, ascii(url)),
                    hint="give an absolute http, https or file URL without "
                         "query or fragment; percent-encode other "
                         "characters (a space as %20)")
    return url.rstrip("/")


def destinations(table, order):
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


def upload(destination, path, name, content_type, sha256, client=None):
    """Upload the file ``path`` as ``name`` under the destination's prefix
    with its content type and cache headers, in checksummed parts (SHA-256
    per part, checked by the server) and with retries.  An object of that
    name and size is there already (names hold the digest): nothing is
    sent.  Returns the bytes sent."""
    client = client or destination.client()
    key = destination.key(name)
    size = os.path.getsize(path)
    try:
        head = client.head_object(Bucket=destination.bucket, Key=key)
        if head["ContentLength"] == size:
            return 0
    except Exception as err:  # botocore's ClientError: 404 on a new key
        if _status(err) != 404:
            raise Abort("cannot reach %s (s3://%s/%s): %s"
                        % (destination.name, destination.bucket, key, err))
    from boto3.s3.transfer import TransferConfig
    config = TransferConfig(multipart_threshold=MULTIPART_CHUNK,
                            multipart_chunksize=MULTIPART_CHUNK,
                            max_concurrency=4)
    extra = {"ContentType": content_type,
             "CacheControl": destination.cache_control,
             "ChecksumAlgorithm": "SHA256",
             "Metadata": {"sha256": sha256}}
    try:
        client.upload_file(path, destination.bucket, key,
                           ExtraArgs=extra, Config=config)
    except Exception as err:
        raise Abort("upload of %s to %s failed: %s"
                    % (name, destination.name, err))
    return size


def upload_all(destinations, folder, bundles, content_type, report):
    """Upload every bundle (a dict with ``file`` in ``folder`` and its
    ``sha256``) to every destination; ``report(destination, bytes,
    seconds)`` after each destination.  Returns the bytes sent and what
    was uploaded, for ``take_back``.  If one upload fails, what this call
    uploaded is deleted again (nothing names it yet) and the Abort goes
    on."""
    sent = []
    total = 0
    try:
        for destination in destinations:
            client = destination.client()
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
    except Abort:
        take_back(sent)
        raise
    return total, sent


def take_back(sent):
    """Delete what ``upload_all`` uploaded, as far as the servers let us:
    no manifest or list names it, so what stays is only storage."""
    for destination, client, name in sent:
        try:
            delete(destination, [name], client=client)
        except Exception:
            pass


def put_bytes(destination, name, data, content_type, cache_control=None,
              client=None):
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
                    % (name, destination.name, err))


def delete(destination, names, client=None):
    """Delete the objects ``names`` (missing ones are no error)."""
    client = client or destination.client()
    names = list(names)
    for start in range(0, len(names), 1000):
        batch = names[start:start + 1000]
        result = client.delete_objects(
            Bucket=destination.bucket,
            Delete={"Objects": [{"Key": destination.key(name)}
                                for name in batch], "Quiet": True})
        errors = [e for e in result.get("Errors", ())
                  if e.get("Code") != "NoSuchKey"]
        if errors:
            raise Abort("deleting %s from %s failed: %s"
                        % (errors[0]["Key"], destination.name,
                           errors[0].get("Message")))


def _status(err):
    response = getattr(err, "response", None) or {}
    return response.get("ResponseMetadata", {}).get("HTTPStatusCode")


def sha256_file(path):
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

    def __init__(self, path):
        self.path = path
        try:
            with open(path) as fh:
                self.record = json.load(fh)
        except FileNotFoundError:
            self.record = {}
        except ValueError as err:
            raise Abort("%s is not valid JSON: %s" % (path, err),
                        hint="remove it: the next run rebuilds every bundle")
        self.list = self.record.get("generations", [])

    @property
    def latest(self):
        return self.list[0] if self.list else None

    def add(self, generation):
        self.list.insert(0, generation)

    def retire(self, keep):
        """Drop all but the newest ``keep`` generations from the record;
        return the names of the files only dropped ones hold."""
        kept, dropped = self.list[:keep], self.list[keep:]
        self.list = kept
        held = {name for generation in kept for name in generation["files"]}
        return sorted({name for generation in dropped
                       for name in generation["files"]} - held)

    def save(self, **fields):
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


def freshness(moved_changesets, moved_bytes, min_changesets, min_bytes):
    """Why a new generation is due, or None: the repository moved by at
    least one threshold (a threshold of 0 is off)."""
    if min_changesets and moved_changesets >= min_changesets:
        return "%d new changesets (threshold %d)" % (moved_changesets,
                                                     min_changesets)
    if min_bytes and moved_bytes >= min_bytes:
        return "%d new bytes (threshold %d)" % (moved_bytes, min_bytes)
    return None


def now():
    return int(time.time())
