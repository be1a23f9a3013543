"""The adversarial campaign for wirecache's shared store: raw ``getbundle``
requests to a real ``hg serve`` whose store (real versitygw) sits behind a
relay that misbehaves on request, each answer compared part by part with
a cacheless server's.

- a store that stalls, trickles, answers 500 or 503, announces another
  length, or is down, on reads and on writes: every answer right, none
  held up beyond the store's timeout, one warning line per failure;
- another head's ``writing`` marker: waited for at most ``wirecache.wait``
  seconds; one left by a writer that died is taken over at once;
- objects in the bucket the cache did not name, and many distinct
  responses against a small ``wirecache.max-size``: the entries stay
  within the bound, the foreign objects untouched.
"""

import os
import re
import time

import pytest

import campaign
from test_bundlegen_s3 import S3Proxy
from test_campaign_wirecache import (  # noqa: F401 (bundlecaps: autouse)
    bundlecaps,
    counters,
    same_answer,
)
from test_wirecache_s3 import BUCKET, PREFIX, blackbox, configure_head

pytestmark = pytest.mark.campaign

TIMEOUT = 2
WAIT = 3
#: Bound on a request whose store misbehaves: the store's timeout for a
#: read, a marker and a write, and what the request costs otherwise on a
#: busy machine (a stalled store would hold it 600 s).
BOUND = 60
FAILED = "failed, computing responses here"


@pytest.fixture
def relay(objectserver):
    relay = S3Proxy(objectserver.url)
    yield relay
    relay.stop()


@pytest.fixture
def shared(real_hg_repo_cached, hg, hgserve, objectserver, relay,
           tmp_path):
    """(repo, server URL with the store behind ``relay``, cacheless URL,
    nodes)."""
    objectserver.make_bucket(BUCKET, public=False)
    repo = tmp_path / "served"
    hg("clone", "-q", "-U", "-r", "5", real_hg_repo_cached, repo)
    configure_head(repo, relay.url, timeout=TIMEOUT,
                   extra="wait = %d\nmin-size = 0\n" % WAIT)
    nodes = hg("log", "-R", repo, "-r", "all()", "-T", "{node}\\n").split()
    return (repo, hgserve(repo).url,
            hgserve(repo, "--config", "wirecache.enabled=no").url, nodes)


def _entries(server):
    return [key.rsplit("/", 1)[1] for key in server.keys(BUCKET)
            if key.startswith(PREFIX + "/entries/")]


def _forget_failure(repo):
    """A new case starts with the store trusted again (a failure leaves
    it alone for 30 seconds)."""
    failed = repo / ".hg" / "cache" / "wirecache" / "store-failed"
    if failed.exists():
        failed.unlink()


def _timed(pair, heads, common):
    started = time.monotonic()
    same_answer(pair, heads, common)
    return time.monotonic() - started


@pytest.mark.slow
def test_a_store_that_fails_or_lies_never_fails_or_holds_up_a_pull(
        shared, hg, relay, objectserver, tally):
    repo, _, _, nodes = shared
    cases = [("GET", "stall", None), ("GET", "status", 500),
             ("GET", "trickle", 0.3), ("GET", "length", 100),
             ("GET", "length", 1 << 30), ("PUT", "stall", None),
             ("DELETE", "stall", None)]
    warned = 0
    for number, (method, action, arg) in enumerate(cases, 1):
        heads, common = [nodes[-1]], [nodes[number % (len(nodes) - 1)]]
        relay.faults = []
        _forget_failure(repo)
        if method == "GET":
            same_answer(shared, heads, common)  # stored while it behaves
            assert len(_entries(objectserver)) == number
        else:
            heads = [nodes[number % (len(nodes) - 1)]]
            common = [nodes[0]] if heads != [nodes[0]] else []
        relay.fault(method, "/entries/" if method == "GET" else "/",
                    action, arg)
        elapsed = _timed(shared, heads, common or ["0" * 40])
        assert elapsed < BOUND, (method, action)
        lines = blackbox(repo).count(FAILED)
        lied = (action, arg) == ("length", 100)
        # A shorter length is an entry that fails its check; anything
        # else, a store that failed: one line each, the store left alone.
        assert lines == warned + (not lied), (method, action, arg)
        warned = lines
        tally.case(True, ("store", method, action))
    assert "; computed again" in blackbox(repo)

    # The store down: the requests go on, one warning in 30 seconds.
    relay.stop()
    _forget_failure(repo)
    for common in nodes[:3]:
        assert _timed(shared, [nodes[-1]], [common]) < BOUND
    assert blackbox(repo).count(FAILED) == warned + 1
    item = counters(hg, repo)
    assert item["store_errors"] >= len(cases) and item["store_error"]
    tally.case(True, ("store", "down"))


def _marker_path(objectserver, key):
    return os.path.join(objectserver.data, BUCKET, PREFIX, "writing", key)


def test_another_heads_writer_is_waited_for_and_a_dead_one_taken_over(
        shared, hg, objectserver, tally):
    repo, _, _, nodes = shared
    client = objectserver.client()
    heads, common = [nodes[2]], [nodes[1]]
    same_answer(shared, heads, common)
    [key] = _entries(objectserver)
    entry = "%s/entries/%s" % (PREFIX, key)
    marker = "%s/writing/%s" % (PREFIX, key)
    # Another head writes it (its marker is fresh) and never finishes:
    # waited for, then computed here; the marker is the other head's.
    client.delete_object(Bucket=BUCKET, Key=entry)
    client.put_object(Bucket=BUCKET, Key=marker, Body=b"other-head 1\n")
    elapsed = _timed(shared, heads, common)
    assert WAIT <= elapsed < BOUND
    assert objectserver.keys(BUCKET) == sorted([entry, marker])
    tally.case(True, ("writer", "alive"))
    # That head died an hour ago: its marker is taken over at once, and
    # this head's own is deleted when it has written the entry.
    client.delete_object(Bucket=BUCKET, Key=entry)
    an_hour_ago = time.time() - 3600
    os.utime(_marker_path(objectserver, key), (an_hour_ago, an_hour_ago))
    elapsed = _timed(shared, heads, common)
    assert elapsed < WAIT
    assert objectserver.keys(BUCKET) == [entry]
    tally.case(True, ("writer", "dead"))
    assert counters(hg, repo)["misses"] == 3


@pytest.mark.slow
def test_the_store_stays_within_its_bound_and_keeps_foreign_objects(
        hg, hgserve, objectserver, tmp_path, tally):
    """Responses of 300 kB each (a changeset of random bytes each) against
    a store bound of 1 MB: the oldest entries go, objects under the
    prefix that the cache did not name stay."""
    objectserver.make_bucket(BUCKET, public=False)
    repo = tmp_path / "random"
    hg("init", repo)
    rng = tally.rng
    for number in range(6):
        (repo / ("f%d" % number)).write_bytes(rng.randbytes(300000))
        hg("-R", repo, "commit", "-q", "-A", "-m", "c%d" % number, "-u", "t")
    configure_head(repo, objectserver.url,
                   extra="min-size = 0\nmax-size = 1m\n")
    nodes = hg("log", "-R", repo, "-r", "all()", "-T", "{node}\\n").split()
    pair = (repo, hgserve(repo).url,
            hgserve(repo, "--config", "wirecache.enabled=no").url, nodes)
    client = objectserver.client()
    foreign = ["%s/entries/not-a-key" % PREFIX, "%s/other" % PREFIX,
               "%s/entries/%s.bak" % (PREFIX, "a" * 64),
               "%s/writing/%s-old" % (PREFIX, "b" * 64)]
    for name in foreign:
        client.put_object(Bucket=BUCKET, Key=name, Body=b"x" * (2 << 20))
    for number in range(campaign.size(6, 60)):
        newer = 1 + (number if number < 5 else rng.randrange(5))
        common = rng.sample(nodes[:newer], rng.randint(1, newer))
        same_answer(pair, [nodes[newer]], common)
        stored = [key for key in _entries(objectserver)
                  if re.fullmatch("[0-9a-f]{64}", key)]
        sizes = [client.head_object(
            Bucket=BUCKET, Key="%s/entries/%s" % (PREFIX, key))
            ["ContentLength"] for key in stored]
        assert sum(sizes) <= 1 << 20
        tally.case(True, ("bound", newer, len(common)))
    assert set(foreign) <= set(objectserver.keys(BUCKET))
    # More was stored than the bound holds: the oldest went.
    assert counters(hg, repo)["store_bytes_written"] > 1 << 20
