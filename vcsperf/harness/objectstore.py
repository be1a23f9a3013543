"""A real S3-compatible object server on 127.0.0.1 for the tests, the
benchmarks and CI: versitygw (https://github.com/versity/versitygw, Apache
2.0) on its posix backend, in a directory of the caller's.

The binary is built once with ``go install`` from the Go module proxy and
cached under ``$VCSPERF_CACHE/bin/versitygw-VERSION/`` (default
``~/.cache/vcsperf``), so a run that finds it there needs no network and no
Go.  ``python -m vcsperf.harness.objectstore`` builds it ahead of time (CI
does), and prints its path.

``ObjectServer(root)`` serves the buckets of ``root/data`` and writes S3's
server access log format to ``root/access.log``; ``requests()`` reads it
back, so a test sees which objects a client fetched.
"""

import fcntl
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

from vcsperf.harness.servers import ChildServer

VERSITYGW_MODULE = "github.com/versity/versitygw/cmd/versitygw"
VERSITYGW_VERSION = "v1.8.0"
ACCESS_KEY = "vcsperf-test-access"
SECRET_KEY = "vcsperf-test-secret-key"
REGION = "us-east-1"


def cache_root():
    return os.environ.get("VCSPERF_CACHE",
                          os.path.expanduser("~/.cache/vcsperf"))


def _go():
    found = shutil.which("go") or "/usr/local/go/bin/go"
    if not os.path.exists(found):
        raise RuntimeError("versitygw is not cached and Go is not installed "
                           "(looked on PATH and at /usr/local/go/bin/go)")
    return found


def versitygw_binary():
    """Path of the cached versitygw binary, built first if missing.
    Concurrent callers (pytest-xdist workers) build it once: the build
    runs under a lock file, into a directory renamed into place."""
    folder = os.path.join(cache_root(), "bin",
                          "versitygw-" + VERSITYGW_VERSION)
    binary = os.path.join(folder, "versitygw")
    if os.path.exists(binary):
        return binary
    os.makedirs(os.path.dirname(folder), exist_ok=True)
    with open(folder + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(binary):
            building = folder + ".building"
            shutil.rmtree(building, ignore_errors=True)
            env = dict(os.environ, GOBIN=building, GOFLAGS="-mod=mod",
                       CGO_ENABLED="0")
            subprocess.run([_go(), "install",
                            "%s@%s" % (VERSITYGW_MODULE, VERSITYGW_VERSION)],
                           env=env, check=True, cwd=cache_root(),
                           stdout=subprocess.DEVNULL)
            os.rename(building, folder)
    return binary


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _listening(pid, port):
    """Whether process ``pid`` holds the socket listening on 127.0.0.1's
    ``port`` (from ``/proc``; true where there is none to ask)."""
    fds = "/proc/%d/fd" % pid
    try:
        with open("/proc/net/tcp") as fh:
            rows = [line.split() for line in fh.readlines()[1:]]
        names = os.listdir(fds)
    except OSError:
        return not os.path.isdir("/proc/self")
    sockets = set()
    for name in names:
        try:
            sockets.add(os.readlink(os.path.join(fds, name)))
        except OSError:
            pass  # closed since it was listed
    address = "0100007F:%04X" % port
    return any(row[1] == address and row[3] == "0A"  # LISTEN
               and "socket:[%s]" % row[9] in sockets for row in rows)


class ObjectServer(ChildServer):
    """versitygw serving ``root/data`` at ``url`` (path-style:
    ``url + BUCKET/KEY``), stopped by ``stop()`` or at the end of the
    ``with`` block.  ``ACCESS_KEY``/``SECRET_KEY`` are its root user's."""

    def __init__(self, root):
        # absolute: versitygw resolves a relative log path elsewhere
        self.root = os.path.abspath(root)
        self.data = os.path.join(self.root, "data")
        self.access_log = os.path.join(self.root, "access.log")
        os.makedirs(self.data, exist_ok=True)
        binary = versitygw_binary()
        for attempt in range(5):
            port = _free_port()
            self.url = "http://127.0.0.1:%d/" % port
            with open(os.path.join(self.root, "server.log"), "ab") as log:
                self.proc = subprocess.Popen(
                    [binary, "--port", "127.0.0.1:%d" % port,
                     "--access", ACCESS_KEY, "--secret", SECRET_KEY,
                     "--region", REGION, "--access-log", self.access_log,
                     "posix", self.data],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log)
            # the port was free when asked; another process (a test
            # worker's server) may have taken it since
            if self._wait_until_up() and _listening(self.proc.pid, port):
                return
            self.stop()
        raise RuntimeError("versitygw did not start; see %s"
                           % os.path.join(self.root, "server.log"))

    def _wait_until_up(self):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                urllib.request.urlopen(self.url, timeout=5)
            except urllib.error.HTTPError:
                return True  # it answers (403 to an anonymous listing)
            except OSError:
                time.sleep(0.1)
                continue
            return True
        return False

    def environ(self):
        """Environment variables that give boto3 this server's keys."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                "AWS_EC2_METADATA_DISABLED": "true"}

    def client(self):
        import boto3
        return boto3.client("s3", endpoint_url=self.url, region_name=REGION,
                            aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY)

    def make_bucket(self, name, public=True):
        """Create bucket ``name``; ``public``: anyone may GET its objects,
        as clients do from a CDN."""
        client = self.client()
        client.create_bucket(Bucket=name)
        if public:
            client.put_bucket_policy(Bucket=name, Policy=(
                '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow",'
                ' "Principal": "*", "Action": ["s3:GetObject"],'
                ' "Resource": ["arn:aws:s3:::%s/*"]}]}' % name))
        return self.url + name

    def keys(self, bucket):
        """Every key of ``bucket``, sorted."""
        pages = self.client().get_paginator("list_objects_v2").paginate(
            Bucket=bucket)
        return sorted(item["Key"] for page in pages
                      for item in page.get("Contents", ()))

    def requests(self):
        """``(operation, bucket, key, status)`` of every request so far, in
        order, from the access log (S3's format: operations such as
        ``REST.GET.OBJECT`` or ``GetObject``, ``-`` for no key)."""
        entries = []
        if not os.path.exists(self.access_log):
            return entries
        with open(self.access_log) as fh:
            for line in fh:
                fields = line.split()
                if len(fields) < 12 or not fields[2].startswith("["):
                    continue
                # owner bucket [time zone] ip requester id operation key
                # uri status...; the time may hold a space
                end = next(i for i, f in enumerate(fields) if f.endswith("]"))
                rest = fields[end + 1:]
                entries.append((rest[3], fields[1], rest[4], rest[6]))
        return entries

    def gets(self, bucket=None):
        """Keys of the objects fetched whole or in part, in order."""
        return [key for operation, where, key, status in self.requests()
                if "get" in operation.lower() and "object" in
                operation.lower() and key != "-"
                and bucket in (None, where) and status.startswith("2")]



if __name__ == "__main__":
    print(versitygw_binary())
    sys.exit(0)
