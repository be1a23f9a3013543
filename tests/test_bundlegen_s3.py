"""bundlegen publishing to object storage: a real S3-compatible server
(versitygw) on 127.0.0.1, two regional destinations, a stock ``hg clone``
that picks its region's bundle (seen in the server's access log),
freshness thresholds, retention of generations, a failed upload that
changes no manifest, and the service's output (``-T json``, lock
waits)."""

import json
import os
import subprocess
import time

import pytest

from vcsperf.harness import objectstore

EXT = ("--config", "extensions.bundlegen=",
       "--config", "extensions.clonebundles=")
REGIONS = {"usw2": "us-west-2", "euc1": "eu-central-1"}


def _configure(repo, server, formats="gzip, zstd", **extra):
    """Two destinations (a bucket per region), kept two generations
    deep."""
    lines = ["[bundlegen]", "output = %s" % (repo / ".hg" / "bundles"),
             "formats = " + formats, "destinations = usw2, euc1"]
    lines += ["%s = %s" % item for item in extra.items()]
    lines.append("[bundlegen-destinations]")
    for name, region in REGIONS.items():
        server.make_bucket("bundles-" + name)
        lines += ["%s.url = s3://bundles-%s/hg/repo" % (name, name),
                  # the one region the test server signs for
                  "%s.region = %s" % (name, objectstore.REGION),
                  "%s.endpoint = %s" % (name, server.url.rstrip("/")),
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
    local = os.listdir(repo / ".hg" / "bundles")
    assert sorted(n for n in local if n.endswith(".hg")) == sorted(
        k.rsplit("/", 1)[1] for k in objectserver.keys("bundles-euc1"))
    hg("verify", "-q", "-R", repo)
    hooks = (tmp_path / "hook").read_text().split()
    assert len(hooks) == 4 and hooks[0] == hooks[1]


def test_a_failed_upload_leaves_every_manifest_and_bucket_as_it_was(
        small_repo, hg, objectserver):
    repo = small_repo
    _configure(repo, objectserver, formats="gzip")
    hg("-R", repo, "bundlegen", *EXT)
    manifest = _manifest(repo)
    keys = objectserver.keys("bundles-usw2")
    hg("-R", repo, "commit", "--config", "ui.allowemptycommit=1", "-m", "1")
    # The second destination's bucket is gone: the first got its upload,
    # which the failed run takes back.
    objectserver.client().delete_objects(Bucket="bundles-euc1", Delete={
        "Objects": [{"Key": k} for k in objectserver.keys("bundles-euc1")]})
    objectserver.client().delete_bucket(Bucket="bundles-euc1")
    proc = hg.proc("-R", repo, "bundlegen", *EXT)
    assert proc.returncode == 255
    assert proc.stderr.startswith("abort: upload of ")
    assert "euc1" in proc.stderr and "no manifest was changed" in \
        proc.stderr
    assert _manifest(repo) == manifest
    assert objectserver.keys("bundles-usw2") == keys


@pytest.mark.slow
def test_a_second_run_waits_then_skips_the_tip_the_first_published(
        small_repo, hg, env, objectserver):
    repo = small_repo
    _configure(repo, objectserver, formats="gzip")
    # The first run holds the lock while its upload hook sleeps.
    hook = "bundlegen.upload-command=sleep 3"
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
