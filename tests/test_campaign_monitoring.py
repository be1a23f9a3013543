"""The adversarial campaign for issue 32's monitoring: the metrics
directory given as a file, a dangling or elsewhere-pointing symlink,
/dev/null or an immutable directory; the previous metrics file replaced
by garbage, a huge file, a FIFO, a symlink to a file elsewhere or a
directory; a bundle host that stalls, trickles, lies on HEAD (200 with
another size, 200 for anything), loops its redirects or redirects
without end; and a manifest or record changed behind ``--check-fresh``'s
back, oversized or garbage."""

import json
import os
import subprocess
import time

import pytest

import campaign
from test_bundlegen_monitoring import read_metrics, value
from test_bundlegen_s3 import S3Proxy
from test_campaign_bundlegen import _immutable
from test_contrib_monitoring import _git_published
from vcsperf.core import metrics
from vcsperf.harness import tools

EXT = ("--config", "extensions.bundlegen=",
       "--config", "extensions.clonebundles=")


@pytest.fixture
def published(hg, hgrepo, tmp_path):
    """A repository with bundles served from ``file://`` (nothing to
    start), and the command line of a run."""
    (hgrepo / "a").write_text("a\n")
    hg("-R", hgrepo, "commit", "-q", "-A", "-m", "a")
    out = tmp_path / "out"
    with open(hgrepo / ".hg" / "hgrc", "a") as fh:
        fh.write("[bundlegen]\noutput = %s\nbase-url = file://%s\n"
                 "formats = gzip\n" % (out, out))
    return hgrepo


@pytest.mark.campaign
def test_metrics_directories_that_cannot_be_used(hg, published, tmp_path,
                                                 tally):
    """Each is one abort before anything is built; a symlink to a
    directory is followed (as node_exporter follows it) and nothing is
    written beside it."""
    repo = published
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "file").write_text("x")
    cases = {
        "missing": tmp_path / "missing",
        "a file": tmp_path / "file",
        "a symlink to a file": tmp_path / "link-file",
        "a dangling symlink": tmp_path / "dangling",
        "/dev/null": "/dev/null",
    }
    os.symlink(tmp_path / "file", tmp_path / "link-file")

    def built():
        return (repo / ".hg" / "clonebundles.manifest").exists()
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    for what, directory in cases.items():
        proc = hg.proc("-R", repo, "bundlegen", *EXT, "--metrics-dir",
                       directory)
        tally.case(campaign.is_clean_abort(proc) and "cannot write metrics"
                   in proc.stderr and not built(),
                   "%s: %s" % (what, proc.stderr))
    for tool in ("robustcheckout", "gitbridge"):
        if tool == "gitbridge":
            proc = subprocess.run(
                [tools.executable("gitbridge"), "checkout", "--metricsdir", str(tmp_path /
                                                             "file"),
                 "--sharebase", str(tmp_path / "pool"), "-r", "a" * 40,
                 "http://127.0.0.1:9/r", str(tmp_path / "dest")],
                env=hg.env, capture_output=True, text=True)
        else:
            proc = hg.proc("robustcheckout", "--config",
                           "extensions.robustcheckout=", "--metricsdir",
                           tmp_path / "file", "--sharebase",
                           tmp_path / "pool", "-r", "a" * 40,
                           "http://127.0.0.1:9/r", tmp_path / "dest")
        tally.case(campaign.is_clean_abort(proc)
                   and "cannot write metrics" in proc.stderr
                   and not (tmp_path / "pool").exists(),
                   "%s: %s" % (tool, proc.stderr))

    readonly = tmp_path / "readonly"
    readonly.mkdir()
    if _immutable(readonly, True):
        try:
            proc = hg.proc("-R", repo, "bundlegen", *EXT, "--metrics-dir",
                           readonly)
        finally:
            _immutable(readonly, False)
        tally.case(campaign.is_clean_abort(proc) and not built(),
                   "read-only: %s" % proc.stderr)

    os.symlink(elsewhere, tmp_path / "link-dir")
    proc = hg.proc("-R", repo, "bundlegen", *EXT, "--metrics-dir",
                   tmp_path / "link-dir")
    names = sorted(os.listdir(elsewhere))
    tally.case(proc.returncode == 0 and len(names) == 2
               and names[1].endswith(".prom")
               and names[0] == ".%s.lock" % names[1]
               and os.path.islink(tmp_path / "link-dir"),
               "symlinked directory: %s %r" % (proc.stderr, names))
    tally.check()


@pytest.mark.slow
@pytest.mark.campaign
def test_a_previous_file_that_is_not_ours(hg, published, tmp_path, tally):
    """Whatever holds the file's name, the run succeeds, and afterwards
    the name holds a file Prometheus parses, with this run counted (or,
    when no file can replace it, a warning line); nothing outside the
    directory changes."""
    repo = published
    directory = tmp_path / "textfile"
    directory.mkdir()
    path = directory / metrics.file_name("bundlegen", str(repo))
    outside = tmp_path / "precious"
    outside.write_text("do not touch\n")
    rng = tally.rng
    plants = {
        "garbage": lambda: path.write_bytes(bytes(
            rng.randrange(256) for _ in range(4096))),
        "too big": lambda: path.write_text(
            "vcsperf_bundlegen_runs_total{outcome=\"success\"} 5\n"
            * 100000),
        "lines of ours, broken": lambda: path.write_text(
            'vcsperf_bundlegen_runs_total{outcome="success",repository='
            '"%s",vcs="hg"} NaN\nvcsperf_bundlegen_runs_total{outcome="'
            'failure" 3\nvcsperf_bundlegen_last_failure_timestamp_seconds'
            '{\\"} 1\n\x00\n' % repo),
        "a FIFO": lambda: os.mkfifo(path),
        "a symlink to a file elsewhere": lambda: os.symlink(outside, path),
        "a symlink to /dev/zero": lambda: os.symlink("/dev/zero", path),
    }
    for what, plant in plants.items():
        if os.path.lexists(path):
            os.unlink(path)
        plant()
        started = time.monotonic()
        proc = hg.proc("-R", repo, "bundlegen", *EXT, "--force",
                       "--metrics-dir", directory)
        ok = proc.returncode == 0 and time.monotonic() - started < 60
        try:
            found = read_metrics(directory)
            ok = ok and value(found, "vcsperf_bundlegen_runs_total",
                              outcome="success") == 1
        except Exception as err:  # the parser's, or no sample
            ok = False
            what += " (%r)" % err
        ok = ok and not os.path.islink(path) and \
            outside.read_text() == "do not touch\n"
        tally.case(ok, "%s: %s" % (what, proc.stderr))

    # A directory where the file goes: the run's work stands, one warning.
    os.unlink(path)
    path.mkdir()
    hg("-R", repo, "commit", "-q", "--config", "ui.allowemptycommit=1",
       "-m", "moved")
    manifest = repo / ".hg" / "clonebundles.manifest"
    before = manifest.read_text()
    proc = hg.proc("-R", repo, "bundlegen", *EXT, "--metrics-dir",
                   directory)
    warnings = [line for line in proc.stderr.splitlines()
                if line.startswith("warning: metrics not written")]
    tally.case(proc.returncode == 0 and len(warnings) == 1
               and manifest.read_text() != before
               and not [n for n in os.listdir(directory)
                        if n.endswith(".tmp")],
               "a directory at the name: %s" % proc.stderr)
    tally.check()


class HostileHost(S3Proxy):
    """A bundle host on 127.0.0.1 (the test proxy's connections, with no
    server behind) that answers every request as ``mode`` says: ``ok``
    (200 and the size of the file ``sizes`` names), ``lie`` (200, another
    size), ``any`` (200 and the right size for any path, even one that
    never existed), ``loop`` (a redirect to itself), ``pingpong`` (two
    URLs redirecting to each other), ``chain`` (a redirect to a new URL
    every time), ``stall`` (no answer), ``trickle`` (a head one byte
    every half second), ``500``."""

    def __init__(self):
        super().__init__("http://127.0.0.1:9/")
        self.url = self.url.rstrip("/")
        self.mode = "ok"
        self.sizes = {}

    def _answer(self, conn):
        with conn:
            head = self.read_head(conn)
            if head is None:
                return
            path = head.split(b" ")[1].decode()
            conn.sendall(self._response(conn, path))

    def _response(self, conn, path):
        name = path.rsplit("/", 1)[-1]
        size = self.sizes.get(name, 0)
        if self.mode == "stall":
            self.stopping.wait(120)
            return b""
        if self.mode == "trickle":
            for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 1000:
                if self.stopping.wait(0.5):
                    break
                conn.sendall(bytes([byte]))
            return b""
        if self.mode in ("loop", "pingpong", "chain"):
            target = {"loop": path,
                      "pingpong": path + "x" if not path.endswith("x")
                      else path[:-1],
                      "chain": path + "/more"}[self.mode]
            return (b"HTTP/1.1 302 Found\r\nLocation: %s\r\nContent-Length: "
                    b"0\r\n\r\n" % target.encode())
        status = b"500 Oops" if self.mode == "500" else b"200 OK"
        if self.mode == "lie":
            size += 7
        if self.mode == "any":
            size = max(self.sizes.values())
        return b"HTTP/1.1 %s\r\nContent-Length: %d\r\n\r\n" % (status, size)


@pytest.fixture
def host():
    host = HostileHost()
    yield host
    host.stop()


def _verdict(proc, words):
    """Whether ``--check-fresh`` said fresh (``words`` None) or stale,
    with one of ``words`` (a string, or a tuple of them), in one line."""
    lines = proc.stdout.splitlines()
    if words is None:
        return proc.returncode == 0 and lines[0].startswith("fresh: ")
    return (proc.returncode == 1 and len(lines) == 1
            and lines[0].startswith("stale: ")
            and any(w in lines[0] for w in (
                words if isinstance(words, tuple) else [words])))


@pytest.mark.slow
@pytest.mark.campaign
def test_a_bundle_host_that_stalls_lies_or_loops(hg, hgrepo, host,
                                                 tmp_path, tally):
    """Every mode ends in one ``stale:`` line and status 1 within the
    check's timeout (3 s here), but ``ok`` (fresh) and ``any`` (a host
    that says 200 with the right size for anything: HEAD cannot tell)."""
    repo = hgrepo
    (repo / "a").write_text("a\n")
    hg("-R", repo, "commit", "-q", "-A", "-m", "a")
    out = tmp_path / "out"
    with open(repo / ".hg" / "hgrc", "a") as fh:
        fh.write("[bundlegen]\noutput = %s\nbase-url = %s/b\nformats = "
                 "gzip\n" % (out, host.url))
    hg("-R", repo, "bundlegen", *EXT)
    record = json.loads((out / "bundles.json").read_text())
    host.sizes = {b["file"]: b["size"] for b in record["bundles"]}
    expected = {
        "ok": None, "any": None, "lie": "bytes, the published bundle",
        "loop": "redirects in a loop", "pingpong": "redirects in a loop",
        "chain": "redirects more than 5 times", "500": "answers HTTP 500",
        # the request's timeout, or the total one: both are 3 s here
        "stall": ("cannot be reached: timed out", "did not all answer"),
        "trickle": "did not all answer within 3 s",
    }
    for mode, words in expected.items():
        host.mode = mode
        started = time.monotonic()
        proc = hg.proc("-R", repo, "bundlegen", *EXT, "--check-fresh",
                       "--check-timeout", "3")
        took = time.monotonic() - started
        tally.case(_verdict(proc, words) and took < 30 and "Traceback" not in proc.stderr,
                   "%s (%.1f s): %r %r" % (mode, took, proc.stdout,
                                           proc.stderr))

    # The manifest and record changed behind its back.
    host.mode = "ok"
    manifest = repo / ".hg" / "clonebundles.manifest"
    original = manifest.read_bytes()
    changes = {
        "a manifest edited": lambda: manifest.write_bytes(
            original.replace(b"gzip", b"gzip ", 1)),
        "a huge manifest": lambda: manifest.write_bytes(
            original * (2 << 20 // len(original) + 1)),
        "a manifest gone": lambda: manifest.unlink(),
        "a record of garbage": lambda: (out / "bundles.json").write_bytes(
            b"\x00{" * 1000),
    }
    for what, change in changes.items():
        saved = (out / "bundles.json").read_bytes()
        change()
        proc = hg.proc("-R", repo, "bundlegen", *EXT, "--check-fresh",
                       "--check-timeout", "3")
        ok = ((proc.returncode == 1 and proc.stdout.startswith("stale: "))
              or campaign.is_clean_abort(proc))
        tally.case(ok and "Traceback" not in proc.stderr,
                   "%s: %r %r" % (what, proc.stdout, proc.stderr))
        manifest.write_bytes(original)
        (out / "bundles.json").write_bytes(saved)
    tally.case(hg.proc("-R", repo, "bundlegen", *EXT, "--check-fresh")
               .returncode == 0, "restored")
    tally.check()


@pytest.mark.campaign
def test_gitbridge_check_fresh_against_a_hostile_host(git, gitbridge, host,
                                                      tmp_path, tally):
    """The Git twin reads the same answers the same way, and a record
    changed behind its back is one abort, never a request it names."""
    repo, out = _git_published(git, gitbridge, tmp_path, host.url + "/b")
    [name] = [n for n in os.listdir(out) if n.endswith(".bundle")]
    host.sizes = {name: os.path.getsize(out / name),
                  "bundle-list": os.path.getsize(out / "bundle-list")}
    for mode, words in [("ok", None), ("lie", "bytes, the published"),
                        ("loop", "redirects in a loop"),
                        # the request's timeout or the total: both 2 s
                        ("stall", ("timed out", "within 2 s")),
                        ("500", "answers HTTP 500")]:
        host.mode = mode
        started = time.monotonic()
        proc = gitbridge("bundlegen", "--repo", repo, "--check-fresh",
                         "--check-timeout", "2", check=False)
        tally.case(_verdict(proc, words) and time.monotonic() - started < 30
                   and "Traceback" not in proc.stderr,
                   "%s: %r %r" % (mode, proc.stdout, proc.stderr))
    host.mode = "ok"
    record = out / "bundles.json"
    saved = record.read_text()
    edited = json.loads(saved)
    edited["generations"][0]["chain"][0]["file"] = "../../etc/passwd"
    for what, text in [("garbage", "\x00{" * 100),
                       ("a name outside", json.dumps(edited))]:
        record.write_text(text)
        before = len(host.log)
        proc = gitbridge("bundlegen", "--repo", repo, "--check-fresh",
                         check=False)
        tally.case(campaign.is_clean_abort(proc) and len(host.log) == before,
                   "%s: %r" % (what, proc.stderr))
    record.write_text(saved)
    tally.check()
