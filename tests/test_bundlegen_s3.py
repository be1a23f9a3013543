"""bundlegen publishing to object storage: a real S3-compatible server
(versitygw) on 127.0.0.1, two regional destinations, a stock ``hg clone``
that picks its region's bundle (seen in the server's access log),
freshness thresholds, retention of generations, a failed upload that
changes no manifest, and the service's output (``-T json``, lock
waits)."""

import json
import os
import selectors
import socket
import subprocess
import threading
import time

import pytest

from campaign import is_clean_abort
from vcsperf.harness import objectstore

EXT = ("--config", "extensions.bundlegen=",
       "--config", "extensions.clonebundles=")
REGIONS = {"usw2": "us-west-2", "euc1": "eu-central-1"}


class S3Proxy:
    """A relay on 127.0.0.1 in front of an S3 server that reads the head
    of each request (one per connection: it asks for ``Connection:
    close``) and passes it on untouched, Host header and all, so that
    signatures still hold; or, for the first fault whose method and path
    part match, misbehaves instead: ``status`` answers that HTTP status
    (an S3 error body: AccessDenied for 403), ``stall`` holds the
    connection without a word, ``trickle`` sends a response head one byte
    every ``arg`` seconds, ``length`` passes the request on but announces
    ``arg`` as the object's length (a lying HEAD).  ``log`` lists
    ``(method, path, what)``."""

    def __init__(self, upstream):
        host, port = upstream.split("//")[1].strip("/").split(":")
        self.upstream = (host, int(port))
        self.faults = []
        self.log = []
        self.stopping = threading.Event()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = "http://127.0.0.1:%d/" % self.sock.getsockname()[1]
        self.acceptor = threading.Thread(target=self._accept, daemon=True)
        self.acceptor.start()

    def fault(self, method, part, action, arg=None):
        self.faults.append((method, part, action, arg))

    def stop(self):
        self.stopping.set()
        # A close alone can leave accept() blocked, and the thread then
        # takes connections meant for a later test's server that got the
        # same descriptor (its clients saw empty replies): shutdown wakes
        # it.
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.acceptor.join(10)

    def _accept(self):
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,),
                             daemon=True).start()

    def _serve(self, conn):
        try:
            self._answer(conn)
        except OSError:
            pass  # the client gave up: a deadline, a timeout

    @staticmethod
    def read_head(conn):
        """The head of a request (and what came with it), or None when
        the client went away first."""
        conn.settimeout(60)
        head = b""
        while b"\r\n\r\n" not in head and len(head) < 65536:
            data = conn.recv(65536)
            if not data:
                return None
            head += data
        return head

    def _answer(self, conn):
        with conn:
            head = self.read_head(conn)
            if head is None:
                return
            method, path = head.split(b" ", 2)[:2]
            method, path = method.decode(), path.decode()
            action, arg = next(((a, g) for m, part, a, g in self.faults
                                if m in (None, method) and part in path),
                               ("pass", None))
            self.log.append((method, path, action))
            if action == "status":
                body = (b"<Error><Code>%s</Code><Message>the test proxy "
                        b"refuses</Message></Error>" % (
                            b"AccessDenied" if arg == 403 else
                            b"NoSuchKey" if arg == 404 else
                            b"InternalError"))
                conn.sendall(b"HTTP/1.1 %d X\r\nContent-Type: application/"
                             b"xml\r\nContent-Length: %d\r\nConnection: "
                             b"close\r\n\r\n%s" % (
                                 arg, len(body),
                                 b"" if method == "HEAD" else body))
            elif action == "stall":
                self.stopping.wait(600)
            elif action == "trickle":
                for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 10000:
                    if self.stopping.wait(arg):
                        return
                    conn.sendall(bytes([byte]))
            else:
                self._relay(conn, head, arg if action == "length" else None)

    def _relay(self, conn, head, length):
        start, rest = head.split(b"\r\n\r\n", 1)
        lines = [line for line in start.split(b"\r\n")
                 if not line.lower().startswith(b"connection:")]
        head = b"\r\n".join(lines + [b"Connection: close"]) + \
            b"\r\n\r\n" + rest
        with socket.create_connection(self.upstream, timeout=60) as up:
            up.sendall(head)
            selector = selectors.DefaultSelector()
            selector.register(conn, selectors.EVENT_READ, up)
            selector.register(up, selectors.EVENT_READ, conn)
            answer = b""
            open_ = 2
            while open_ and selector.get_map():
                events = selector.select(60)
                if not events:
                    return
                for key, _ in events:
                    data = key.fileobj.recv(65536)
                    if not data:
                        selector.unregister(key.fileobj)
                        open_ -= 1
                        if key.fileobj is up:
                            return
                        continue
                    if key.fileobj is up and length is not None and \
                            b"\r\n\r\n" not in answer:
                        answer += data
                        if b"\r\n\r\n" not in answer:
                            continue
                        data = b"\r\n".join(
                            b"Content-Length: %d" % length
                            if line.lower().startswith(b"content-length:")
                            else line for line in answer.split(b"\r\n"))
                    key.data.sendall(data)


@pytest.fixture
def s3proxy(objectserver):
    proxy = S3Proxy(objectserver.url)
    yield proxy
    proxy.stop()


def local_bundles(repo):
    """The output directory ``_configure`` gives ``repo``: beside it (not
    in ``.hg``, which bundlegen refuses)."""
    return repo.parent / (repo.name + "-bundles")


def _configure(repo, server, formats="gzip, zstd", endpoints=None, **extra):
    """Two destinations (a bucket per region), kept two generations
    deep; ``endpoints``: where a destination's requests go instead of
    the server (a proxy in front of it), by name."""
    lines = ["[bundlegen]", "output = %s" % local_bundles(repo),
             "formats = " + formats, "destinations = usw2, euc1"]
    lines += ["%s = %s" % (key.replace("_", "-"), value)
              for key, value in extra.items()]
    lines.append("[bundlegen-destinations]")
    for name, region in REGIONS.items():
        server.make_bucket("bundles-" + name)
        endpoint = (endpoints or {}).get(name, server.url)
        lines += ["%s.url = s3://bundles-%s/hg/repo" % (name, name),
                  # the one region the test server signs for
                  "%s.region = %s" % (name, objectstore.REGION),
                  "%s.endpoint = %s" % (name, endpoint.rstrip("/")),
                  "%s.attributes = ec2region=%s" % (name, region)]
    lines.append("usw2.cdn = true")
    with open(repo / ".hg" / "hgrc", "a") as fh:
        fh.write("\n".join(lines) + "\n")


@pytest.fixture
def small_repo(hg, hgrepo):
    """A few changesets: what is tested here does not depend on size
    (real history runs in ``vcsperf bench bundlegen``)."""
    for number in range(3):
        (hgrepo / ("file%d" % number)).write_text("content %d\n" % number
                                                  * 100)
        hg("-R", hgrepo, "commit", "-q", "-A", "-m", "change %d" % number)
    return hgrepo


def _manifest(repo):
    return (repo / ".hg" / "clonebundles.manifest").read_text()


def _tip(hg, repo):
    return hg("log", "-R", repo, "-r", "tip", "-T", "{node}")


def test_regions_retention_and_a_stock_clone_from_its_region(
        small_repo, hg, hgserve, objectserver, tmp_path):
    repo = small_repo
    _configure(repo, objectserver)
    out = hg("-R", repo, "bundlegen", *EXT)
    assert "built gzip:" in out and "uploaded " in out
    tip = _tip(hg, repo)
    lines = _manifest(repo).splitlines()
    # format by format, each destination in the configured order
    assert [(line.split()[0].split("/")[3], line.split()[1]) for line in
            lines] == [("bundles-usw2", "BUNDLESPEC=gzip-v2"),
                       ("bundles-euc1", "BUNDLESPEC=gzip-v2"),
                       ("bundles-usw2", "BUNDLESPEC=zstd-v2"),
                       ("bundles-euc1", "BUNDLESPEC=zstd-v2")]
    assert lines[0].endswith(" ec2region=us-west-2 cdn=true")
    assert lines[1].endswith(" ec2region=eu-central-1")
    first = sorted(objectserver.keys("bundles-euc1"))
    assert len(first) == 2 and all(k.startswith("hg/repo/" + tip)
                                   for k in first)
    assert objectserver.keys("bundles-usw2") == first
    head = objectserver.client().head_object(Bucket="bundles-euc1",
                                             Key=first[0])
    assert head["ContentType"] == "application/x-mercurial-bundle"
    assert "immutable" in head["CacheControl"]

    # A stock client takes its own region's bundle.
    server = hgserve(repo, *EXT)
    before = len(objectserver.gets())
    out = hg("clone", "-U", "--config",
             "ui.clonebundleprefers=ec2region=eu-central-1", server.url,
             tmp_path / "clone")
    assert "applying clone bundle from %sbundles-euc1/" % objectserver.url \
        in out
    assert objectserver.gets()[before:] == [
        [k for k in first if ".gzip." in k][0]]
    hg("verify", "-q", "-R", tmp_path / "clone")
    assert _tip(hg, tmp_path / "clone") == tip

    # Nothing moved: nothing to do, quickly, in JSON too.
    started = time.monotonic()
    out = hg("-R", repo, "bundlegen", *EXT)
    assert "nothing to do: the bundles of tip %s are published already" \
        % tip[:12] in out
    assert time.monotonic() - started < 10  # a busy machine; about 0.3 s
    [item] = json.loads(hg("-R", repo, "bundlegen", *EXT, "-T", "json",
                           "--config", "extensions.blackbox="))
    assert item["action"] == "skipped" and item["tip"] == tip
    # a ui.log event, for blackbox
    assert ")> nothing to do: the bundles of tip %s" % tip[:12] in (
        repo / ".hg" / "blackbox.log").read_text()

    # Below the threshold, then forced; the dry run changes nothing.
    hg("-R", repo, "commit", "--config", "ui.allowemptycommit=1", "-m", "1")
    out = hg("-R", repo, "bundlegen", *EXT, "--config",
             "bundlegen.min-changesets=5")
    assert "has not moved past bundlegen.min-changesets" in out
    manifest = _manifest(repo)
    out = hg("-R", repo, "bundlegen", *EXT, "--dry-run")
    assert "would build gzip, zstd (1 new changesets (threshold 1))" in out
    assert _manifest(repo) == manifest
    items = json.loads(hg("-R", repo, "bundlegen", *EXT, "-T", "json"))
    assert [i["format"] for i in items] == ["gzip", "zstd"]
    assert all(len(i["urls"]) == 2 for i in items)
    second = sorted(objectserver.keys("bundles-euc1"))
    assert len(second) == 4  # two generations kept

    # A third generation retires the first, everywhere, after publishing.
    hg("-R", repo, "commit", "--config", "ui.allowemptycommit=1", "-m", "2")
    out = hg("-R", repo, "bundlegen", *EXT, "--config",
             "bundlegen.upload-command=echo $HGCB_BUNDLE_BASENAME "
             "$BUNDLE_NAME >> %s" % (tmp_path / "hook"))
    assert "retired 2 bundles of older generations" in out
    for bucket in ("bundles-usw2", "bundles-euc1"):
        keys = objectserver.keys(bucket)
        assert len(keys) == 4 and not set(first) & set(keys)
    local = os.listdir(local_bundles(repo))
    assert sorted(n for n in local if n.endswith(".hg")) == sorted(
        k.rsplit("/", 1)[1] for k in objectserver.keys("bundles-euc1"))
    hg("verify", "-q", "-R", repo)
    hooks = (tmp_path / "hook").read_text().split()
    assert len(hooks) == 4 and hooks[0] == hooks[1]


def test_a_failed_upload_leaves_every_manifest_and_bucket_as_it_was(
        small_repo, hg, objectserver, s3proxy):
    repo = small_repo
    _configure(repo, objectserver, formats="gzip",
               endpoints={"euc1": s3proxy.url})
    hg("-R", repo, "bundlegen", *EXT)
    manifest = _manifest(repo)
    keys = objectserver.keys("bundles-usw2")
    hg("-R", repo, "commit", "--config", "ui.allowemptycommit=1", "-m", "1")
    # The second destination refuses the upload: the first got its own,
    # which the failed run takes back.
    s3proxy.fault("PUT", "/bundles-euc1/", "status", 403)
    proc = hg.proc("-R", repo, "bundlegen", *EXT)
    assert proc.returncode == 255
    assert proc.stderr.startswith("abort: upload of ")
    assert "euc1" in proc.stderr and "no manifest was changed" in \
        proc.stderr
    assert _manifest(repo) == manifest
    assert objectserver.keys("bundles-usw2") == keys


def _bundle_files(repo):
    return sorted(name for name in os.listdir(local_bundles(repo))
                  if name.endswith(".hg"))


def test_a_destinations_cdn_takes_mercurials_words(small_repo, hg,
                                                  objectserver):
    """Issue 28: ``cdn = on`` was refused (the core read true, false,
    yes, no, 1 and 0 only), though Mercurial reads ``on`` as true; a word
    that is no boolean is refused naming the words."""
    repo = small_repo
    _configure(repo, objectserver, formats="gzip")
    hgrc = repo / ".hg" / "hgrc"
    hgrc.write_text(hgrc.read_text().replace("usw2.cdn = true",
                                             "usw2.cdn = on"))
    hg("-R", repo, "bundlegen", *EXT)
    assert _manifest(repo).splitlines()[0].endswith(
        " ec2region=us-west-2 cdn=true")
    hgrc.write_text(hgrc.read_text().replace("usw2.cdn = on",
                                             "usw2.cdn = maybe"))
    proc = hg.proc("-R", repo, "bundlegen", *EXT)
    assert is_clean_abort(proc), proc.stderr
    assert "destination usw2: cdn must be a boolean (yes or no, on or off, " \
        "true or false, always or never, 1 or 0), not 'maybe'" in proc.stderr


def test_destinations_are_checked_before_any_bundle_is_built(
        small_repo, hg, env, objectserver):
    """Issue 27 item 18: a destination that cannot be used (no bucket, no
    credentials) stops the run before it builds anything."""
    repo = small_repo
    _configure(repo, objectserver, formats="gzip")
    objectserver.client().delete_bucket(Bucket="bundles-euc1")
    proc = hg.proc("-R", repo, "bundlegen", *EXT)
    assert is_clean_abort(proc), proc.stderr
    assert "destination euc1 (s3://bundles-euc1) cannot be used" in \
        proc.stderr and "(create the bucket" in proc.stderr
    assert "built" not in proc.stdout + proc.stderr
    assert not os.path.exists(local_bundles(repo)) or \
        _bundle_files(repo) == []
    objectserver.make_bucket("bundles-euc1")
    nokeys = {key: value for key, value in env.items()
              if not key.startswith("AWS_")}
    nokeys.update(AWS_CONFIG_FILE=os.devnull,
                  AWS_SHARED_CREDENTIALS_FILE=os.devnull,
                  AWS_EC2_METADATA_DISABLED="true")
    proc = subprocess.run([hg.binary, "-R", str(repo), "bundlegen", *EXT],
                          env=nokeys, capture_output=True, text=True,
                          timeout=300)
    assert is_clean_abort(proc), proc.stderr
    assert "(give credentials the way boto3 finds them" in proc.stderr
    assert "built" not in proc.stdout + proc.stderr
    assert _bundle_files(repo) == []


def test_keep_1_leaves_the_replaced_generation_until_the_next_run(
        small_repo, hg, objectserver):
    """Issue 27 item 4: keep = 1 keeps one generation besides the current
    one; the generation a run replaces is never deleted by that run."""
    repo = small_repo
    _configure(repo, objectserver, formats="gzip", keep=1)
    generations = []
    for number in range(3):
        hg("-R", repo, "commit", "--config", "ui.allowemptycommit=1",
           "-m", "gen %d" % number)
        hg("-R", repo, "bundlegen", *EXT)
        generations.append(set(_bundle_files(repo)) - set().union(
            *generations))
    first, second, third = generations
    for bucket in ("bundles-usw2", "bundles-euc1"):
        names = {key.rsplit("/", 1)[1] for key in objectserver.keys(bucket)}
        assert names == second | third
    assert set(_bundle_files(repo)) == second | third
    # The manifest names the newest; the one it replaced still downloads.
    assert all(name.split(".")[0] == _tip(hg, repo) for name in third)


def test_objects_deleted_behind_its_back_are_uploaded_again(
        small_repo, hg, hgserve, objectserver, tmp_path):
    """Issue 27 item 5: a rerun checks that every published object is
    there (HEAD each) before saying it is published already, and uploads
    what is missing from the checked local copy; with the local copy gone
    too, it builds the bundles again."""
    repo = small_repo
    _configure(repo, objectserver, formats="gzip")
    hg("-R", repo, "bundlegen", *EXT)
    [key] = objectserver.keys("bundles-usw2")
    objectserver.client().delete_object(Bucket="bundles-usw2", Key=key)
    out = hg("-R", repo, "bundlegen", *EXT)
    assert "uploaded 1 missing bundles to usw2 again" in out
    assert "nothing to do" in out
    assert objectserver.keys("bundles-usw2") == [key]
    server = hgserve(repo, *EXT)
    out = hg("clone", "-U", "--config",
             "ui.clonebundleprefers=ec2region=us-west-2", server.url,
             tmp_path / "clone")
    assert "applying clone bundle from %sbundles-usw2/" % objectserver.url \
        in out
    hg("verify", "-q", "-R", tmp_path / "clone")

    # Gone from a bucket and from the output directory: built again.
    objectserver.client().delete_object(Bucket="bundles-euc1", Key=key)
    os.unlink(local_bundles(repo) / key.rsplit("/", 1)[1])
    out = hg("-R", repo, "bundlegen", *EXT)
    assert "published bundles are missing from destination euc1" in out
    assert objectserver.keys("bundles-euc1") == [key]
    out = hg("clone", "-U", "--config",
             "ui.clonebundleprefers=ec2region=eu-central-1", server.url,
             tmp_path / "clone2")
    assert "applying clone bundle from %sbundles-euc1/" % objectserver.url \
        in out


def test_refused_deletes_stay_recorded_and_other_destinations_go_on(
        small_repo, hg, objectserver, s3proxy):
    """Issue 27 item 11: a destination that refuses deletes (an Object-Lock
    bucket, a no-delete policy) gets one warning line and exit status 1;
    the other destinations and the output directory are cleaned, and the
    refused objects stay in bundles.json until a later run deletes them."""
    repo = small_repo
    _configure(repo, objectserver, formats="gzip",
               endpoints={"usw2": s3proxy.url})
    s3proxy.fault("POST", "?delete", "status", 403)
    hg("-R", repo, "bundlegen", *EXT)
    [name] = _bundle_files(repo)
    first = "hg/repo/" + name
    hg("-R", repo, "commit", "--config", "ui.allowemptycommit=1", "-m", "2")
    hg("-R", repo, "bundlegen", *EXT)
    hg("-R", repo, "commit", "--config", "ui.allowemptycommit=1", "-m", "3")
    proc = hg.proc("-R", repo, "bundlegen", *EXT)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith("usw2 refused to delete 1 retired bundles "
                           "(%s: " % name)
    assert "AccessDenied" in line and "the test proxy refuses" in line
    assert line.endswith("; the next run tries again")
    assert _tip(hg, repo) in _manifest(repo)
    assert first not in objectserver.keys("bundles-euc1")
    assert first in objectserver.keys("bundles-usw2")
    assert name not in _bundle_files(repo)
    record = json.loads((local_bundles(repo) / "bundles.json")
                        .read_text())
    assert record["undeleted"] == {"usw2": [name]}
    # Still refused: a run with nothing to do says so again.
    proc = hg.proc("-R", repo, "bundlegen", *EXT)
    assert proc.returncode == 1 and "nothing to do" in proc.stdout
    s3proxy.faults.clear()
    out = hg("-R", repo, "bundlegen", *EXT)
    assert "nothing to do" in out
    assert first not in objectserver.keys("bundles-usw2")
    record = json.loads((local_bundles(repo) / "bundles.json")
                        .read_text())
    assert record["undeleted"] == {}


def test_a_stalled_server_ends_the_run_at_its_deadline(
        small_repo, hg, env, objectserver, s3proxy):
    """Issue 27 item 8: bundlegen.upload-timeout bounds all of a run's
    requests to object storage, however a server stalls; a second run
    waits for the lock no longer than ui.timeout."""
    repo = small_repo
    _configure(repo, objectserver, formats="gzip",
               endpoints={"euc1": s3proxy.url}, upload_timeout=5)
    hg("-R", repo, "bundlegen", *EXT)
    manifest = _manifest(repo)
    hg("-R", repo, "commit", "--config", "ui.allowemptycommit=1", "-m", "1")
    s3proxy.fault("PUT", "/bundles-euc1/", "stall")
    started = time.monotonic()
    first = subprocess.Popen(
        [hg.binary, "-R", str(repo), "bundlegen", *EXT], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lock = repo / ".hg" / "bundlegen.lock"
    deadline = time.monotonic() + 60
    while not os.path.lexists(lock) and time.monotonic() < deadline:
        time.sleep(0.05)
    second = hg.proc("-R", repo, "bundlegen", *EXT, "--config",
                     "ui.timeout=1")
    assert is_clean_abort(second), second.stderr
    assert "timed out waiting for lock held by" in second.stderr
    try:
        out, err = first.communicate(timeout=120)
    finally:
        first.kill()
    assert first.returncode == 255 and "Traceback" not in err, err
    assert err.startswith("abort: object storage took longer than 5 "
                          "seconds (bundlegen.upload-timeout)\n"), err
    # a bound, not a ratio: far below the per-read timeouts' minutes
    assert time.monotonic() - started < 90
    assert _manifest(repo) == manifest
    assert len(objectserver.keys("bundles-usw2")) == 1


@pytest.mark.slow
def test_a_second_run_waits_then_skips_the_tip_the_first_published(
        small_repo, hg, env, objectserver):
    repo = small_repo
    _configure(repo, objectserver, formats="gzip")
    # The first run holds the lock while its upload hook sleeps, long
    # enough for the second to start on a loaded machine.
    hook = "bundlegen.upload-command=sleep 8"
    first = subprocess.Popen(
        [hg.binary, "-R", str(repo), "bundlegen", *EXT, "--config", hook],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lock = repo / ".hg" / "bundlegen.lock"
    deadline = time.monotonic() + 120
    while not os.path.lexists(lock) and time.monotonic() < deadline:
        time.sleep(0.05)
    second = hg.proc("-R", repo, "bundlegen", *EXT)
    out, err = first.communicate()
    assert first.returncode == 0, err
    assert second.returncode == 0, second.stderr
    assert "waiting for lock on bundlegen held by process" in second.stderr
    assert "another run published bundles of this tip while this one " \
        "waited" in second.stdout


def test_one_deadline_is_one_budget_over_the_phases_of_a_run():
    """The phases of a run (checks, uploads, deletes) share one
    bundlegen.upload-timeout: a later phase gets only what is left."""
    from vcsperf.core import bundlestore, errors
    deadline = bundlestore.Deadline(2, "bundlegen.upload-timeout")
    with deadline:
        time.sleep(1.5)
    started = time.monotonic()
    with pytest.raises(errors.Abort, match=r"longer than 2 seconds "
                       r"\(bundlegen.upload-timeout\)"):
        with deadline:
            time.sleep(30)
    assert time.monotonic() - started < 20


def test_a_bundle_larger_than_a_part_goes_up_in_checksummed_parts(
        objectserver, tmp_path):
    """The multipart upload (in the calling thread, so that a deadline
    can stop it) stores the file's bytes; a second upload sends
    nothing."""
    import hashlib

    from vcsperf.core import bundlestore
    objectserver.make_bucket("parts")
    destination = bundlestore.Destination("parts", {
        "url": "s3://parts/hg", "region": objectstore.REGION,
        "endpoint": objectserver.url.rstrip("/")})
    path = tmp_path / "big.hg"
    path.write_bytes(os.urandom(5 * 1024 * 1024) * 2 + b"tail")
    sha256, size = bundlestore.sha256_file(str(path))
    chunk = 5 * 1024 * 1024
    client = objectserver.client()
    assert bundlestore.upload(destination, str(path), "big.hg",
                              "application/x-mercurial-bundle", sha256,
                              client=client, chunk=chunk) == size
    body = client.get_object(Bucket="parts", Key="hg/big.hg")["Body"].read()
    assert hashlib.sha256(body).hexdigest() == sha256
    assert bundlestore.upload(destination, str(path), "big.hg",
                              "application/x-mercurial-bundle", sha256,
                              client=client, chunk=chunk) == 0
    assert bundlestore.missing(destination, [
        {"file": "big.hg", "size": size, "sha256": sha256}], client) == []
