"""wirecache's shared store: two ``hg serve`` heads, each serving its own
clone of one repository, sharing one bucket of a real S3-compatible server
(versitygw): a response computed by one head is served by the other; a
push to one head is never served stale by the other; an object changed
in the bucket is computed again and replaced; a store that is down,
stalls or lies never fails or holds up a pull beyond its timeout."""

import json

import pytest

from test_wirecache import SERVER_HGRC, last_getbundle
from vcsperf.core.responsecache import TRAILER_SIZE

BUCKET = "wirecache"
PREFIX = "hg/repo"


def configure_head(repo, endpoint, timeout=10, extra=""):
    """wirecache with the shared store at ``endpoint`` (the server, or a
    proxy in front of it)."""
    (repo / ".hg" / "hgrc").write_text(
        SERVER_HGRC % ("", 3)
        + "[wirecache]\nstore = s3://%s/%s\nstore.endpoint = %s\nstore.timeout = %d\n"
        % (BUCKET, PREFIX, endpoint.rstrip("/"), timeout) + extra)


def stats(hg, repo):
    [item] = json.loads(hg("wirecache", "-R", repo, "-T", "json"))
    return item


def blackbox(repo):
    log = repo / ".hg" / "blackbox.log"
    return log.read_text() if log.exists() else ""


def objects(server, kind):
    return [key for key in server.keys(BUCKET)
            if key.startswith("%s/%s/" % (PREFIX, kind))]


@pytest.fixture
def heads(real_hg_repo_cached, hg, objectserver, tmp_path):
    """Two clones of the same repository (two heads of one service), each
    configured to share the bucket."""
    objectserver.make_bucket(BUCKET, public=False)
    repos = []
    for name in ("head-a", "head-b"):
        repo = tmp_path / name
        hg("clone", "-q", "-U", "-r", "1",
           real_hg_repo_cached, repo)
        configure_head(repo, objectserver.url)
        repos.append(repo)
    return repos


def test_heads_share_responses_and_replace_a_damaged_one(
        heads, hg, hgserve, proxy, objectserver, tmp_path):
    """Head A computes a response; head B, on its own clone, is sent it
    (the bytes a cacheless head B sends, decoded alike); an object
    damaged in the bucket is a miss, computed again and replaced."""
    head_a, head_b = heads
    served_a = proxy(hgserve(head_a).url)
    served_b = proxy(hgserve(head_b).url)
    cacheless_b = proxy(hgserve(head_b, "--config",
                                "wirecache.enabled=no").url)
    hg("clone", "-q", "-U", served_a.url, tmp_path / "one")
    [entry] = objects(objectserver, "entries")
    assert objects(objectserver, "writing") == []
    hg("clone", "-q", "-U", served_b.url, tmp_path / "two")
    hg("clone", "-q", "-U", cacheless_b.url, tmp_path / "two-cacheless")
    assert last_getbundle(served_b) == last_getbundle(cacheless_b)
    assert served_a.bodies("cmd=getbundle") == \
        served_b.bodies("cmd=getbundle")
    b = stats(hg, head_b)
    assert (b["hits"], b["store_hits"], b["misses"]) == (1, 1, 0)
    assert b["backend"] == "s3://%s/%s" % (BUCKET, PREFIX)
    assert (b["entries"], b["size"]) == (1, b["store_bytes_read"])

    # The same length, other bytes: a miss, computed again, replaced.
    client = objectserver.client()
    good = client.get_object(Bucket=BUCKET, Key=entry)["Body"].read()
    client.put_object(Bucket=BUCKET, Key=entry,
                      Body=good[:100] + bytes(len(good) - 100))
    hg("clone", "-q", "-U", served_a.url, tmp_path / "after-damage")
    assert served_a.bodies("cmd=getbundle")[-1] == \
        served_b.bodies("cmd=getbundle")[-1]
    # The same payload (the trailer's CPU seconds differ).
    assert client.get_object(Bucket=BUCKET, Key=entry)["Body"].read()[
        :-TRAILER_SIZE] == good[:-TRAILER_SIZE]
    assert "fails its check (" in blackbox(head_a)
    a = stats(hg, head_a)
    assert (a["misses"], a["store_misses"], a["store_errors"]) == (2, 1, 1)
    assert a["store_bytes_written"] == 2 * b["store_bytes_read"]

    # The store down: head B computes the response, says so once.
    objectserver.stop()
    hg("clone", "-q", "-U", served_b.url, tmp_path / "store-down")
    assert served_b.bodies("cmd=getbundle")[-1] == \
        served_a.bodies("cmd=getbundle")[-1]
    assert blackbox(head_b).count("failed, computing responses here") == 1
    b = stats(hg, head_b)
    assert (b["hits"], b["uncached"], b["store_errors"]) == (1, 1, 1)
    assert b["store_error"]


@pytest.mark.slow
def test_a_push_to_one_head_is_not_served_by_the_other(
        heads, hg, hgserve, proxy, objectserver, tmp_path):
    """After a push to head A only, head B still sends its own state (its
    key differs); after the same push to head B, it is sent A's entry."""
    head_a, head_b = heads
    served_a = proxy(hgserve(head_a).url)
    served_b = proxy(hgserve(head_b).url)
    hg("clone", "-q", "-U", served_a.url, tmp_path / "before")
    work = tmp_path / "work"
    hg("clone", "-q", head_a, work)
    (work / "pushed-file").write_text("a change head B does not have\n")
    hg("commit", "-q", "-A", "-m", "pushed", "-u", "t", cwd=work)
    hg("push", "-q", "-R", work, head_a)
    new = hg("log", "-R", work, "-r", "tip", "-T", "{node}")
    hg("clone", "-q", "-U", served_b.url, tmp_path / "b-after-push")
    assert new not in hg("log", "-R", tmp_path / "b-after-push",
                         "-T", "{node}\\n")
    assert served_b.bodies("cmd=getbundle")[-1] == \
        served_a.bodies("cmd=getbundle")[0]
    hg("clone", "-q", "-U", served_a.url, tmp_path / "a-after-push")
    assert len(objects(objectserver, "entries")) == 2
    hg("push", "-q", "-R", work, head_b)
    hg("clone", "-q", "-U", served_b.url, tmp_path / "b-same-push")
    assert served_b.bodies("cmd=getbundle")[-1] == \
        served_a.bodies("cmd=getbundle")[-1]
    assert new in hg("log", "-R", tmp_path / "b-same-push",
                     "-T", "{node}\\n")
    b = stats(hg, head_b)
    assert (b["hits"], b["misses"], b["entries"]) == (2, 0, 2)


@pytest.mark.parametrize("setting", [
    "wirecache.store=ftp://bucket/prefix", "wirecache.store=s3://B/prefix",
    "wirecache.store.timeout=0"])
def test_a_bad_store_setting_stops_hg_serve_with_one_abort(hgrepo, hg,
                                                           setting):
    proc = hg.proc("serve", "-R", hgrepo, "--config",
                   "extensions.wirecache=", "--config",
                   "wirecache.store=s3://bucket/prefix", "--config", setting,
                   "-p", "0")
    assert proc.returncode == 255 and "Traceback" not in proc.stderr
    [abort, hint] = proc.stderr.splitlines()
    assert abort.startswith("abort: ") and "wirecache.store" in abort
    assert hint.startswith("(")
