"""The adversarial campaign for wirecache over a real ``hg serve``: raw
``getbundle`` requests (as a client sends them, over ``http.client``)
answered with the cache and without it, decoded and compared part by part.

- a client that goes away mid-response: the entry is still finished, and
  the next request is served it whole;
- the cache directory changed behind the server's back between requests:
  deleted, entries truncated, swapped for garbage or for symbolic links to
  files outside, the entries directory or a lock replaced by something
  else, the counters file garbage, the whole path unusable: every answer
  is still the cacheless server's, nothing outside the cache is touched;
- many distinct requests (seeded random ``common`` sets) against a small
  ``wirecache.max-size``: every answer right, the cache within its bound;
- unknown heads: the error a cacheless server sends, never stored;
- requests hgweb reads otherwise than a plain reading would (arguments
  in headers spelt with underscores or in lower case, given twice,
  split, numbered from 01, in the body of a GET, with or without a
  length, chunked), each running ``lookup`` of a local tag, asked before
  and after ``hg tag --local``, with a request after it on the
  connection: every answer the cacheless server's, none kept stale;
- bzip2 only for a client that lists it; an entry rewritten (with a
  digest that matches: the key it is keyed by is its file's name) to
  name an engine its request did not accept, or none, is removed and the
  answer computed.
"""

import http.client
import io
import json
import os
import shutil
import time
import urllib.parse

import pytest
from mercurial import bundle2, exchange, hg, ui as uimod

import campaign
from test_wirecache import (  # noqa: F401
    HGARG_SPELLINGS,
    configure,
    get,
    hashes_source,
    payload,
    same_as_hgweb,
    served,
)
from vcsperf.core import responsecache

pytestmark = pytest.mark.campaign

NULL = "0" * 40


def client_bundlecaps(path):
    """The bundle capabilities this Mercurial's client sends from the
    repository at ``path``."""
    repo = hg.repository(uimod.ui.load(), os.fsencode(path))
    return b",".join(sorted(exchange.caps20to10(repo, role=b"client")))


BUNDLECAPS = []


def getbundle(url, heads, common=(NULL,), read=None, status=200,
              comp="zstd,zlib,none"):
    """A bundle2 ``getbundle`` as hg sends it over HTTP, from a client
    that decodes the engines of ``comp``; the response body, or its
    first ``read`` bytes (then the connection is dropped)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    args = urllib.parse.urlencode({
        "bundlecaps": BUNDLECAPS[0], "cg": "1", "phases": "1",
        "common": " ".join(common), "heads": " ".join(heads)})
    try:
        conn.request("GET", "/?cmd=getbundle", headers={
            "X-HgArg-1": args, "X-HgProto-1": "0.1 0.2 comp=" + comp})
        response = conn.getresponse()
        assert response.status == status
        return response.read() if read is None else response.read(read)
    finally:
        conn.close()


def decoded(body):
    bundle = payload(body)[1]
    unbundler = bundle2.getunbundler(uimod.ui.load(), io.BytesIO(bundle))
    return [(p.type, sorted(p.mandatoryparams), sorted(p.advisoryparams),
             p.read()) for p in unbundler.iterparts()]


def counters(hg, repo, *args):
    return json.loads(hg("wirecache", "-R", repo, "-T", "json", *args))[0]


@pytest.fixture(autouse=True)
def bundlecaps(real_hg_repo_cached):
    if not BUNDLECAPS:
        BUNDLECAPS.append(client_bundlecaps(real_hg_repo_cached))


@pytest.fixture
def pair(real_hg_repo_cached, hg, hgserve, tmp_path):
    """(repo, cached server URL, cacheless server URL, nodes by rev)."""
    repo = tmp_path / "served"
    hg("clone", "-q", "-U", "-r", "3", real_hg_repo_cached, repo)
    configure(repo)
    nodes = hg("log", "-R", repo, "-r", "all()", "-T", "{node}\\n").split()
    cached = hgserve(repo).url
    cacheless = hgserve(repo, "--config", "wirecache.enabled=no").url
    return repo, cached, cacheless, nodes


def same_answer(pair, heads, common=(NULL,)):
    repo, cached, cacheless, _ = pair
    got = decoded(getbundle(cached, heads, common))
    assert got == decoded(getbundle(cacheless, heads, common))
    assert got[0][0] == b"changegroup", got[0][:3]
    return got


def wait_for(predicate, seconds=120):
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.2)


def test_a_client_gone_mid_response(pair, hg, tally):
    """Cut after the first byte (the engine's name), inside the first
    chunk, and further: the response was computed whole before it was
    sent, so it is stored, and the next request is served it whole,
    without waiting for anything."""
    repo, cached, _, nodes = pair
    for number, cut in enumerate([1, 5000, 100000], 1):
        heads = [nodes[number]]
        before = counters(hg, repo)
        assert len(getbundle(cached, heads, read=cut)) == cut
        assert counters(hg, repo)["misses"] == before["misses"] + 1
        same_answer(pair, heads)
        # Counted once the server has sent the last byte: a moment later.
        wait_for(lambda: counters(hg, repo)["hits"] == before["hits"] + 1)
        assert counters(hg, repo)["uncached"] == before["uncached"]
        tally.case(True, ("client-gone", cut))


def _entries(repo):
    return sorted((repo / ".hg/cache/wirecache/entries").glob("*/*"))


def cache_dir(repo):
    return repo / ".hg" / "cache" / "wirecache"


def _damages(repo, outside):
    cache = cache_dir(repo)

    def delete_all():
        shutil.rmtree(cache)

    def truncate():
        for entry in _entries(repo):
            with open(entry, "r+b") as fh:
                fh.truncate(os.path.getsize(entry) // 2)

    def garbage():
        for entry in _entries(repo):
            size = os.path.getsize(entry)
            entry.write_bytes(os.urandom(size))

    def symlink_outside():
        for entry in _entries(repo):
            entry.unlink()
            entry.symlink_to(outside)

    def entries_a_file():
        shutil.rmtree(cache / "entries")
        (cache / "entries").write_text("not a directory\n")

    def locks_dirs():
        for lock in (cache / "locks").glob("*/*"):
            lock.unlink()
            lock.mkdir()

    def stats_garbage():
        # Both counter files: what they held is lost, counting goes on.
        (cache / "stats.json").write_bytes(b"\x00{garbage")
        (cache / "stats.log").write_bytes(b"\x00{garbage")

    return [delete_all, truncate, garbage, symlink_outside, entries_a_file,
            locks_dirs, stats_garbage]


@pytest.mark.slow
def test_the_cache_changed_behind_the_servers_back(pair, hg, tmp_path,
                                                   tally):
    repo, _, _, nodes = pair
    outside = tmp_path / "outside-file"
    outside.write_bytes(b"a file the cache did not create\n" * 100)
    before = outside.read_bytes()
    heads = [nodes[-1]]
    for damage in _damages(repo, outside):
        same_answer(pair, heads)  # stored (or served) first
        damage()
        same_answer(pair, heads)
        same_answer(pair, heads)
        tally.case(True, ("behind-its-back", damage.__name__))
    assert outside.read_bytes() == before
    assert not outside.is_symlink()
    # The entries directory is still a file it did not create: the cache
    # steps aside (the two requests since the counters were reset).
    assert (cache_dir(repo) / "entries").is_file()
    assert counters(hg, repo)["uncached"] == 2


def test_an_unusable_cache_path_serves_without_the_cache(
        real_hg_repo_cached, hg, hgserve, tmp_path):
    repo = tmp_path / "served"
    hg("clone", "-q", "-U", "-r", "1", real_hg_repo_cached, repo)
    configure(repo)
    blocker = tmp_path / "a-file"
    blocker.write_text("the cache path goes through this file\n")
    url = hgserve(repo, "--config",
                  "wirecache.path=%s" % (blocker / "cache")).url
    hg("clone", "-q", "-U", url, tmp_path / "clone")
    hg("verify", "-q", "-R", tmp_path / "clone")
    assert blocker.read_text() == "the cache path goes through this file\n"


@pytest.mark.slow
def test_many_distinct_requests_stay_within_the_bound(
        real_hg_repo_cached, hg, hgserve, tmp_path, tally):
    repo = tmp_path / "served"
    hg("clone", "-q", "-U", "-r", "7", real_hg_repo_cached, repo)
    configure(repo)
    nodes = hg("log", "-R", repo, "-r", "all()", "-T", "{node}\\n").split()
    bounded = ("--config", "wirecache.max-size=1m",
               "--config", "wirecache.min-size=0")
    pair = (repo, hgserve(repo, *bounded).url,
            hgserve(repo, "--config", "wirecache.enabled=no").url, nodes)
    rng = tally.rng
    for _ in range(campaign.size(12, 200)):
        common = rng.sample(nodes[:-1], rng.randint(0, len(nodes) - 1)) \
            or [NULL]
        same_answer(pair, [nodes[-1]], common)
        counted = counters(hg, repo, *bounded)
        assert counted["size"] <= 1 << 20
        tally.case(True, ("distinct-request", len(common)))
    assert counted["misses"] + counted["hits"] >= 1


def test_unknown_heads_fail_as_without_the_cache_and_are_not_stored(
        pair, hg):
    """Core answers a getbundle of an unknown head with an HTTP error (its
    lookup error is no abort); so does the cached server, each time,
    storing nothing and holding no key."""
    repo, cached, cacheless, nodes = pair
    for _ in range(2):
        for url in (cached, cacheless):
            getbundle(url, ["e" * 40], status=500)
    same_answer(pair, [nodes[-1]])
    assert counters(hg, repo)["entries"] == 1


def _forge(entry, payload_bytes):
    """Rewrite ``entry`` to hold ``payload_bytes``, with a trailer that
    passes its check (as anyone who can write the cache can)."""
    key = entry.name
    entry.write_bytes(
        responsecache.HEAD_MAGIC + payload_bytes
        + responsecache._TRAILER.pack(len(payload_bytes), 0.0,
                                      responsecache._digest(key,
                                                            payload_bytes))
        + responsecache.TAIL_MAGIC)


def test_engines_a_client_lists_and_entries_naming_others(
        hashes_source, hg, hgserve, tmp_path, tally):  # noqa: F811
    repo = tmp_path / "served"
    hg("clone", "-q", "-U", hashes_source, repo)
    configure(repo, level=17)
    nodes = hg("log", "-R", repo, "-r", "all()", "-T", "{node}\\n").split()
    cached = hgserve(repo).url
    cacheless = hgserve(repo, "--config", "wirecache.enabled=no").url
    heads, common = [nodes[1]], [nodes[0]]
    reference = decoded(getbundle(cacheless, heads, common))
    engines = {}
    for comp in ("zstd,zlib,none", "zstd,zlib,none,bzip2"):
        body = getbundle(cached, heads, common, comp=comp)
        engines[comp] = payload(body)[0]
        assert decoded(body) == reference
    assert engines == {"zstd,zlib,none": b"zstd",
                       "zstd,zlib,none,bzip2": b"bzip2"}
    entries = _entries(repo)
    assert len(entries) == 2
    for forged in (b"\x04none" + payload(body)[1], b""):
        before = counters(hg, repo)
        for entry in entries:
            _forge(entry, forged)
        written = [entry.read_bytes() for entry in entries]
        for comp in engines:
            # Removed, and computed as core does (core sends no bzip2).
            body = getbundle(cached, heads, common, comp=comp)
            assert payload(body)[0] == b"zstd"
            assert decoded(body) == reference
        wait_for(lambda: counters(hg, repo)["uncached"]
                 == before["uncached"] + 2)
        for comp, engine in engines.items():
            # Computed again and stored whole.
            body = getbundle(cached, heads, common, comp=comp)
            assert payload(body)[0] == engine
            assert decoded(body) == reference
        assert _entries(repo) == entries
        assert [entry.read_bytes() for entry in entries] != written
        assert all(entry.read_bytes() != bad
                   for entry, bad in zip(entries, written))
        tally.case(True, ("foreign-engine", forged[:6]))
    # Turned off, or not among the engines the operator chose: zstd;
    # chosen by its engine name (bz2, the only one core takes), bzip2.
    for setting, engine in (("wirecache.bzip2-up-to=0", b"zstd"),
                            ("server.compressionengines=zstd,zlib", b"zstd"),
                            ("server.compressionengines=zstd,bz2",
                             b"bzip2")):
        url = hgserve(repo, "--config", setting).url
        body = getbundle(url, heads, common, comp="zstd,zlib,none,bzip2")
        assert payload(body)[0] == engine, setting
        assert decoded(body) == reference


#: Lookups of local tags (not in any key) spelt every way hg serve reads
#: an argument, or might: hgweb decides what runs.
LOOKUP = b"cmds=heads+%3Blookup+key%3Dfoo"
SPELLINGS = HGARG_SPELLINGS + [
    get(b"/?cmd=batch", b"x-hgarg-1: " + LOOKUP),
    get(b"/?cmd=batch", b"X-HgArg-1: cmds=heads+", b"X-HgArg-1: " + LOOKUP),
    get(b"/?cmd=batch", b"X-HgArg-1: " + LOOKUP, b"X_HgArg_1: cmds=heads+"),
    get(b"/?cmd=batch&cmds=heads+", b"X-HgArg-01: " + LOOKUP),
    get(b"/?cmd=batch", b"X-HgArg-1: cmds=heads+", b"X_HgArg_2: %3Blookup",
        b"X-HgArg-3: +key%3Dfoo"),
    get(b"/?cmd=batch&cmds=heads+", b"x_hgargs_post: %d" % len(LOOKUP),
        body=LOOKUP),
    get(b"/?cmd=batch&cmds=heads+", b"X-HgArgs-Post: %d" % len(LOOKUP),
        b"Content-Length: %d" % len(LOOKUP), body=LOOKUP),
    get(b"/?cmd=batch&cmds=heads+", b"X-HgArgs-Post: %d" % len(LOOKUP),
        b"Content_Length: %d" % len(LOOKUP), body=LOOKUP),
    get(b"/?cmd=batch&cmds=heads+", b"X-HgArgs-Post: %d" % len(LOOKUP),
        b"Transfer-Encoding: chunked",
        body=b"%x\r\n%s\r\n0\r\n\r\n" % (len(LOOKUP), LOOKUP)),
]


def test_request_spellings_hgweb_reads_otherwise(served, hg,  # noqa: F811
                                                 hgserve):
    cached = hgserve(served)
    cacheless = hgserve(served, "--config", "wirecache.enabled=no")
    same_as_hgweb(cached, cacheless, SPELLINGS, times=2, whole=False)
    hg("tag", "-R", served, "--local", "-r", "0", "foo")
    same_as_hgweb(cached, cacheless, SPELLINGS, times=2, whole=False)
