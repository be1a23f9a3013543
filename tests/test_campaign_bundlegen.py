"""The adversarial campaign for ``hg bundlegen``: what it writes into
``clonebundles.manifest`` and what it reads (its configuration, the
published manifest) under hypothesis; runs killed with their whole
process group at seeded moments on the real history, after which the
published manifest still matches the files served, a stock client clones
through it, and a rerun finishes; and object storage that lies, stalls,
trickles or refuses deletes, with buckets, output files, the record and
the manifest changed behind the run's back, and a read-only output."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from mercurial import (
    bundlecaches,
    configitems,
    error,
    hg as hglib,
    ui as uimod,
    util,
)

import campaign
from hgext3rd import bundlegen
from test_all_extensions import SUITE
from test_bundlegen import (
    EXT,
    OFFER,
    _tip,
    check_published,
    stock_stream_clone,
)
from vcsperf.harness import tools
from vcsperf.harness.servers import FileServer

pytestmark = pytest.mark.campaign

PROPERTY = settings(max_examples=campaign.size(300, 5000), deadline=None,
                    derandomize=not campaign.FULL,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

DIGEST = hashlib.sha256(b"bundle").hexdigest().encode()
NAME = b"0123456789abcdef0123456789abcdef01234567.gzip.%s.hg" % DIGEST[:16]
# Specs as ``hg debugbundle --spec`` writes them (parameter values quoted
# once), of every format bundlegen builds.
SPECS = [b"zstd-v2", b"gzip-v2", b"none-v2;stream=v2;requirements%3D"
         b"generaldelta%2Crevlogv1%2Csparserevlog"]


@pytest.fixture(scope="module")
def parser_repo(tmp_path_factory):
    """A repository for Mercurial's manifest parser (its requirements say
    which stream bundle specs parse)."""
    path = tmp_path_factory.mktemp("parser") / "repo"
    return hglib.repository(uimod.ui(), bytes(path), create=True)


@pytest.fixture(scope="module")
def bundlegen_ui():
    """A ui that knows bundlegen's settings and their defaults, as one
    that loaded the extension does."""
    ui = uimod.ui()
    configitems.loadconfigtable(ui, b"bundlegen", bundlegen.configtable)
    return ui


def parsed_as(repo, line, url, spec):
    """Whether clients parse ``line`` into exactly this bundle."""
    entries = bundlecaches.parseclonebundlesmanifest(repo, line)
    if len(entries) != 1:
        return False
    expected = {b"URL": url, b"BUNDLESPEC": util.urlreq.unquote(spec),
                b"DIGEST": b"sha256:" + DIGEST}
    if url[:8].lower() == b"https://":
        expected[b"REQUIRESNI"] = b"true"
    attrs = {key: value for key, value in entries[0].items()
             if key in (b"URL", b"BUNDLESPEC", b"DIGEST", b"REQUIRESNI")}
    return attrs == expected


def one_line(err):
    return b"\n" not in err.message and b"\n" not in (err.hint or b"")


def _text(alphabet, max_size):
    return st.text(alphabet=alphabet, max_size=max_size).map(
        lambda text: text.encode("utf-8"))


SCHEMES = st.sampled_from([b"http://", b"https://", b"HTTPS://", b"file:///"])
URLISH = st.one_of(
    # What an admin would write, now and then with a typo.
    st.builds(lambda scheme, rest: scheme + rest, SCHEMES,
              _text("abcXYZ019-._~:/@!$&'()*+,;=[]%2F", 60)),
    st.binary(max_size=80),
    st.text(max_size=80).map(lambda text: text.encode("utf-8")),
    st.builds(lambda scheme, rest: scheme + rest,
              st.sampled_from([b"http://", b"https://", b"HTTPS://",
                               b"file:///", b"file://", b"ftp://", b"",
                               b"//"]),
              st.one_of(st.binary(max_size=60),
                        st.text(alphabet="abc/.-_~%20:@!$&'()*+,;=[]?# "
                                "\t\r\n\x0b\x0c\x00\u00e9",
                                max_size=60)
                        .map(lambda text: text.encode("utf-8")))))


@PROPERTY
@given(base=URLISH)
def test_any_base_url_is_refused_or_parses_back(base, parser_repo, tally):
    """Any base URL: refused at configuration time with one line, or every
    manifest line written with it parses, by Mercurial's own parser, into
    the same URL and attributes."""
    try:
        checked = bundlegen.settings.check_base_url(base)
    except error.Abort as err:
        tally.case(one_line(err), "refusal of %r spans lines" % base)
        assert one_line(err)
        return
    url = checked + b"/" + NAME
    for spec in SPECS:
        line = bundlegen.manifest.manifest_line(parser_repo, url, spec,
                                                DIGEST)
        ok = parsed_as(parser_repo, line, url, spec)
        tally.case(ok, "base URL %r, spec %r: %r" % (base, spec, line))
        assert ok


SPECISH = st.one_of(
    st.builds(lambda head, reqs: head + b"%2C".join(reqs),
              st.sampled_from([b"none-v2;stream=v2;requirements%3D",
                               b"zstd-v2;obsolescence=", b"gzip-v2;x="]),
              st.lists(st.sampled_from([b"revlogv1", b"generaldelta",
                                        b"sparserevlog", b"store",
                                        b"revlog-compression-zstd", b"a%20b",
                                        b"%25", b"x%3By", b"%FF"]),
                       min_size=1, max_size=4)),
    st.binary(max_size=60),
    st.builds(lambda head, params: head + b"".join(params),
              st.sampled_from([b"zstd-v2", b"gzip-v2", b"none-v2",
                               b"bzip2-v1", b"zstd-v3", b"gzip"]),
              st.lists(st.builds(
                  lambda key, value: b";" + key + b"=" + value,
                  st.sampled_from([b"stream", b"requirements",
                                   b"obsolescence", b"cg.version", b"x"]),
                  st.text(alphabet="v2%3D,abc =\t;\r\n\u00e9", max_size=12)
                  .map(lambda text: text.encode("utf-8"))), max_size=3)))


@PROPERTY
@given(spec=SPECISH,
       base=st.sampled_from([b"http://cdn.example.com/b",
                             b"https://cdn.example.com/hg%20b"]))
def test_any_bundle_spec_is_refused_or_parses_back(spec, base, parser_repo,
                                                   tally):
    """Any bundle spec (``debugbundle --spec`` output, read from the
    child): the line is refused with one abort line, or clients parse it
    into the same URL, spec and digest, and understand the spec."""
    url = base + b"/" + NAME
    try:
        line = bundlegen.manifest.manifest_line(parser_repo, url, spec,
                                                DIGEST)
    except error.Abort as err:
        tally.case(one_line(err), "refusal of spec %r spans lines" % spec)
        assert one_line(err)
        return
    entries = bundlecaches.parseclonebundlesmanifest(parser_repo, line)
    ok = (parsed_as(parser_repo, line, url, spec)
          and b"COMPRESSION" in entries[0])
    tally.case(ok, "spec %r: %r" % (spec, line))
    assert ok


MANIFESTISH = st.one_of(
    st.binary(max_size=200),
    st.lists(st.one_of(
        st.sampled_from([b"", b" ", b"http://x/a.hg", b"BUNDLESPEC=gzip-v2",
                         b"DIGEST=sha256:00", b"=", b"a=b=c", b"%zz=%00",
                         b"BUNDLESPEC=none-v2;stream=v2;requirements%3Dx",
                         b"BUNDLESPEC=zstd-v2;x", b"REQUIRESNI=true",
                         b"BUNDLESPEC=;-", b"BUNDLESPEC=gzip;a-b",
                         b"\r", b"\t", b"\xff", b"x"])), max_size=12)
    .map(b" ".join))


@PROPERTY
@given(data=MANIFESTISH)
def test_any_published_manifest_is_read_or_refused(data, parser_repo, tally):
    """Any bytes in ``.hg/clonebundles.manifest``: read into entries, or
    one abort line naming the line; never another exception."""
    parser_repo.vfs.write(bundlegen.manifest.MANIFEST, data)
    try:
        entries = bundlegen.manifest.read_manifest(parser_repo)
    except error.Abort as err:
        ok = one_line(err) and b"clonebundles.manifest line" in err.message
    else:
        ok = all(b"URL" in entry for entry in entries)
        bundlegen.manifest.file_names(entries)
    tally.case(ok, "manifest %r" % data)
    assert ok


SETTINGS = ("zstd-level", "zstd-threads", "jobs", "expire-days", "formats")


@PROPERTY
@given(name=st.sampled_from(SETTINGS),
       value=st.one_of(st.integers(-300, 5000).map(str),
                       st.text(max_size=20),
                       st.sampled_from(["gzip, gzip", "gzip,stream", "",
                                        "zstd-max zstd", "1e3", " 7 "])))
def test_any_setting_is_refused_or_in_range(name, value, bundlegen_ui, tally):
    """Any value of a ``[bundlegen]`` setting: one abort line naming it,
    or a value bundlegen can use."""
    ui = bundlegen_ui.copy()
    ui.setconfig(b"bundlegen", name.encode(), value.encode("utf-8"))
    try:
        checked = bundlegen.settings.Settings(
            ui, b"/srv/bundles", b"https://cdn.example.com/b")
    except error.Abort as err:
        ok = one_line(err) and b"bundlegen." in err.message + (err.hint or b"")
    else:
        ok = (checked.formats and set(checked.formats) <= set(
            bundlegen.formats.FORMATS) and 1 <= checked.zstd_level <= 22
            and checked.jobs >= 1 and checked.zstd_threads >= 0
            and checked.expire_days >= 0)
    tally.case(ok, "%s = %r" % (name, value))
    assert ok


@pytest.mark.slow
def test_hostile_base_urls_abort_cleanly_under_limits(hg, hgrepo, tmp_path,
                                                      env, tally):
    """Seeded hostile base URLs through the real ``hg bundlegen``, under an
    address-space limit: one clean abort, and nothing written."""
    hg("-R", hgrepo, "commit", "-q", "--config", "ui.allowemptycommit=1",
       "-m", "one")
    output = tmp_path / "out"
    for _ in range(campaign.size(4, 40)):
        url = campaign.hostile_url(tally.rng)
        proc = campaign.run_bounded(
            [hg.binary, "-R", str(hgrepo), "bundlegen", *EXT, "--output",
             str(output), "--config", "bundlegen.base-url=" + url],
            env=env, address_space=1 << 30, timeout=120)
        ok = campaign.is_clean_abort(proc) and not output.exists()
        tally.case(ok, "base-url %r: %s" % (url, proc.stderr))
    tally.check()


# Kills ----------------------------------------------------------------------

# The whole suite on the server, as users run it.
SERVER = tuple(arg for name in SUITE + ("clonebundles",)
               for arg in ("--config", "extensions.%s=" % name))
# Copies a bundle in place, as a plain cp would, and takes a moment more,
# as a network would.
UPLOAD = ("import os, shutil, sys, time; shutil.copyfile("
          "os.environ['BUNDLE_PATH'], os.path.join(sys.argv[1], "
          "os.environ['BUNDLE_NAME'])); time.sleep(0.5)")


@pytest.mark.slow
@pytest.mark.timeout(campaign.size(600, 3600))
def test_kill_bundlegen_at_seeded_moments(real_hg_repo, hg, env, hgserve,
                                          tmp_path, tally):
    """kill -9 of the run's process group at seeded moments, on the real
    history, each run at the same tip but with other bytes than the
    published bundle (its caches dropped or rebuilt).  After each kill the
    published manifest matches the files served (the output directory,
    and the copy an upload command writes, in place, elsewhere), a stock
    client clones through it, and a rerun finishes."""
    served = tmp_path / "cdn"
    mirror = tmp_path / "mirror"
    served.mkdir()
    mirror.mkdir()
    files = FileServer(str(served))
    try:
        # --force: a run at the same tip would otherwise do nothing
        argv = [hg.binary, "-R", str(real_hg_repo), "bundlegen", *SERVER,
                "--force", "--config", "bundlegen.formats=stream",
                "--config",
                "bundlegen.upload-command=%s -c \"%s\" %s"
                % (sys.executable, UPLOAD, mirror),
                "--output", str(served), "--base-url", files.url]
        caches = os.path.join(real_hg_repo, ".hg", "cache")

        def change_caches():
            if os.path.isdir(caches):
                shutil.rmtree(caches)
            else:
                hg("-R", real_hg_repo, "debugupdatecaches")

        def rerun():
            hg(*argv[1:])
            check_published(real_hg_repo, served, mirror)

        start = time.monotonic()
        rerun()
        length = time.monotonic() - start
        server = hgserve(real_hg_repo, *OFFER)
        tip = _tip(hg, real_hg_repo)
        points = campaign.size(4, 40)
        print("%d kill points over runs of %.1f s" % (points, length))
        for point in range(points):
            clone = tmp_path / ("clone%d" % point)
            change_caches()
            # Half the kills land anywhere, half near the end of the run,
            # where it publishes.
            if tally.rng.random() < 0.5:
                delay = tally.rng.uniform(0, length * 1.2)
            else:
                delay = tally.rng.uniform(length * 0.7, length * 1.05)
            killed = campaign.kill_after(argv, env, delay)
            what = "point %d at %.2f s (%s)" % (
                point, delay, "killed" if killed else "finished first")
            try:
                check_published(real_hg_repo, served, mirror)
                # The clone checked the bundle's digest; its tip says it
                # holds everything.
                stock_stream_clone(hg, server, clone, verify=False)
                assert _tip(hg, clone) == tip
                rerun()
            except (AssertionError, OSError,
                    tools.CommandError) as err:
                tally.case(False, "%s: %s" % (what, err))
            else:
                tally.case(True, what)
            shutil.rmtree(clone, ignore_errors=True)
        hg("verify", "-q", "-R", real_hg_repo)
    finally:
        files.stop()
    tally.check()


# Object storage (issue 27) --------------------------------------------------

from test_bundlegen_s3 import S3Proxy, local_bundles  # noqa: E402

# What the proxy in front of one destination does wrong: servers that lie
# (an object said missing, or of another length), stall, trickle, fail or
# refuse deletes.
SERVER_FAULTS = [
    ("HEAD", "/hg/", "status", 404),
    ("HEAD", "/hg/", "length", 7),
    ("HEAD", "", "status", 500),
    ("HEAD", "", "stall", None),
    ("PUT", "", "stall", None),
    ("PUT", "", "trickle", 0.5),
    ("HEAD", "/hg/", "trickle", 0.5),
    ("PUT", "", "status", 403),
    ("POST", "?delete", "status", 403),
    ("POST", "?delete", "stall", None),
]
# What changes behind the run's back, between runs.
BEHIND = ["delete object", "replace object", "delete local file",
          "delete object and local file", "delete record",
          "core clone-bundles refresh", "foreign manifest line"]
DEADLINE = 4


def _published_objects(repo, objectserver):
    """Every manifest line names an object whose bytes have the line's
    digest (read from the real server, not through the proxy)."""
    client = objectserver.client()
    manifest = (repo / ".hg" / "clonebundles.manifest").read_text()
    for line in manifest.splitlines():
        url, *attrs = line.split()
        digest = dict(attr.split("=", 1) for attr in attrs)["DIGEST"]
        bucket, key = url[len(objectserver.url):].split("/", 1)
        body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        assert "sha256:" + hashlib.sha256(body).hexdigest() == digest, url
    return manifest


def _behind_its_back(what, repo, hg, objectserver, rng):
    client = objectserver.client()
    output = local_bundles(repo)
    bucket = rng.choice(["bundles-usw2", "bundles-euc1"])
    keys = objectserver.keys(bucket)
    local = sorted(n for n in os.listdir(output) if n.endswith(".hg"))
    if what in ("delete object", "delete object and local file") and keys:
        key = rng.choice(keys)
        client.delete_object(Bucket=bucket, Key=key)
        if what == "delete object and local file":
            name = key.rsplit("/", 1)[1]
            if os.path.exists(output / name):
                os.unlink(output / name)
    elif what == "replace object" and keys:
        client.put_object(Bucket=bucket, Key=rng.choice(keys),
                          Body=b"not the bundle")
    elif what == "delete local file" and local:
        os.unlink(output / rng.choice(local))
    elif what == "delete record":
        os.unlink(output / "bundles.json")
    elif what == "core clone-bundles refresh":
        hg("-R", repo, "--config", "extensions.clonebundles=", "--config",
           "clone-bundles.auto-generate.formats=gzip-v2", "--config",
           "clone-bundles.url-template=http://127.0.0.1:1/{basename}",
           "--config", "clone-bundles.upload-command=true",
           # without it core's refresh crashes on its own older bundles
           "--config", "clone-bundles.delete-command=true",
           "admin::clone-bundles-refresh")
    elif what == "foreign manifest line":
        with open(repo / ".hg" / "clonebundles.manifest", "a") as fh:
            fh.write("http://127.0.0.1:1/x.hg BUNDLESPEC=gzip-v2\n")


@pytest.mark.slow
@pytest.mark.timeout(campaign.size(900, 3600))
def test_object_storage_under_lying_stalling_servers_and_changes_behind(
        hg, hgrepo, hgserve, objectserver, tmp_path, tally):
    """Seeded rounds of ``hg bundlegen`` to two destinations, one behind
    a proxy that lies, stalls, trickles, fails or refuses deletes, with
    the buckets, the output directory, the record or the manifest changed
    behind its back, and the tip moving or not.  Each faulty run ends in
    exit 0, 1 (deletions refused, one line each) or one clean abort,
    within its deadline; after it, every manifest line names an object
    with its digest; a run without faults then publishes, leaves nothing
    to delete, and a stock clone goes through the manifest."""
    from test_bundlegen_s3 import _configure
    repo = hgrepo
    (repo / "a").write_text("a\n" * 200)
    hg("-R", repo, "commit", "-q", "-A", "-m", "a")
    proxy = S3Proxy(objectserver.url)
    try:
        _configure(repo, objectserver, formats="gzip",
                   endpoints={"usw2": proxy.url},
                   upload_timeout=DEADLINE)
        with open(repo / ".hg" / "hgrc", "a") as fh:
            # clients download from the server itself, not the proxy
            fh.write("usw2.base-url = %sbundles-usw2/hg/repo\n"
                     % objectserver.url)
        hg("-R", repo, "bundlegen", *EXT, *OFFER)
        server = hgserve(repo, *OFFER)
        for number in range(campaign.size(6, 60)):
            fault = tally.rng.choice(SERVER_FAULTS)
            behind = tally.rng.choice(BEHIND + [None])
            moved = tally.rng.random() < 0.5
            what = "round %d: %s, %s, %s" % (
                number, fault, behind, "moved" if moved else "same tip")
            try:
                if moved:
                    hg("-R", repo, "commit", "-q", "--config",
                       "ui.allowemptycommit=1", "-m", "r%d" % number)
                if behind:
                    _behind_its_back(behind, repo, hg, objectserver,
                                     tally.rng)
                proxy.faults[:] = [fault]
                started = time.monotonic()
                proc = campaign.run_bounded(
                    [hg.binary, "-R", str(repo), "bundlegen", *EXT, *OFFER],
                    env=hg.env, timeout=300)
                took = time.monotonic() - started
                proxy.faults[:] = []
                assert "Traceback" not in proc.stderr, proc.stderr
                assert (proc.returncode in (0, 1)
                        or campaign.is_clean_abort(proc)), proc.stderr
                if proc.returncode == 1:
                    assert proc.stderr.strip() and all(
                        "the next run tries again" in line
                        for line in proc.stderr.splitlines()), proc.stderr
                # the deadline, plus building and the cleanup's grace
                assert took < DEADLINE + 60, took
                # A run that aborted may leave what was done behind its
                # back as it was; one that published must have repaired it.
                if proc.returncode in (0, 1):
                    _published_objects(repo, objectserver)
                proc = campaign.run_bounded(
                    [hg.binary, "-R", str(repo), "bundlegen", *EXT, *OFFER],
                    env=hg.env, timeout=300)
                assert proc.returncode == 0, proc.stdout + proc.stderr
                _published_objects(repo, objectserver)
                record = json.loads((local_bundles(repo)
                                     / "bundles.json").read_text())
                assert not record.get("undeleted"), record
                clone = tmp_path / ("clone%d" % number)
                out = hg("clone", "-U", server.url, clone)
                assert "applying clone bundle from" in out
                assert _tip(hg, clone) == _tip(hg, repo)
                shutil.rmtree(clone)
            except Exception as err:  # botocore's too: the case failed
                tally.case(False, "%s: %s" % (what, err))
                proxy.faults[:] = []
                # the next round starts from a published state again
                hg.proc("-R", repo, "bundlegen", *EXT, *OFFER, "--force")
            else:
                tally.case(True, what)
    finally:
        proxy.stop()
    tally.check()


def _immutable(path, on):
    """Make ``path`` unwritable even for root (chattr), or for others
    (chmod); False if this system cannot."""
    if os.geteuid() == 0:
        return subprocess.run(["chattr", "+i" if on else "-i", str(path)],
                              capture_output=True).returncode == 0
    os.chmod(path, 0o555 if on else 0o755)
    return True


@pytest.mark.slow
def test_read_only_output_and_record_stop_the_run_before_publishing(
        hg, hgrepo, objectserver, tally):
    """A read-only output directory, or a read-only record in it: one
    clean abort, before anything is built or published (the manifest and
    the buckets as they were), and a run once it is writable again
    publishes."""
    from test_bundlegen_s3 import _configure
    repo = hgrepo
    (repo / "a").write_text("a\n")
    hg("-R", repo, "commit", "-q", "-A", "-m", "a")
    _configure(repo, objectserver, formats="gzip")
    hg("-R", repo, "bundlegen", *EXT, *OFFER)
    output = local_bundles(repo)
    for number, target in enumerate([output, output / "bundles.json"]):
        hg("-R", repo, "commit", "-q", "--config", "ui.allowemptycommit=1",
           "-m", "r%d" % number)
        manifest = (repo / ".hg" / "clonebundles.manifest").read_text()
        keys = objectserver.keys("bundles-euc1")
        if not _immutable(target, True):
            pytest.skip("cannot make a file read-only here")
        try:
            proc = hg.proc("-R", repo, "bundlegen", *EXT, *OFFER)
        finally:
            _immutable(target, False)
        ok = (campaign.is_clean_abort(proc) and "built" not in proc.stdout
              and (repo / ".hg" / "clonebundles.manifest").read_text()
              == manifest and objectserver.keys("bundles-euc1") == keys)
        tally.case(ok, "read-only %s: %s" % (target.name, proc.stderr))
        proc = hg.proc("-R", repo, "bundlegen", *EXT, *OFFER)
        tally.case(proc.returncode == 0, "after %s: %s" % (target.name,
                                                           proc.stderr))
    tally.check()
