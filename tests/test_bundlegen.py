"""bundlegen end to end on the real-content repository: bundles are built,
a real HTTP server on 127.0.0.1 serves them, ``hg serve`` hands out the
manifest, and ``hg clone`` uses them (seen in its output and in the file
server's log); a 404 or a truncated body falls back to a normal clone."""

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from campaign import is_clean_abort
from vcsperf.harness.servers import FileServer

EXT = ("--config", "extensions.bundlegen=")
# Core's extension that makes hg serve offer clonebundles.manifest.
OFFER = ("--config", "extensions.clonebundles=")
FALLBACK = ("--config", "ui.clonebundlefallback=true")


@pytest.fixture
def fileserver(tmp_path):
    root = tmp_path / "cdn"
    root.mkdir()
    server = FileServer(str(root))
    yield server
    server.stop()


@pytest.fixture
def early_hg_repo(real_hg_repo_cached, hg, tmp_path):
    """The first ten releases of the real-content repository, with no
    working directory: real history for what does not depend on its size
    (what a manifest names, failed uploads, expiry, reruns), built into
    bundles in a fraction of the time all of it takes (zstd-max most)."""
    dest = tmp_path / "early"
    hg("clone", "-q", "-U", "-r", "9", real_hg_repo_cached, dest)
    return dest


def _generate(hg, repo, server, *extra, check=True):
    args = ("-R", repo, "bundlegen", *EXT, *OFFER, "--output", server.root,
            "--base-url", server.url.rstrip("/"), *extra)
    return hg(*args) if check else hg.proc(*args)


def _manifest(repo):
    path = os.path.join(repo, ".hg", "clonebundles.manifest")
    with open(path) as fh:
        return fh.read()


def _tip(hg, repo):
    return hg("log", "-R", repo, "-r", "tip", "-T", "{node}")


@pytest.mark.slow
def test_generate_serve_and_clone_from_bundles(real_hg_repo, hg, hgserve,
                                               fileserver, tmp_path):
    out = _generate(hg, real_hg_repo, fileserver)
    tip = _tip(hg, real_hg_repo)
    index = json.loads(open(os.path.join(fileserver.root,
                                         "bundles.json")).read())
    # <tip>.<format>.<start of the bundle's sha256>.hg
    names = ["%s.%s.%s.hg" % (tip, bundle["format"], bundle["sha256"][:16])
             for bundle in index["bundles"]]
    assert [name.split(".")[1] for name in names] == ["zstd-max", "gzip",
                                                      "stream"]
    for name in names:
        assert name in out
    assert sorted(n for n in os.listdir(fileserver.root)
                  if not n.startswith(".")) == sorted(names +
                                                      ["bundles.json"])

    lines = _manifest(real_hg_repo).splitlines()
    assert [line.split()[0] for line in lines] == [
        fileserver.url + name for name in names]
    assert all(re.search(r" DIGEST=sha256:[0-9a-f]{64}$", line)
               for line in lines)
    assert lines[0].split()[1] == "BUNDLESPEC=zstd-v2"
    assert lines[2].split()[1].startswith(
        "BUNDLESPEC=none-v2;stream=v2;requirements%3D")

    assert index["tip"] == tip
    assert [b["format"] for b in index["bundles"]] == ["zstd-max", "gzip",
                                                       "stream"]
    for bundle in index["bundles"]:
        assert bundle["size"] == os.path.getsize(
            os.path.join(fileserver.root, bundle["file"]))

    server = hgserve(real_hg_repo, *OFFER)
    # The first line (zstd-max) by default; the others when preferred.
    for prefers, name in ((None, names[0]),
                          ("COMPRESSION=gzip", names[1]),
                          ("VERSION=v2", names[0])):
        dest = tmp_path / ("clone-%s" % (prefers or "default")).replace(
            "=", "-").replace(";", "-")
        config = ("--config", "ui.clonebundleprefers=%s" % prefers) \
            if prefers else ()
        before = len(fileserver.log)
        out = hg("clone", "-U", *config, server.url, dest)
        assert "applying clone bundle from %s" % fileserver.url in out
        assert [path for path, status in fileserver.log[before:]] == [
            "/" + name]
        hg("verify", "-q", "-R", dest)
        assert _tip(hg, dest) == tip


@pytest.mark.slow
def test_stream_bundle_serves_stream_clones(early_hg_repo, hg, hgserve,
                                                    fileserver, tmp_path):
    _generate(hg, early_hg_repo, fileserver, "--config",
              "bundlegen.formats=stream, gzip")
    server = hgserve(early_hg_repo, *OFFER)
    out = hg("clone", "-U", "--stream", server.url, tmp_path / "clone")
    assert re.search(r"\d+ files to transfer", out)
    assert re.search(r"\.stream\.[0-9a-f]{16}\.hg$", fileserver.log[0][0])
    hg("verify", "-q", "-R", tmp_path / "clone")


@pytest.mark.slow
@pytest.mark.parametrize("failure", ["404", "truncated"])
def test_broken_bundle_falls_back_to_a_normal_clone(failure, early_hg_repo, hg,
                                                    hgserve, fileserver,
                                                    tmp_path):
    _generate(hg, early_hg_repo, fileserver, "--config",
              "bundlegen.formats=gzip")
    [name] = [n for n in os.listdir(fileserver.root) if n.endswith(".hg")]
    if failure == "404":
        fileserver.missing.add(name)
    else:
        fileserver.truncate[name] = 100000
    server = hgserve(early_hg_repo, *OFFER)
    dest = tmp_path / "clone"
    # A truncated download needs this extension on the client too.
    proc = hg.proc("clone", "-U", *FALLBACK, *EXT, server.url, dest)
    assert proc.returncode == 0, proc.stderr
    output = proc.stdout + proc.stderr
    assert "falling back to normal clone" in output
    assert fileserver.log[0][0] == "/" + name
    hg("verify", "-q", "-R", dest)
    assert _tip(hg, dest) == _tip(hg, early_hg_repo)
    # Without the fallback setting the client stops with a clear error.
    proc = hg.proc("clone", "-U", server.url, tmp_path / "strict")
    assert proc.returncode != 0 and "abort:" in proc.stderr
    assert not (tmp_path / "strict").exists()


@pytest.mark.slow
def test_failed_upload_and_bad_config_leave_the_manifest_alone(
        early_hg_repo, hg, fileserver, tmp_path):
    _generate(hg, early_hg_repo, fileserver, "--config",
              "bundlegen.formats=gzip")
    manifest = _manifest(early_hg_repo)
    hg("-R", early_hg_repo, "commit", "--config", "ui.allowemptycommit=1",
       "-m", "one more")

    proc = _generate(hg, early_hg_repo, fileserver, "--config",
                     "bundlegen.formats=gzip, zstd-maxx", check=False)
    assert proc.returncode != 0
    assert "unknown bundle format in bundlegen.formats: zstd-maxx" in \
        proc.stderr
    proc = _generate(hg, early_hg_repo, fileserver, "--config",
                     "bundlegen.upload-command=exit 3", check=False)
    assert proc.returncode != 0
    assert proc.stderr.startswith("abort: upload of ")
    assert "exited with status 3" in proc.stderr
    assert _manifest(early_hg_repo) == manifest
    assert not os.path.exists(os.path.join(
        early_hg_repo, ".hg", "clonebundles.manifest.old"))

    log = tmp_path / "uploads"
    _generate(hg, early_hg_repo, fileserver, "--config",
              "bundlegen.formats=gzip", "--config",
              "bundlegen.upload-command=echo $BUNDLE_NAME $BUNDLE_SHA256 "
              ">> %s" % log)
    assert _manifest(early_hg_repo) != manifest
    with open(os.path.join(early_hg_repo, ".hg",
                           "clonebundles.manifest.old")) as fh:
        assert fh.read() == manifest
    [uploaded] = log.read_text().splitlines()
    name, digest = uploaded.split()
    assert name.startswith(_tip(hg, early_hg_repo))
    assert "DIGEST=sha256:%s" % digest in _manifest(early_hg_repo)


def test_old_bundles_expire_and_leftovers_are_cleaned(early_hg_repo, hg,
                                                      fileserver):
    root = fileserver.root
    old = os.path.join(root, "0" * 40 + ".gzip.hg")
    recent = os.path.join(root, "1" * 40 + ".gzip.hg")
    leftover = os.path.join(root, ".bundlegen-tmp-" + "2" * 40 + ".gzip.hg")
    for path in (old, recent, leftover):
        with open(path, "wb") as fh:
            fh.write(b"x")
    eight_days_ago = time.time() - 8 * 86400
    os.utime(old, (eight_days_ago, eight_days_ago))
    out = _generate(hg, early_hg_repo, fileserver, "--config",
                    "bundlegen.formats=gzip")
    assert "deleted 1 expired bundles" in out
    assert not os.path.exists(old) and not os.path.exists(leftover)
    assert os.path.exists(recent)


@pytest.mark.slow
def test_bundles_are_built_from_one_snapshot(real_hg_repo, hg, hgrc,
                                           fileserver):
    # Every ``hg bundle`` run commits to the live repository while it
    # builds (through a hook in the global hgrc, which the bundling
    # processes read): none of those commits may reach any bundle.
    tip = _tip(hg, real_hg_repo)
    with open(hgrc, "a") as fh:
        fh.write("[hooks]\npreoutgoing.race = %s -R %s commit -q "
                 "--config ui.allowemptycommit=1 -m racing\n"
                 % (hg.binary, real_hg_repo))
    _generate(hg, real_hg_repo, fileserver, "--config",
              "bundlegen.formats=gzip, zstd")
    racing = hg("log", "-R", real_hg_repo, "-r", "desc(racing)",
                "-T", "{node}\n").split()
    assert racing
    index = json.loads(open(os.path.join(fileserver.root,
                                         "bundles.json")).read())
    assert index["tip"] == tip
    for bundle in index["bundles"]:
        assert bundle["file"].startswith(tip)
        out = hg("debugbundle", os.path.join(fileserver.root,
                                             bundle["file"]))
        assert tip in out
        assert not any(node in out for node in racing)


def test_help_lists_formats_and_settings(hg):
    out = hg("help", *EXT, "-e", "bundlegen")
    for word in ("zstd-max", "gzip", "stream", "upload-command",
                 "expire-days", "base-url", "REQUIRESNI", "DIGEST"):
        assert word in out


@pytest.mark.slow
def test_cron_script_runs_every_repository_and_reports_failures(
        real_hg_repo, hg, env, fileserver, tmp_path):
    script = os.path.join(os.path.dirname(__file__), os.pardir, "contrib",
                          "bundlegen", "bundlegen-cron.sh")
    with open(os.path.join(real_hg_repo, ".hg", "hgrc"), "a") as fh:
        fh.write("[extensions]\nbundlegen =\nclonebundles =\n"
                 "[bundlegen]\noutput = %s\nbase-url = %s\nformats = gzip\n"
                 % (fileserver.root, fileserver.url))
    unconfigured = tmp_path / "unconfigured"
    hg("init", unconfigured)
    run_env = dict(env, HG=hg.binary)
    proc = subprocess.run(["sh", script, str(unconfigured), str(real_hg_repo)],
                          env=run_env, capture_output=True, text=True)
    assert proc.returncode == 1
    assert "bundlegen failed for %s" % unconfigured in proc.stderr
    assert ".gzip." in _manifest(real_hg_repo)


# Broken and hostile input (issue 18) ----------------------------------------

STREAM = ("--config", "bundlegen.formats=stream")


def check_published(repo, *served_dirs):
    """Every line of the published manifest names a file whose sha256 is
    the line's DIGEST, in every directory clients are served from."""
    lines = _manifest(repo).splitlines()
    assert lines
    for line in lines:
        url, *attrs = line.split()
        digest = dict(attr.split("=", 1) for attr in attrs)["DIGEST"]
        for root in served_dirs:
            with open(os.path.join(root, url.rsplit("/", 1)[1]), "rb") as fh:
                assert "sha256:" + hashlib.sha256(fh.read()).hexdigest() \
                    == digest, (url, root)


def stock_stream_clone(hg, server, dest, verify=True):
    """A clone by plain hg (no vcsperf extension) through the manifest."""
    proc = hg.proc("clone", "-U", "--stream", server.url, dest)
    assert proc.returncode == 0, proc.stderr
    assert "applying clone bundle from" in proc.stdout
    if verify:
        hg("verify", "-q", "-R", dest)


@pytest.mark.slow
def test_rerun_at_the_same_tip_never_changes_a_published_bundle(
        early_hg_repo, hg, hgserve, fileserver, tmp_path):
    # A stream bundle holds .hg/cache, so dropping it changes the bytes of
    # the next run's bundle at the same tip; that run's upload then fails.
    _generate(hg, early_hg_repo, fileserver, *STREAM)
    manifest = _manifest(early_hg_repo)
    shutil.rmtree(os.path.join(early_hg_repo, ".hg", "cache"))
    proc = _generate(hg, early_hg_repo, fileserver, *STREAM, "--force",
                     "--config", "bundlegen.upload-command=exit 3",
                     check=False)
    assert proc.stderr.startswith("abort: upload of ")
    assert _manifest(early_hg_repo) == manifest
    check_published(early_hg_repo, fileserver.root)
    server = hgserve(early_hg_repo, *OFFER)
    stock_stream_clone(hg, server, tmp_path / "clone")

    # The next run publishes the new bytes under a new name; the old file
    # stays for clients that read the manifest just before.
    _generate(hg, early_hg_repo, fileserver, *STREAM, "--force")
    assert _manifest(early_hg_repo) != manifest
    check_published(early_hg_repo, fileserver.root)
    old = manifest.split()[0].rsplit("/", 1)[1]
    assert os.path.exists(os.path.join(fileserver.root, old))
    stock_stream_clone(hg, server, tmp_path / "clone2")


UPLOAD = r'''
import hashlib, os, shutil, sys
manifest, staged, served = sys.argv[1:]
def check():
    for line in open(manifest).read().splitlines():
        url, *attrs = line.split()
        digest = dict(a.split("=", 1) for a in attrs)["DIGEST"]
        with open(os.path.join(served, url.rsplit("/", 1)[1]), "rb") as fh:
            if "sha256:" + hashlib.sha256(fh.read()).hexdigest() != digest:
                sys.exit("served %s does not match the manifest" % url)
check()
# Not atomic, as a plain cp to a web server's directory is not.
with open(os.path.join(staged, os.environ["BUNDLE_NAME"]), "rb") as src, \
        open(os.path.join(served, os.environ["BUNDLE_NAME"]), "wb") as dst:
    shutil.copyfileobj(src, dst)
check()
with open(os.path.join(served, "uploads"), "a") as fh:
    fh.write(os.environ["BUNDLE_NAME"] + "\n")
'''


@pytest.mark.slow
def test_uploads_never_change_what_the_manifest_names(early_hg_repo, hg,
                                                      fileserver, tmp_path):
    staged = tmp_path / "staged"
    script = tmp_path / "upload.py"
    script.write_text(UPLOAD)
    manifest = os.path.join(early_hg_repo, ".hg", "clonebundles.manifest")
    upload = ("--config", "bundlegen.upload-command=%s %s %s %s %s" % (
        sys.executable, script, manifest, staged, fileserver.root))

    def run():
        hg("-R", early_hg_repo, "bundlegen", *EXT, *STREAM, *upload,
           "--force", "--output", staged, "--base-url", fileserver.url)
        check_published(early_hg_repo, staged, fileserver.root)

    open(manifest, "w").close()
    run()
    shutil.rmtree(os.path.join(early_hg_repo, ".hg", "cache"))
    run()
    run()  # the same bytes again: already published, so not uploaded
    uploads = open(os.path.join(fileserver.root, "uploads")).read().split()
    assert len(uploads) == 2 and uploads[0] != uploads[1]


@pytest.mark.slow
def test_orphans_of_a_killed_run_do_not_stop_the_next(real_hg_repo, hg, env,
                                                      fileserver):
    # Only the run itself is killed (not its process group), while its
    # hg bundle children are running.
    args = [hg.binary, "-R", str(real_hg_repo), "bundlegen", *EXT,
            "--config", "bundlegen.formats=gzip, zstd", "--output",
            fileserver.root, "--base-url", fileserver.url]
    run = subprocess.Popen(args, env=env, start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def children():
        out = subprocess.run(["ps", "-o", "pid=", "-g", str(run.pid)],
                             capture_output=True, text=True).stdout
        return [int(pid) for pid in out.split() if int(pid) != run.pid]

    deadline = time.monotonic() + 120
    while len(children()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert children(), "hg bundlegen started no hg bundle"
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    _generate(hg, real_hg_repo, fileserver, "--config",
              "bundlegen.formats=gzip")
    check_published(real_hg_repo, fileserver.root)
    # On Linux, the children died with their parent.
    if sys.platform.startswith("linux"):
        assert not children()


def _first_quick(cases):
    """The first case in the quick lane, the others marked slow."""
    return cases[:1] + [pytest.param(case, marks=pytest.mark.slow)
                        for case in cases[1:]]


@pytest.mark.parametrize("url", _first_quick([
    "http://cdn.example.com/hg bundles", "http://cdn.example.com/x\ty",
    "cdn.example.com/bundles", "/var/www/bundles", "http://", "https:///x",
    "ftp://cdn.example.com/x", "http://cdn.example.com/x?sig=1",
    "http://cdn.example.com/%zz", "http://cdn.example.com/caf\u00e9"]))
def test_base_urls_clients_cannot_use_are_refused(url, real_hg_repo, hg,
                                                  fileserver):
    proc = hg.proc("-R", real_hg_repo, "bundlegen", *EXT, "--output",
                   fileserver.root, "--config", "bundlegen.base-url=" + url)
    assert is_clean_abort(proc), proc.stderr
    assert "bundlegen.base-url" in proc.stderr and "\n(" in proc.stderr
    assert os.listdir(fileserver.root) == []
    assert not os.path.exists(os.path.join(real_hg_repo, ".hg",
                                           "clonebundles.manifest"))


@pytest.mark.parametrize("setting", _first_quick([
    "zstd-level=23", "zstd-level=x", "jobs=0", "jobs=many", "zstd-threads=-1",
    "expire-days=-1", "formats=", "formats=gzip, gzip", "formats=gzip, zip"]))
def test_bad_settings_abort_before_any_work(setting, real_hg_repo, hg,
                                            fileserver):
    proc = _generate(hg, real_hg_repo, fileserver, "--config",
                     "bundlegen." + setting, check=False)
    assert is_clean_abort(proc), proc.stderr
    assert "bundlegen." + setting.split("=")[0] in proc.stderr
    assert os.listdir(fileserver.root) == []


@pytest.mark.slow
def test_damaged_manifest_and_odd_files_on_disk(early_hg_repo, hg,
                                                fileserver, tmp_path):
    manifest = os.path.join(early_hg_repo, ".hg", "clonebundles.manifest")
    with open(manifest, "wb") as fh:
        fh.write(b"http://cdn.example.com/a b.hg BUNDLESPEC=gzip-v2\n")
    proc = _generate(hg, early_hg_repo, fileserver, check=False)
    assert is_clean_abort(proc), proc.stderr
    assert "clonebundles.manifest line 1" in proc.stderr
    assert os.listdir(fileserver.root) == []

    # An output path that is a file; names in the output directory that
    # are not UTF-8, and a directory whose name ends in .hg.
    proc = hg.proc("-R", early_hg_repo, "bundlegen", *EXT, "--output",
                   manifest, "--base-url", fileserver.url)
    assert is_clean_abort(proc), proc.stderr
    os.unlink(manifest)
    odd = [os.path.join(fileserver.root.encode(), b"\xff.gzip.hg"),
           os.path.join(fileserver.root, "dir.hg")]
    open(odd[0], "wb").close()
    os.mkdir(odd[1])
    for path in odd:
        os.utime(path, (0, 0))
    out = _generate(hg, early_hg_repo, fileserver, "--config",
                    "bundlegen.formats=gzip")
    assert "deleted 1 expired bundles" in out
    assert not os.path.exists(odd[0]) and os.path.isdir(odd[1])


def test_systemd_unit_runs_the_virtualenv_hg_hardened_with_a_timeout(
        tmp_path):
    unit = os.path.join(os.path.dirname(__file__), os.pardir, "contrib",
                        "bundlegen", "bundlegen@.service")
    text = open(unit).read()
    assert "\nExecStart=/opt/vcsperf/venv/bin/hg -R %f bundlegen\n" in text
    assert re.search(r"\nTimeoutStartSec=\d+h\n", text)
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    # an instance of the template, as systemctl would load it
    instance = tmp_path / "bundlegen@srv-hg-repo.service"
    shutil.copy(unit, instance)
    proc = subprocess.run([analyze, "security", "--offline=true",
                           str(instance)], capture_output=True, text=True)
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)",
                      proc.stdout)
    assert found, proc.stdout + proc.stderr
    assert float(found.group(1)) < 5


# Issue 27 -------------------------------------------------------------------


@pytest.fixture
def evolved_repo(hg, hgrepo):
    """A repository with obsolescence markers: a rewritten changeset."""
    with open(hgrepo / ".hg" / "hgrc", "a") as fh:
        fh.write("[experimental]\nevolution = all\n")
    for number in range(3):
        (hgrepo / ("f%d" % number)).write_text("line %d\n" % number * 50)
        hg("-R", hgrepo, "commit", "-q", "-A", "-m", "change %d" % number)
    hg("-R", hgrepo, "commit", "-q", "--amend", "-m", "change 2, reworded")
    assert hg("-R", hgrepo, "debugobsolete").strip()
    return hgrepo


def test_default_formats_on_a_repository_with_obsolescence_markers(
        evolved_repo, hg, hgserve, fileserver, tmp_path):
    """Issue 27 item 9: the default formats build on a repository with
    markers; a stock hg clones from the stream and the changegroup
    bundles."""
    repo = evolved_repo
    _generate(hg, repo, fileserver)
    check_published(repo, fileserver.root)
    assert ".stream." in _manifest(repo)
    server = hgserve(repo, *OFFER)
    stock_stream_clone(hg, server, tmp_path / "stream")
    assert _tip(hg, tmp_path / "stream") == _tip(hg, repo)
    # the markers came along
    assert hg("-R", tmp_path / "stream", "debugobsolete") == hg(
        "-R", repo, "debugobsolete")
    out = hg("clone", "-U", server.url, tmp_path / "bundle")
    assert "applying clone bundle from" in out
    hg("verify", "-q", "-R", tmp_path / "bundle")
    assert _tip(hg, tmp_path / "bundle") == _tip(hg, repo)


def test_core_clone_bundles_and_bundlegen_do_not_overwrite_each_other(
        hgrepo, hg, fileserver):
    """Issue 27 item 17: a run refuses beside core's auto-generation, and
    a manifest core's clone-bundles (or anything else) rewrote is written
    again, not left as 'published already'."""
    repo = hgrepo
    (repo / "a").write_text("a\n")
    hg("-R", repo, "commit", "-q", "-A", "-m", "a")
    auto = ("--config", "clone-bundles.auto-generate.formats=gzip-v2")
    proc = _generate(hg, repo, fileserver, *auto, check=False)
    assert is_clean_abort(proc), proc.stderr
    assert "clone-bundles.auto-generate" in proc.stderr
    assert os.listdir(fileserver.root) == []

    gzip = ("--config", "bundlegen.formats=gzip")
    _generate(hg, repo, fileserver, *gzip)
    ours = _manifest(repo)
    # Core's clone-bundles, run by hand with its own formats.
    hg("-R", repo, *OFFER, *auto, "--config",
       "clone-bundles.url-template=http://127.0.0.1:1/{basename}",
       "--config", "clone-bundles.upload-command=true",
       "admin::clone-bundles-refresh")
    assert _manifest(repo) != ours
    out = _generate(hg, repo, fileserver, *gzip)
    assert "clonebundles.manifest was changed by something else" in out
    assert _manifest(repo) == ours
    check_published(repo, fileserver.root)


def test_bundlegen_publishes_no_secret_changeset(hg, tmp_path):
    """Finding (confidentiality): ``hg bundlegen`` builds its bundles
    from every changeset of the store, secret ones included (its tip is
    the secret changeset), and publishes them to the CDN for every
    client: ``hg clone`` of the same server never sends a secret
    changeset, and core refuses stream clones of a repository with secret
    changesets (``server.uncompressedallowsecret``; its
    ``debugcreatestreamclonebundle`` at least warns).  The stream bundle
    even makes the secret changeset public in the clone."""
    repo, out, _public, secret = _repo_with_a_secret_changeset(hg, tmp_path)
    hg("-R", repo, "bundlegen")
    bundles = sorted(out.glob("*.hg"))
    assert bundles
    for bundle in bundles:
        clone = tmp_path / ("from-" + bundle.name)
        hg("init", clone)
        hg("-R", clone, "unbundle", "-q", bundle)
        assert hg("-R", clone, "log", "-r", "all()", "-T",
                  "{node}\n").split() != [], bundle.name
        assert secret not in hg("-R", clone, "log", "--hidden", "-T",
                                "{node}\n"), bundle.name


def _repo_with_a_secret_changeset(hg, tmp_path):
    """A repository whose tip is secret, over one public changeset; its
    hgrc publishes to ``out``.  Returns repo, out, the public node and the
    secret one."""
    repo, out = tmp_path / "r", tmp_path / "out"
    hg("init", repo)
    (repo / "a").write_text("a\n")
    hg("-R", repo, "commit", "-q", "-A", "-m", "public work", "-u", "t")
    (repo / "b").write_text("embargoed security fix\n")
    hg("-R", repo, "commit", "-q", "-A", "-m", "secret", "-u", "t",
       "--secret")
    out.mkdir()
    (repo / ".hg" / "hgrc").write_text(
        "[extensions]\nbundlegen =\nclonebundles =\n[bundlegen]\n"
        "output = %s\nbase-url = %s\n" % (out, out.as_uri()))
    public = hg("-R", repo, "log", "-r", "0", "-T", "{node}")
    secret = hg("-R", repo, "log", "-r", "secret()", "-T", "{node}")
    return repo, out, public, secret


def test_stream_bundle_is_left_out_while_secret_changesets_exist(
        hg, tmp_path):
    """As core refuses a stream clone of a repository with secret
    changesets: one warning, no stream bundle, no stream line in the
    manifest; the published tip is the last changeset a pull sends, and
    the secret changeset alone makes no new generation due."""
    repo, out, public, secret = _repo_with_a_secret_changeset(hg, tmp_path)
    proc = hg.proc("-R", repo, "bundlegen")
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines()
                if "secret changesets" in line]
    assert len(warnings) == 1 and "uncompressedallowsecret" in warnings[0]
    assert not list(out.glob("*.stream.*"))
    manifest = (repo / ".hg" / "clonebundles.manifest").read_text()
    assert "stream=v2" not in manifest and "gzip-v2" in manifest
    index = json.loads((out / "bundles.json").read_text())
    assert index["tip"] == public
    assert secret not in " ".join(os.listdir(out))
    # the changegroups keep the public changeset public
    clone = tmp_path / "clone"
    hg("init", clone)
    [gzip] = out.glob("*.gzip.*.hg")
    hg("-R", clone, "unbundle", "-q", gzip)
    assert hg("-R", clone, "log", "-r", "all()", "-T", "{node}") == public
    assert "nothing to do" in hg("-R", repo, "bundlegen")
    # allowed as core allows it: the stream bundle is built again
    proc = hg.proc("-R", repo, "bundlegen", "--force", "--config",
                   "server.uncompressedallowsecret=true")
    assert proc.returncode == 0 and "secret" not in proc.stderr, proc.stderr
    assert list(out.glob("*.stream.*"))


def test_check_fresh_counts_no_secret_changeset(hg, tmp_path):
    """A secret commit alone leaves the bundles fresh (a pull would not
    send it, so no bundle may hold it); a draft one puts them behind."""
    repo, out, public, secret = _repo_with_a_secret_changeset(hg, tmp_path)
    hg("-R", repo, "bundlegen")
    check = ("-R", repo, "bundlegen", "--check-fresh", "--max-behind", "0")
    out_line = hg(*check)
    assert out_line.startswith("fresh:") and " 0 changesets behind" in \
        out_line, out_line
    hg("-R", repo, "phase", "-q", "--draft", "-r", secret)
    proc = hg.proc(*check)
    assert proc.returncode == 1 and proc.stdout.startswith("stale:"), \
        proc.stdout
    assert "1 changesets behind" in proc.stdout or "1 behind" in \
        proc.stdout, proc.stdout


SNAPSHOT_PROBE = r'''
import os, sys
repo, log = sys.argv[1:]
here = os.stat(os.path.join(".hg", "store", "00changelog.i"))
there = os.stat(os.path.join(repo, ".hg", "store", "00changelog.i"))
with open(log, "a") as fh:
    fh.write("%s %s\n" % (os.getcwd(), here.st_ino == there.st_ino))
'''


def test_snapshot_is_linked_when_the_output_is_on_another_filesystem(
        hgrepo, hg, hgrc, tmp_path):
    """Issue 27 item 18: the snapshot is made beside the store (hardlinks,
    seconds under the store lock), not copied into the output
    directory's filesystem."""
    shm = "/dev/shm"
    if not os.path.isdir(shm) or os.stat(shm).st_dev == os.stat(
            str(tmp_path)).st_dev:
        pytest.skip("needs /dev/shm on another filesystem than the tests")
    repo = hgrepo
    (repo / "a").write_text("a\n" * 1000)
    hg("-R", repo, "commit", "-q", "-A", "-m", "a")
    probe = tmp_path / "probe.py"
    probe.write_text(SNAPSHOT_PROBE)
    log = tmp_path / "probe.log"
    with open(hgrc, "a") as fh:
        fh.write("[hooks]\npreoutgoing.probe = %s %s %s %s\n"
                 % (sys.executable, probe, repo, log))
    output = tempfile.mkdtemp(dir=shm, prefix="vcsperf-bundlegen-")
    try:
        hg("-R", repo, "bundlegen", *EXT, "--config",
           "bundlegen.formats=gzip", "--output", output, "--base-url",
           "http://127.0.0.1:1/b")
        assert [name for name in os.listdir(output)
                if name.endswith(".hg")]
    finally:
        shutil.rmtree(output)
    [line] = log.read_text().splitlines()
    where, linked = line.split()
    assert linked == "True", where
    assert where.startswith(str(repo / ".hg") + os.sep)
    assert not [name for name in os.listdir(repo / ".hg")
                if name.startswith("bundlegen-snapshot-")]


def test_cron_script_runs_the_virtualenv_hg(hg, env, tmp_path):
    """Issue 27 item 18: the cron script runs $HG (by default the
    virtualenv's hg of contrib/bundlegen's layout), not whatever hg
    cron's PATH finds."""
    script = os.path.join(os.path.dirname(__file__), os.pardir, "contrib",
                          "bundlegen", "bundlegen-cron.sh")
    text = open(script).read()
    assert 'HG="${HG:-/opt/vcsperf/venv/bin/hg}"' in text
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "hg").write_text("#!/bin/sh\necho wrong hg >&2\nexit 3\n")
    (fake / "hg").chmod(0o755)
    unconfigured = tmp_path / "unconfigured"
    hg("init", unconfigured)
    (unconfigured / ".hg" / "hgrc").write_text("[extensions]\nbundlegen =\n")
    run_env = dict(env, HG=hg.binary, PATH=str(fake) + os.pathsep
                   + env["PATH"])
    proc = subprocess.run(["sh", script, str(unconfigured)], env=run_env,
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert "wrong hg" not in proc.stderr
    assert "abort: bundlegen needs an output directory" in proc.stderr


def test_systemd_unit_may_write_every_documented_output():
    """Issue 27 item 18: ReadWritePaths covers the output directories the
    help, the README and contrib's hgrc give."""
    here = os.path.dirname(__file__)
    unit = open(os.path.join(here, os.pardir, "contrib", "bundlegen",
                             "bundlegen@.service")).read()
    [paths] = re.findall(r"\nReadWritePaths=(.*)\n", unit)
    writable = [path.lstrip("-") for path in paths.split()]
    documented = []
    for name in ("hgext/bundlegen/__init__.py", "README.md",
                 "contrib/bundlegen/hgrc.example",
                 "contrib/bundlegen/README.md"):
        with open(os.path.join(here, os.pardir, name)) as fh:
            documented += re.findall(r"^\s*output = (\S+)$", fh.read(),
                                     re.M)
    assert documented
    for output in documented:
        assert any(output.startswith(path.rstrip("/") + "/")
                   for path in writable), output
