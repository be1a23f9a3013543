"""wirecache: pulls over real ``hg serve`` (HTTP, behind recording proxies)
and over SSH (the ``ssh`` stand-in) served from the cache, each response
decoded and compared part by part with what a server without the cache
sends for the same request in the same repository state, across a push, a
strip, a phase change, obsolescence markers, clients of other
capabilities and concurrent clients."""

import bz2
import http.client
import io
import json
import os
import shutil
import socket
import threading
import time
import urllib.parse

import pytest
import zstandard
from mercurial import bundle2, extensions, hg as hgmod, ui as uimod

from hgext3rd import wirecache
from netservers import write_ssh_wrapper
from vcsperf.harness import tools

SERVER_HGRC = """[extensions]
wirecache =
blackbox =
%s
[wirecache]
level = %d
wait = 30
memory = 32m
[blackbox]
track = wirecache
"""
#: The history served: the first releases of the real-content history.
FIRST_RELEASES = 4


@pytest.fixture
def served(real_hg_repo_cached, hg, tmp_path):
    """A server repository of the first releases, with wirecache (at level
    3 unless a test says otherwise: most tests are about correctness)."""
    repo = tmp_path / "served"
    hg("clone", "-q", "-U", "-r", str(FIRST_RELEASES - 1),
       real_hg_repo_cached, repo)
    configure(repo)
    return repo


def configure(repo, level=3, extra=""):
    (repo / ".hg" / "hgrc").write_text(SERVER_HGRC % (extra, level))


def stats(hg, repo):
    [item] = json.loads(hg("wirecache", "-R", repo, "-T", "json"))
    return item


def payload(body):
    """The bundle a ``application/mercurial-0.2`` response carries,
    decompressed, and the engine it names."""
    length = body[0]
    engine, data = body[1:1 + length], body[1 + length:]
    if engine in (b"zstd", b"wirezstd"):
        reader = zstandard.ZstdDecompressor().stream_reader(
            io.BytesIO(data), read_across_frames=True)
        data = reader.read()
    elif engine == b"bzip2":
        data = bz2.decompress(data)
    else:
        assert engine == b"none", engine
    return engine, data


def parts(bundle):
    """Every part of a bundle2 stream: type, parameters, payload."""
    unbundler = bundle2.getunbundler(uimod.ui.load(), io.BytesIO(bundle))
    return [(p.type, sorted(p.mandatoryparams), sorted(p.advisoryparams),
             p.read()) for p in unbundler.iterparts()]


def last_getbundle(recorder):
    """The parts of the last getbundle response ``recorder`` saw."""
    return parts(payload(recorder.bodies("cmd=getbundle")[-1])[1])


class Pair:
    """The repository served twice: with the cache, and by a server of the
    same repository with it off, each behind a recording proxy; ``pull``
    runs the same client command against both, from two copies of the
    same client repository, and checks that the responses decode alike."""

    def __init__(self, hg, hgserve, proxy, repo, *serve_args):
        self.hg = hg
        self.cached = proxy(hgserve(repo, *serve_args).url)
        self.cacheless = proxy(hgserve(repo, "--config",
                                       "wirecache.enabled=no",
                                       *serve_args).url)

    def pull(self, client, *args):
        """Pull into ``client`` (a path; its copy ``client-cacheless`` is
        made on first use) from both servers; returns the bundle parts
        of the cached server's last getbundle response."""
        other = client.parent / (client.name + "-cacheless")
        if not other.exists():
            self.hg("clone", "-q", "-U", client, other)
        self.hg("pull", "-q", "-R", client, *args, self.cached.url)
        self.hg("pull", "-q", "-R", other, *args, self.cacheless.url)
        got = last_getbundle(self.cached)
        assert got == last_getbundle(self.cacheless)
        assert heads(self.hg, client) == heads(self.hg, other)
        return got

    def clone(self, dest, *args):
        self.hg("clone", "-q", "-U", *args, self.cached.url, dest)
        self.hg("clone", "-q", "-U", *args, self.cacheless.url,
                str(dest) + "-cacheless")
        got = last_getbundle(self.cached)
        assert got == last_getbundle(self.cacheless)
        return got


def heads(hg, repo):
    return hg("log", "-R", repo, "-r", "heads(all())", "-T",
              "{node} {phase}\\n")


def test_second_clone_is_served_from_the_cache(served, hg, hgserve, proxy,
                                                tmp_path):
    configure(served, level=17, extra="wirezstd =")
    pair = Pair(hg, hgserve, proxy, served)
    first = pair.clone(tmp_path / "one")
    assert stats(hg, served)["misses"] == 1
    second = pair.clone(tmp_path / "two")
    assert first == second
    item = stats(hg, served)
    assert (item["hits"], item["misses"], item["entries"]) == (1, 1, 1)
    [miss, hit] = pair.cached.bodies("cmd=getbundle")
    assert miss == hit
    # Stored with the name of its engine, as the wire frames it.
    assert item["bytes_saved"] == len(hit)
    assert item["cpu_saved"] > 0
    # Stored at level 17, sent by the cacheless server at core zstd's
    # level 3 (the client has no wirezstd): the same bundle in fewer bytes.
    [cacheless, _] = pair.cacheless.bodies("cmd=getbundle")
    assert payload(hit) == payload(cacheless)
    assert len(hit) < len(cacheless)
    hg("verify", "-q", "-R", tmp_path / "two")
    assert "getbundle hit key" in _server_log(served)


def hashes_repo(hg, path, files=1500):
    """A repository whose second changeset changes each of ``files``
    files: a pull of it is mostly manifest lines, whose hashes bzip2
    packs tighter than zstd."""
    hg("init", path)
    for number in range(files):
        folder = path / ("src/module%02d/sub%02d" % (number % 37,
                                                     number % 11))
        folder.mkdir(parents=True, exist_ok=True)
        (folder / ("file%04d.txt" % number)).write_text("one %d\n"
                                                         % number)
    hg("commit", "-q", "-A", "-R", path, "-m", "one")
    for name in path.glob("src/*/*/*.txt"):
        name.write_text(name.read_text() + "two\n")
    hg("commit", "-q", "-R", path, "-m", "two")


@pytest.fixture(scope="session")
def hashes_source(tmp_path_factory):
    """``hashes_repo``, made once a session (cloned by each test)."""
    path = tmp_path_factory.mktemp("hashes") / "repo"
    env = tools.isolated_env(str(path.parent))
    hashes_repo(lambda *args: tools.hg([str(arg) for arg in args], env),
                path)
    return path


def test_small_responses_are_stored_as_the_smaller_of_zstd_and_bzip2(
        hashes_source, hg, hgserve, proxy, tmp_path):
    served = tmp_path / "served"
    hg("clone", "-q", "-U", hashes_source, served)
    configure(served, level=17)
    pair = Pair(hg, hgserve, proxy, served)
    for name in ("one", "two"):
        hg("clone", "-q", "-U", "-r", "0", served, tmp_path / name)
    pair.pull(tmp_path / "one")
    # A real client decodes the stored response, a hit this time.
    hg("pull", "-q", "-R", tmp_path / "two", pair.cached.url)
    assert heads(hg, tmp_path / "two") == heads(hg, tmp_path / "one")
    [miss, hit] = pair.cached.bodies("cmd=getbundle")
    assert miss == hit
    assert stats(hg, served)["hits"] == 1
    engine, bundle = payload(hit)
    [cacheless] = pair.cacheless.bodies("cmd=getbundle")
    assert engine == b"bzip2"
    assert payload(cacheless) == (b"zstd", bundle)
    # Smaller than level 17 in one piece, the other candidate, which is
    # not even tried: bzip2 wins clearly over zstd at level 3.
    zstd_size = len(zstandard.ZstdCompressor(level=17).compress(bundle))
    assert len(hit) - 1 - hit[0] < zstd_size
    level3 = len(zstandard.ZstdCompressor(level=3).compress(bundle))
    assert len(hit) - 1 - hit[0] <= wirecache._BZIP2_CLEAR_WIN * level3
    assert ("compressed with bzip2: %d bytes; zstd at level 3: %d"
            % (len(hit) - 1 - hit[0], level3)) in _server_log(served)


def _server_log(repo):
    log = repo / ".hg" / "blackbox.log"
    return log.read_text() if log.exists() else ""


@pytest.mark.slow
def test_every_change_to_the_repository_makes_other_responses(
        served, hg, hgserve, proxy, tmp_path):
    """A push, a phase change, obsolescence markers (a hidden changeset),
    a strip, each by a stock hg writing to the served repository between
    pulls: after each, both servers send the same bundle."""
    with open(served / ".hg" / "hgrc", "a") as fh:
        fh.write("[experimental]\nevolution = all\n"
                 "[phases]\npublish = no\n")
    stock = ("--config", "extensions.wirecache=!")
    pair = Pair(hg, hgserve, proxy, served)
    client = tmp_path / "client"
    hg("clone", "-q", "-U", "-r", "2", served, client)
    hg("clone", "-q", "-U", client, str(client) + "-cacheless")
    # Served from the cache from here on: the same pull from a new copy.
    before = pair.pull(client)
    twin = tmp_path / "twin"
    hg("clone", "-q", "-U", "-r", "2", served, twin)
    assert pair.pull(twin) == before
    assert stats(hg, served)["hits"] == 1

    work = tmp_path / "work"
    hg("clone", "-q", served, work)
    (work / "new-file").write_text("a change after the cached pull\n")
    hg("commit", "-q", "-A", "-m", "pushed", "-u", "t", cwd=work)
    hg("push", "-q", *stock, "-R", work, served)
    after_push = pair.pull(client)
    assert after_push != before
    assert any(p[0] == b"changegroup" and p[3] for p in after_push)

    # A phase change alone: same changesets, other phase-heads.
    hg("phase", *stock, "-R", served, "--public", "-r", "tip")
    after_phase = pair.pull(client)
    assert after_phase != after_push

    # An obsolescence marker hides the pushed changeset from a new clone.
    node = hg("log", "-R", served, "-r", "tip", "-T", "{node}")
    hg("phase", *stock, "-R", served, "--draft", "--force", "-r", node)
    clone_before = pair.clone(tmp_path / "before-prune")
    hg("debugobsolete", *stock, "-R", served, node)
    clone_after = pair.clone(tmp_path / "after-prune")
    assert clone_after != clone_before
    assert node not in hg("log", "-R", tmp_path / "after-prune", "--hidden",
                          "-T", "{node}\\n")

    # A strip, and the pull from the first state again.
    hg("--config", "extensions.strip=", *stock, "debugobsolete", "-R",
       served, "--delete", "0")
    hg("--config", "extensions.strip=", *stock, "strip", "-q", "-R", served,
       "--no-backup", "-r", node)
    again = tmp_path / "again"
    hg("clone", "-q", "-U", "-r", "2", served, again)
    assert pair.pull(again) == before
    # Seven pulls, one the twin of another; the rest each met a new state
    # (responses under wirecache.min-size count as uncached).
    counted = stats(hg, served)
    assert counted["hits"] == 1
    assert counted["misses"] + counted["uncached"] == 6
    assert "getbundle miss key" in _server_log(served)


@pytest.mark.slow
def test_clients_of_other_capabilities_get_their_own_responses(
        served, hg, hgserve, proxy, tmp_path):
    """Clients that ask differently (wirezstd, obsolescence markers,
    bundle1) each get what the cacheless server sends them; then a stock
    client again, from the cache."""
    configure(served, extra="wirezstd =")
    pair = Pair(hg, hgserve, proxy, served)
    bundle1 = ("--config", "devel.legacy.exchange=bundle1")
    engines = []
    for name, args in (
            ("stock", ()),
            ("wirezstd", ("--config", "extensions.wirezstd=")),
            ("evolution", ("--config", "experimental.evolution=all")),
            ("bundle1", bundle1),
            ("stock-again", ())):
        dest = tmp_path / name
        if args == bundle1:
            hg("clone", "-q", "-U", *args, pair.cached.url, dest)
            hg("clone", "-q", "-U", *args, pair.cacheless.url,
               str(dest) + "-cacheless")
            got, want = (payload(r.bodies("cmd=getbundle")[-1])
                         for r in (pair.cached, pair.cacheless))
            assert got == want
        else:
            pair.clone(dest, *args)
        engines.append(payload(pair.cached.bodies("cmd=getbundle")[-1])[0])
        hg("verify", "-q", "-R", dest)
    assert engines == [b"zstd", b"wirezstd", b"zstd", b"zstd", b"zstd"]
    item = stats(hg, served)
    assert (item["hits"], item["misses"]) == (1, 4)


@pytest.fixture
def ssh(tmp_path, hg, env):
    wrapper = write_ssh_wrapper(str(tmp_path / "ssh"))
    record = tmp_path / "ssh-record"

    def run(*args, cut=None, check=True):
        env.pop("VCSPERF_SSH_CUT", None)
        env["VCSPERF_SSH_RECORD"] = str(record)
        if cut is not None:
            env["VCSPERF_SSH_CUT"] = str(cut)
        full = ("--config", "ui.ssh=%s" % wrapper,
                "--config", "ui.remotecmd=%s" % hg.binary) + args
        return hg(*full) if check else hg.proc(*full)

    run.record = record
    return run


@pytest.mark.parametrize("wirezstd", [False, True],
                         ids=["raw", "wirezstd"])
def test_ssh_pulls_are_served_from_the_cache(wirezstd, served, hg, ssh,
                                             tmp_path):
    ext = ("--config", "extensions.wirezstd=") if wirezstd else ()
    configure(served, extra="wirezstd =" if wirezstd else "")
    url = "ssh://user@dummy/%s" % served
    ssh(*ext, "clone", "-U", url, tmp_path / "one")
    miss = ssh.record.read_bytes()
    ssh(*ext, "clone", "-U", url, tmp_path / "two")
    assert ssh.record.read_bytes() == miss
    item = stats(hg, served)
    assert (item["hits"], item["misses"]) == (1, 1)
    hg("verify", "-q", "-R", tmp_path / "two")
    assert (zstandard.FRAME_HEADER in miss) == wirezstd
    if not wirezstd:
        # Uncompressed over SSH: byte for byte what the cacheless server
        # sends.
        with open(served / ".hg" / "hgrc", "a") as fh:
            fh.write("enabled = no\n")
        ssh("clone", "-U", url, tmp_path / "three")
        assert ssh.record.read_bytes() == miss


def test_a_client_gone_mid_response_still_leaves_a_whole_entry(
        served, hg, ssh, tmp_path):
    """The ssh stand-in stops reading after 200 kB (the client's pull
    fails and applies nothing); the server still finishes the response
    for the cache, and the next clone is served it whole."""
    url = "ssh://user@dummy/%s" % served
    proc = ssh("clone", "-U", url, tmp_path / "cut", cut=200000,
               check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert not (tmp_path / "cut").exists()
    ssh("clone", "-U", url, tmp_path / "whole")
    hg("verify", "-q", "-R", tmp_path / "whole")
    item = stats(hg, served)
    assert (item["misses"], item["hits"], item["entries"]) == (1, 1, 1)
    assert "getbundle hit key" in _server_log(served)


@pytest.mark.slow
def test_concurrent_clients_compute_the_response_once(served, hg, hgserve,
                                                      tmp_path):
    server = hgserve(served)
    procs = [hg.proc("clone", "-q", "-U", server.url, tmp_path / str(n))
             for n in range(1)]  # warm the capabilities and the repo
    assert procs[0].returncode == 0
    # A new state, then 6 clients at once.
    work = tmp_path / "work"
    hg("clone", "-q", served, work)
    (work / "f").write_text("new\n")
    hg("commit", "-q", "-A", "-m", "x", "-u", "t", cwd=work)
    hg("push", "-q", "-R", work, served)
    results = []

    def clone(n):
        results.append(hg.proc("clone", "-q", "-U", server.url,
                               tmp_path / ("c%d" % n)))
    threads = [threading.Thread(target=clone, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.returncode for r in results] == [0] * 6
    item = stats(hg, served)
    assert (item["misses"], item["hits"]) == (2, 5)


def test_bad_setting_stops_hg_serve_with_one_abort(served, hg):
    proc = hg.proc("serve", "-R", served, "--config", "wirecache.level=30",
                   "-p", "0")
    assert proc.returncode != 0
    assert proc.stderr.splitlines()[0] == \
        "abort: wirecache.level must be a whole number from 1 to 22"


def test_wirecache_command_on_an_empty_cache(served, hg):
    assert hg("wirecache", "-R", served).splitlines()[1] == \
        "responses: 0 hits, 0 misses, 0 uncached"
    item = stats(hg, served)
    assert (item["entries"], item["size"]) == (0, 0)


def test_a_hidden_view_keys_apart_from_the_served_one(hgrepo, hg):
    """``hg serve`` shows the ``served`` view (no secret, no hidden
    changesets); a client allowed hidden access gets the ``visible``
    one: with a secret changeset their keys differ, and so do they once
    it is made draft."""
    (hgrepo / "f").write_text("one\n")
    hg("commit", "-q", "-A", "-m", "one", "-u", "t", cwd=hgrepo)
    (hgrepo / "f").write_text("two\n")
    hg("commit", "-q", "-m", "two", "-u", "t", "--secret", cwd=hgrepo)

    def parts(view):
        repo = hgmod.repository(uimod.ui.load(), bytes(hgrepo)).filtered(view)
        return wirecache.state_parts(repo)

    served, visible = parts(b"served"), parts(b"visible")
    assert served != visible
    hg("phase", "--draft", "-r", "tip", cwd=hgrepo)
    assert parts(b"served") not in (served, visible)


def test_histories_a_strip_apart_key_apart(hgrepo, hg, tmp_path):
    """Two histories of the same length, tip, phases and bookmarks, with
    no ``undo`` file either time (a strip removes it): ``[0, A, T]``,
    then A and T stripped, B committed, T unbundled back and a last
    commit stripped, ``[0, B, T]``.  Their state keys differ (they were
    equal, and a getbundle naming A was served from the cache after A was
    gone)."""
    strip = ("--config", "extensions.strip=")

    def commit(name, date):
        (hgrepo / name).write_text(name + "\n")
        hg("commit", "-q", "-A", "-m", name, "-u", "t", "-d", date,
           cwd=hgrepo)

    def parts():
        # With the key of hg serve's answers in memory, which holds them.
        repo = hgmod.repository(uimod.ui.load(), bytes(hgrepo))
        served = repo.filtered(b"served")
        return (wirecache.state_parts(served)
                + [wirecache._answer_state(served)])
    commit("r0", "0 0")
    commit("a", "1 0")
    hg("update", "-q", "0", cwd=hgrepo)
    commit("t", "2 0")
    commit("x", "3 0")
    hg(*strip, "strip", "-q", "--no-backup", "-r", "3", cwd=hgrepo)
    before = parts()
    bundle = tmp_path / "t.hg"
    hg("bundle", "-q", "-r", "2", "--base", "0", bundle, cwd=hgrepo)
    hg(*strip, "strip", "-q", "--no-backup", "-r", "1", "-r", "2",
       cwd=hgrepo)
    hg("update", "-q", "0", cwd=hgrepo)
    commit("b", "1 0")
    hg("unbundle", "-q", bundle, cwd=hgrepo)
    hg("update", "-q", "2", cwd=hgrepo)
    commit("y", "4 0")
    hg(*strip, "strip", "-q", "--no-backup", "-r", "3", cwd=hgrepo)
    log = hg("log", "-T", "{desc}\n", cwd=hgrepo).split()
    assert log == ["t", "b", "r0"]
    assert not (hgrepo / ".hg" / "store" / "undo").exists()
    after = parts()
    assert before[1:3] == after[1:3]  # the length and the tip
    assert before[:-1] != after[:-1] and before[-1] != after[-1]


def test_outgoing_hooks_run_for_every_pull(served, hg, hgserve, tmp_path):
    """A response from the cache would not run the server's ``outgoing``
    hooks: with one configured, every pull is computed, and it runs."""
    ran = tmp_path / "hook-ran"
    with open(served / ".hg" / "hgrc", "a") as fh:
        fh.write("[hooks]\noutgoing.audit = echo pulled >> %s\n" % ran)
    url = hgserve(served).url
    for name in ("one", "two"):
        hg("clone", "-q", "-U", url, tmp_path / name)
    assert ran.read_text() == "pulled\n" * 2
    item = stats(hg, served)
    assert (item["hits"], item["misses"], item["entries"]) == (0, 0, 0)


def test_listkeys_hooks_run_for_every_request(served, hg, hgserve,
                                             tmp_path):
    """A third outside attack: core runs ``prelistkeys`` (which may refuse)
    and ``listkeys`` for every listkeys, the discovery batch's and a
    getbundle's bookmarks part included; answers from memory, and
    getbundles from the disk cache, ran neither, so a refusing hook let a
    clone through.  With such a hook nothing is kept or served from
    either, and the answers are a cacheless server's; a Content-Security-
    Policy nonce, new in every answer, keeps answers out of memory too."""
    flag = tmp_path / "refuse"
    ran = tmp_path / "listkeys-ran"
    with open(served / ".hg" / "hgrc", "a") as fh:
        fh.write("[hooks]\nprelistkeys.gate = test ! -e %s\n"
                 "listkeys.audit = echo listed >> %s\n" % (flag, ran))
    cached = hgserve(served)
    cacheless = hgserve(served, "--config", "wirecache.enabled=no")
    batch = "/?cmd=batch&cmds=heads+%3Blistkeys+namespace%3Dbookmarks"
    for _ in range(2):
        for path in ("/?cmd=listkeys&namespace=bookmarks", batch):
            assert ask(cached.url, None, path=path) == ask(
                cacheless.url, None, path=path)
    hg("clone", "-q", "-U", cached.url, tmp_path / "one")
    flag.write_text("")
    for url in (cached.url, cacheless.url):
        proc = hg.proc("clone", "-q", "-U", url, tmp_path / "refused")
        assert proc.returncode != 0 and not (tmp_path / "refused").exists()
    assert answered_from_memory(served) == 0
    item = stats(hg, served)
    assert (item["hits"], item["entries"]) == (0, 0)
    # every listkeys ran its hook, on both servers alike
    assert ran.read_text().count("listed") >= 4
    csp = served / ".hg" / "hgrc"
    csp.write_text(csp.read_text().split("[hooks]")[0]
                   + "[web]\ncsp = script-src 'nonce-%nonce%'\n")
    cached = hgserve(served)
    nonces = {_csp(cached.url) for _ in range(3)}
    assert len(nonces) == 3 and None not in nonces
    assert answered_from_memory(served) == 0


def _csp(url):
    """The Content-Security-Policy of a capabilities answer."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port,
                                      timeout=60)
    try:
        conn.request("GET", "/?cmd=capabilities", headers=CLIENT_HEADERS)
        response = conn.getresponse()
        response.read()
        return response.getheader("Content-Security-Policy")
    finally:
        conn.close()


def test_forks_with_other_file_data_sharing_a_cache_path(hg, hgserve,
                                                         tmp_path):
    """A third outside attack: two local clones of one history, one with
    a file revision censored, whose servers shared an absolute
    ``wirecache.path``, made the same keys (no undo file in either), and
    the censored fork served the other's secret.  The store's path is in
    the key: each serves its own data."""
    source = tmp_path / "source"
    hg("init", source)
    secret = source / "secret.txt"
    secret.write_text("TOPSECRET\n" * 400)
    hg("-R", source, "commit", "-q", "-A", "-m", "one", "-u", "t")
    secret.write_text("redacted\n" * 400)
    hg("-R", source, "commit", "-q", "-m", "two", "-u", "t")
    work = tmp_path / "work"
    hg("clone", "-q", source, work)
    hg("--cwd", work, "--config", "extensions.censor=", "censor", "-r", "0",
       "-t", "legal", "secret.txt")
    # local clones, so neither has an undo file
    fork, censored = tmp_path / "fork", tmp_path / "censored"
    for repo, origin in ((fork, source), (censored, work)):
        hg("clone", "-q", "-U", origin, repo)
        (repo / ".hg" / "hgrc").write_text(
            "[extensions]\nwirecache =\n[wirecache]\nmin-size = 0\n"
            "path = %s\n" % (tmp_path / "shared-cache"))
        assert not (repo / ".hg" / "store" / "undo").exists()
    for repo, name in ((fork, "a"), (fork, "b"), (censored, "c")):
        hg("clone", "-q", "-U", hgserve(repo).url, tmp_path / name)
    proc = hg.proc("--cwd", tmp_path / "c", "cat", "-r", "0", "secret.txt")
    assert "TOPSECRET" not in proc.stdout
    assert "censored" in proc.stderr


NARROW_SERVER_HGRC = """[extensions]
narrow =
wirecache =
[wirecache]
min-size = 0
[narrowacl]
default.includes = public
bob.includes = *
"""


def test_wirecache_serves_one_users_narrow_acl_response_to_another(
        hg, env, tmp_path):
    """Finding: core narrow's ``[narrowacl]`` decides what a getbundle
    response holds by the user (``REMOTE_USER`` over HTTP,
    ``ui.username()`` over SSH), which is not in wirecache's key: the ACL
    runs only when the response is computed.  Bob (allowed everything)
    clones ``secret``; Alice, whom the ACL refuses it, then gets Bob's
    cached response and the secret file.  (Without wirecache her clone
    aborts "not accessible for alice".)"""
    repo = tmp_path / "srv"
    hg("init", repo)
    (repo / "public").mkdir()
    (repo / "secret").mkdir()
    (repo / "public" / "a").write_text("public\n")
    (repo / "secret" / "s").write_text("the secret\n")
    hg("-R", repo, "commit", "-q", "-A", "-m", "one", "-u", "t")
    (repo / ".hg" / "hgrc").write_text(NARROW_SERVER_HGRC)
    wrapper = write_ssh_wrapper(str(tmp_path / "ssh"))
    url = "ssh://user@dummy/%s" % repo

    def clone(user, dest):
        env["HGUSER"] = user
        return hg.proc("--config", "ui.ssh=%s" % wrapper,
                       "--config", "ui.remotecmd=%s" % hg.binary,
                       "--config", "extensions.narrow=", "clone", "-q",
                       "--narrow", "--include", "secret", url, dest)

    assert clone("bob", tmp_path / "bob").returncode == 0
    assert (tmp_path / "bob" / "secret" / "s").exists()
    alice = clone("alice", tmp_path / "alice")
    assert not (tmp_path / "alice" / "secret" / "s").exists()
    assert alice.returncode != 0
    assert "not accessible for alice" in alice.stderr


def test_wirecache_writes_nothing_through_symlinked_cache_directories(
        hg, tmp_path):
    """Finding: the cache refuses a symbolic link as an entry or lock file
    (O_NOFOLLOW) but follows one planted as a directory of the cache
    (``locks``, ``tmp``, ``entries/XX``: ``os.makedirs`` and the rename
    go through them), so a pull writes lock files and entries into
    whatever directory they point at; eviction skips such entries (its
    scan ignores linked directories), so they are also never bounded."""
    repo = tmp_path / "srv"
    hg("init", repo)
    (repo / "f").write_text("data\n" * 100)
    hg("-R", repo, "commit", "-q", "-A", "-m", "one", "-u", "t")
    (repo / ".hg" / "hgrc").write_text(
        "[extensions]\nwirecache =\n[wirecache]\nmin-size = 0\n")
    cache = repo / ".hg" / "cache" / "wirecache"
    outside = tmp_path / "outside"
    for name in ("locks", "tmp", "entries"):
        (outside / name).mkdir(parents=True)
    cache.mkdir(parents=True)
    (cache / "locks").symlink_to(outside / "locks")
    (cache / "tmp").symlink_to(outside / "tmp")
    (cache / "entries").mkdir()
    for prefix in range(256):
        (cache / "entries" / ("%02x" % prefix)).symlink_to(
            outside / "entries")
    wrapper = write_ssh_wrapper(str(tmp_path / "ssh"))
    url = "ssh://user@dummy/%s" % repo
    for dest in ("one", "two"):
        hg("--config", "ui.ssh=%s" % wrapper,
           "--config", "ui.remotecmd=%s" % hg.binary,
           "clone", "-q", "-U", url, tmp_path / dest)
    hg("verify", "-q", "-R", tmp_path / "two")
    written = sorted(str(path.relative_to(outside))
                     for path in outside.rglob("*") if path.is_file())
    assert written == []


def test_wirecache_response_larger_than_max_size_is_not_recomputed_as_a_miss(
        hg, tmp_path):
    """Finding: a response larger than ``wirecache.max-size`` is still
    written whole to the cache's disk (beyond the bound), before a byte
    of it is sent, compressed at ``wirecache.level`` (17: ~100x level 3's
    CPU over HTTP), committed, and evicted at once by its own write:
    every later identical pull pays all of it again and is counted a
    "miss" (``hg wirecache`` says responses were stored; none is).  With
    the default 2g, a Firefox-size full pull is such a response.  The
    second identical pull should be a hit or, if it cannot be kept,
    computed as without the cache ("uncached")."""
    repo = tmp_path / "srv"
    hg("init", repo)
    for i in range(4):
        (repo / ("r%d" % i)).write_bytes(os.urandom(600000))
    hg("-R", repo, "commit", "-q", "-A", "-m", "big", "-u", "t")
    (repo / ".hg" / "hgrc").write_text(
        "[extensions]\nwirecache =\n[wirecache]\nmax-size = 1m\n")
    wrapper = write_ssh_wrapper(str(tmp_path / "ssh"))
    url = "ssh://user@dummy/%s" % repo
    for dest in ("one", "two", "three"):
        hg("--config", "ui.ssh=%s" % wrapper,
           "--config", "ui.remotecmd=%s" % hg.binary,
           "clone", "-q", "-U", url, tmp_path / dest)
    [item] = json.loads(hg("wirecache", "-R", repo, "-T", "json"))
    assert item["entries"] == 0
    assert item["misses"] <= 1, item


# Whole answers kept in memory by hg serve ------------------------------

#: What a stock hg client sends with every wire protocol request.
CLIENT_HEADERS = {"Accept": "application/mercurial-0.1",
                  "X-HgProto-1": "0.1 0.2 comp=zstd,zlib,none,bzip2 "
                                 "partial-pull"}


def ask(url, cmd, args=None, headers=None, path=None):
    """One GET of wire protocol command ``cmd`` as hg sends it (arguments
    in ``X-HgArg-1``), or of ``path``: status, content type, body."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port,
                                      timeout=60)
    sent = dict(CLIENT_HEADERS, **(headers or {}))
    if args:
        sent["X-HgArg-1"] = urllib.parse.urlencode(sorted(args.items()))
    try:
        conn.request("GET", path or "/?cmd=%s" % cmd, headers=sent)
        response = conn.getresponse()
        return (response.status, response.getheader("Content-Type"),
                response.read())
    finally:
        conn.close()


def raw(url, request):
    """What the server at ``url`` sends for the bytes ``request`` until
    it closes the connection."""
    parts = urllib.parse.urlsplit(url)
    data = b""
    with socket.create_connection((parts.hostname, parts.port),
                                  timeout=60) as sock:
        sock.sendall(request)
        while True:
            chunk = sock.recv(1 << 16)
            if not chunk:
                return data
            data += chunk


def answered_from_memory(repo, at_least=0):
    """How many answers the server's log says it sent from memory, once
    there are ``at_least`` (blackbox writes its lines a moment after the
    answer; 10 seconds at most)."""
    deadline = time.monotonic() + 10
    while True:
        count = _server_log(repo).count("answered from memory")
        if count >= at_least or time.monotonic() > deadline:
            return count
        time.sleep(0.05)


def test_answers_from_memory_follow_every_change_to_the_repository(
        served, hg, hgserve, tmp_path):
    """Capabilities, discovery batches, listkeys and branchmap, each asked
    three times of the server with the cache (then from memory) and once
    of a server without it, after each change a stock hg makes: a push, a
    phase change, a bookmark, an obsolescence marker, a strip, and a
    change of the configuration.  A batch holding a write, and a pull the
    server may not serve, are never answered from memory."""
    with open(served / ".hg" / "hgrc", "a") as fh:
        fh.write("[experimental]\nevolution = all\n"
                 "[phases]\npublish = no\n")
    stock = ("--config", "extensions.wirecache=!")
    cached = hgserve(served)
    cacheless = hgserve(served, "--config", "wirecache.enabled=no")
    tip = hg("log", "-R", served, "-r", "tip", "-T", "{node}")
    root = hg("log", "-R", served, "-r", "0", "-T", "{node}")
    requests = [
        ("capabilities", None),
        ("batch", {"cmds": "heads ;known nodes=%s %s" % (root, tip)}),
        ("batch", {"cmds": "listkeys namespace=phases;"
                           "listkeys namespace=bookmarks"}),
        ("listkeys", {"namespace": "bookmarks"}),
        ("branchmap", None),
    ]

    def check():
        # Three times: hgweb opens the repository again when it sees it
        # changed, which may be at any of them.
        for cmd, args in requests:
            want = ask(cacheless.url, cmd, args)
            assert want[0] == 200
            for _ in range(3):
                assert ask(cached.url, cmd, args) == want

    check()
    answered = answered_from_memory(served, len(requests))
    assert answered >= len(requests)
    work = tmp_path / "work"
    hg("clone", "-q", served, work)
    (work / "new-file").write_text("pushed while answers were kept\n")
    hg("commit", "-q", "-A", "-m", "pushed", "-u", "t", cwd=work)
    hg("push", "-q", *stock, "-R", work, served)
    new = hg("log", "-R", served, "-r", "tip", "-T", "{node}")
    requests.append(("batch", {"cmds": "heads ;known nodes=%s" % new}))
    for change in (
            ("phase", "--public", "-r", new),
            ("bookmark", "-r", new, "landed"),
            ("phase", "--draft", "--force", "-r", new),
            ("debugobsolete", new),
            ("debugobsolete", "--delete", "0"),
            ("--config", "extensions.strip=", "strip", "-q", "--no-backup",
             "-r", new)):
        check()
        counted = answered_from_memory(served, answered + len(requests))
        assert counted >= answered + len(requests)
        answered = counted
        hg(*stock, "-R", served, *change)
    check()
    answered = answered_from_memory(served, answered + len(requests))
    # Two commands named: hgweb runs one, whose answer may be kept.
    path = "/?cmd=capabilities&cmd=heads"
    want = ask(cacheless.url, None, path=path)
    for _ in range(3):
        assert ask(cached.url, None, path=path) == want
    answered = answered_from_memory(served, answered + 2)
    # What hgweb would not answer as a read-only command: its own answer
    # each time (the web interface's, an error), never one from memory.
    for path, headers in (("/?cmd=%FFcapabilities", None),
                          ("/", {"X-HgArg-1": "cmd=capabilities"}),
                          ("/?cmd=lookup", {"X-HgArg-1": "key=tip"}),
                          ("/?cmd=capabilities", {"Expect": "100-continue"}),
                          ("/?cmd=capabilities",
                           {"X-Padding": "x" * (64 << 10)})):
        want = ask(cacheless.url, None, path=path, headers=headers)[0]
        for _ in range(2):
            assert ask(cached.url, None, path=path,
                       headers=headers)[0] == want
    assert answered_from_memory(served) == answered
    # (core's hgweb fails on the query that is no UTF-8, on both servers)
    assert "wirecache" not in (tmp_path / "served.error.log").read_text()
    # Clients of HTTP/1.0 (answered from memory too) and 0.9 (never).
    for request in (b"GET /?cmd=capabilities HTTP/1.0\r\n\r\n",
                    b"GET /?cmd=capabilities\r\n\r\n"):
        want = raw(cacheless.url, request)
        for _ in range(3):
            got = raw(cached.url, request)
            assert got.split(b"\r\n")[0] == want.split(b"\r\n")[0]
            assert got.partition(b"\r\n\r\n")[2] == \
                want.partition(b"\r\n\r\n")[2]
    answered = answered_from_memory(served, answered + 2)
    with open(served / ".hg" / "hgrc", "a") as fh:
        fh.write("[web]\nallow-pull = no\n")
    # The configuration is read again with the repository: a new state.
    hg(*stock, "-R", served, "bookmark", "-d", "landed")
    for cmd, args in requests:
        for _ in range(2):
            assert ask(cached.url, cmd, args)[0] == 401
    writes = {"cmds": "pushkey namespace=bookmarks,key=x,old=,new=%s"
                      % tip}
    got = ask(cached.url, "batch", writes)
    assert got == ask(cacheless.url, "batch", writes) and got[0] != 200
    assert answered_from_memory(served) == answered
    assert "landed" not in hg("bookmarks", "-R", served)


def test_memory_answers_are_forgotten_with_their_disk_entry(
        served, hg, hgserve, proxy, tmp_path):
    """A pull answered from memory, then the cache directory removed (the
    next pull is computed again), then the entry replaced behind the
    server's back (forgotten, found corrupt by its digest, computed
    again); every pull sent what the cacheless server sent the first."""
    pair = Pair(hg, hgserve, proxy, served)
    clients = []
    for name in ("one", "two", "three", "four"):
        hg("clone", "-q", "-U", "-r", "2", served, tmp_path / name)
        clients.append(tmp_path / name)
    first = pair.pull(clients[0])

    def pull(client):
        hg("pull", "-q", "-R", client, pair.cached.url)
        assert last_getbundle(pair.cached) == first
        assert heads(hg, client) == heads(hg, clients[0])

    pull(clients[1])
    item = stats(hg, served)
    assert (item["misses"], item["hits"]) == (1, 1)
    assert "getbundle answered from memory" in _server_log(served)
    shutil.rmtree(served / ".hg" / "cache" / "wirecache")
    pull(clients[2])
    assert stats(hg, served)["misses"] == 1
    [entry] = [path for path in (served / ".hg" / "cache" / "wirecache"
                                 / "entries").glob("*/*")]
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0xFF
    (entry.parent / "planted").write_bytes(bytes(data))
    os.rename(entry.parent / "planted", entry)
    pull(clients[3])
    item = stats(hg, served)
    assert (item["misses"] + item["uncached"], item["hits"]) == (2, 0)
    hg("verify", "-q", "-R", clients[3])


def test_memory_setting_is_checked_and_answers_are_off_by_default(
        served, hg, hgserve, tmp_path):
    """``wirecache.memory`` is checked when hg serve starts; without it
    (memory answers are opt-in) nothing is answered from memory, and the
    disk cache still serves the second clone."""
    proc = hg.proc("serve", "-R", served, "--config", "wirecache.memory=2g",
                   "-p", "0")
    assert proc.returncode != 0
    assert proc.stderr.splitlines()[0].startswith(
        "abort: wirecache.memory must be")
    hgrc = served / ".hg" / "hgrc"
    hgrc.write_text(hgrc.read_text().replace("memory = 32m\n", ""))
    assert "memory" not in hgrc.read_text()
    server = hgserve(served)
    for _ in range(2):
        assert ask(server.url, "capabilities")[0] == 200
    hg("clone", "-q", "-U", server.url, tmp_path / "clone")
    hg("clone", "-q", "-U", server.url, tmp_path / "again")
    assert answered_from_memory(served) == 0
    assert stats(hg, served)["hits"] == 1


def test_the_configuration_in_keys_is_read_again_after_every_change():
    """The whole configuration is part of an answer's key; it is read
    once per ``ui`` until any configuration changes (setconfig, an
    override and its end)."""
    ui = uimod.ui.load()
    ui.setconfig(b"extensions", b"wirecache", b"")
    extensions.loadall(ui)
    # The module hg loaded, whose extsetup ran.
    loaded = extensions.find(b"wirecache")
    before = loaded._whole_config(ui)
    assert loaded._whole_config(ui) is before
    with ui.configoverride({(b"web", b"allow-pull"): b"no"}):
        assert b"allow-pull" in loaded._whole_config(ui)
    assert loaded._whole_config(ui) == before
    ui.setconfig(b"web", b"deny_read", b"*")
    assert b"deny_read" in loaded._whole_config(ui)


#: A request sent after each hostile one on the same connection: its
#: answer must come (a body left unread would be taken for it).
FOLLOWER = (b"GET /?cmd=heads HTTP/1.1\r\nHost: localhost\r\n"
            b"Connection: close\r\n\r\n")


def pipelined(url, request):
    """The answers (status line, body) the server at ``url`` sends for
    ``request`` followed by ``FOLLOWER`` on one connection."""
    data = raw(url, request + FOLLOWER)
    answers = []
    while data:
        head, _sep, data = data.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        fields = dict(line.lower().split(b": ", 1) for line in lines[1:])
        if b"content-length" in fields:
            length = int(fields[b"content-length"])
            body, data = data[:length], data[length:]
        elif fields.get(b"transfer-encoding") == b"chunked":
            body = b""
            while True:
                size, _sep, data = data.partition(b"\r\n")
                size = int(size, 16)
                body, data = body + data[:size], data[size + 2:]
                if not size:
                    break
        else:
            body, data = data, b""
        answers.append((lines[0], body))
    return answers


def same_as_hgweb(cached, cacheless, requests, times=3, whole=True):
    """Each raw request (followed by ``FOLLOWER``) gets from the server
    with the cache what the one without it sends, ``times`` times;
    ``whole``: hgweb answers both, the follower with a 200."""
    for request in requests:
        want = pipelined(cacheless.url, request)
        assert not whole or (len(want) == 2
                             and want[-1][0].startswith(b"HTTP/1.1 200"))
        for _ in range(times):
            assert pipelined(cached.url, request) == want, request


def get(path, *headers, body=b""):
    return (b"GET %s HTTP/1.1\r\nHost: localhost\r\n%s\r\n%s"
            % (path, b"".join(b"%s\r\n" % header for header in headers),
               body))


#: Requests hgweb reads otherwise than a plain reading would: an
#: argument in a header spelt with underscores (``X_HgArg_1`` is
#: ``X-HgArg-1`` to hg serve), split over two headers (joined with
#: nothing between), or in the body of a GET without a Content-Length.
#: Each has hgweb run ``lookup`` (which reads local tags) besides
#: ``heads``.
HGARG_SPELLINGS = [
    get(b"/?cmd=batch&cmds=heads+",
        b"X_HgArg_1: cmds=heads+%3Blookup+key%3Dfoo"),
    get(b"/?cmd=batch", b"X-HgArg-1: cmds=heads+",
        b"X-HgArg-2: %3Blookup+key%3Dbar"),
    get(b"/?cmd=batch&cmds=heads+", b"X-HgArgs-Post: 30",
        body=b"cmds=heads+%3Blookup+key%3Dfoo"),
]


def test_memory_answers_are_hgwebs_whatever_the_arguments_spelling(
        served, hg, hgserve):
    """What hgweb ran decides whether an answer is kept, however the
    request spells its arguments: each of ``HGARG_SPELLINGS``, asked
    before and after ``hg tag --local`` (no transaction), gets hgweb's
    answer, and the request after it on the connection its own; a batch
    of read-only commands split over two headers is still answered from
    memory."""
    cached = hgserve(served)
    cacheless = hgserve(served, "--config", "wirecache.enabled=no")
    split = get(b"/?cmd=batch", b"X-HgArg-1: cmds=heads+",
                b"X-HgArg-2: %3Bknown+nodes%3D")
    same_as_hgweb(cached, cacheless, HGARG_SPELLINGS + [split])
    # The followers (all but the first) and the split batch (twice).
    assert answered_from_memory(served, 13) == 13
    assert _server_log(served).count("batch answered from memory") == 2
    hg("tag", "-R", served, "--local", "-r", "0", "foo")
    hg("tag", "-R", served, "--local", "-r", "1", "bar")
    same_as_hgweb(cached, cacheless, HGARG_SPELLINGS)
    # A batch with a lookup is hgweb's every time, never kept: whether
    # hgweb itself sees the new local tags at once is core's affair (it
    # refreshes a repository when its store or bookmarks change, and a
    # CI run saw one server answer "unknown revision 'foo'" after them).
    assert _server_log(served).count("batch answered from memory") == 2


#: An extension checking the client's address in a wrapper of the wire
#: protocol's permission check (not a permission hook).
ADDRESS_CHECK = '''\
from mercurial import extensions, wireprotoserver
from mercurial.hgweb import common


def _checkperm(orig, self, perm):
    if self._req.remotehost != b'127.0.0.1':
        raise common.ErrorResponse(common.HTTP_FORBIDDEN, b'not from here')
    return orig(self, perm)


def extsetup(ui):
    extensions.wrapfunction(wireprotoserver.httpv1protocolhandler,
                            'checkperm', _checkperm)
'''
#: The same check where hg serve hands the request to hgweb.
ADDRESS_CHECK_IN_SERVER = '''\
from mercurial import extensions
from mercurial.hgweb import server


def _do_hgweb(orig, self):
    if self.client_address[0] != '127.0.0.1':
        self.send_error(403)
        return None
    return orig(self)


def extsetup(ui):
    extensions.wrapfunction(server._httprequesthandler, 'do_hgweb',
                            _do_hgweb)
'''

#: The same check where hg serve's do_GET hands the request on (core's
#: do_GET, do_HEAD and do_PUT call do_POST).
ADDRESS_CHECK_IN_POST = ADDRESS_CHECK_IN_SERVER.replace(
    "_do_hgweb", "_do_post").replace("'do_hgweb'", "'do_POST'")
#: A view by the client's address: 127.0.0.1 (a mirror) sees secret
#: changesets too.
SECRET_VIEW = '''\
from mercurial import extensions, wireprotov1server


def _view(orig, repo, proto, *args, **kwargs):
    view = orig(repo, proto, *args, **kwargs)
    if proto._req.remotehost == b'127.0.0.1':
        return view.filtered(b'visible')
    return view


def extsetup(ui):
    extensions.wrapfunction(wireprotov1server, 'getdispatchrepo', _view)
'''


def ask_from(url, source, path="/?cmd=capabilities"):
    """The status line and body of a GET of ``path`` sent from the
    address ``source``."""
    parts = urllib.parse.urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=60,
                                  source_address=(source, 0)) as sock:
        sock.sendall(b"GET %s HTTP/1.1\r\nHost: localhost\r\n"
                     b"Connection: close\r\n\r\n" % path.encode())
        data = b""
        while True:
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            data += chunk
    return data.split(b"\r\n")[0], data.partition(b"\r\n\r\n")[2]


@pytest.mark.skipif(os.getuid() != 0, reason="gives a file to another user")
def test_memory_answers_follow_untrusted_settings_and_address_checks(
        served, hg, hgserve, tmp_path):
    """A pull ban in a repository hgrc hg serve does not trust (hgweb
    reads ``web.*`` from it all the same) is obeyed once written, as
    without the cache; an extension wrapping the wire protocol's
    permission check, or hg serve's handing the request to hgweb
    (refusing other addresses than 127.0.0.1), or its view of the
    changesets, turns memory answers off: 127.0.0.2 is refused every
    time, and never sees the secret head 127.0.0.1 sees."""
    # What the served repository's hgrc holds, given on the command line
    # (hg serve loads no extension an untrusted hgrc names).
    trusted = ("--config", "extensions.wirecache=", "--config",
               "extensions.blackbox=", "--config", "blackbox.track=wirecache",
               "--config", "wirecache.memory=32m")
    hgrc = served / ".hg" / "hgrc"
    hgrc.write_text("[web]\nallow-pull = true\n")
    os.chown(hgrc, 65534, -1)  # nobody's
    cached = hgserve(served, *trusted)
    cacheless = hgserve(served, *trusted, "--config", "wirecache.enabled=no")
    paths = ["/?cmd=capabilities", "/?cmd=batch&cmds=heads+%3Bknown+nodes%3D"]
    for path in paths:
        want = ask(cacheless.url, None, path=path)
        for _ in range(3):
            assert ask(cached.url, None, path=path) == want
    assert answered_from_memory(served, 4) == 4
    hgrc.write_text(hgrc.read_text().replace("allow-pull = true",
                                             "allow-pull = false"))
    # hgweb opens the repository again when its bookmarks file changed.
    for _ in range(2):
        time.sleep(1.1)
        (served / ".hg" / "bookmarks").touch()
    for path in paths:
        want = ask(cacheless.url, None, path=path)
        assert want[0] == 401
        for _ in range(3):
            assert ask(cached.url, None, path=path) == want
    assert answered_from_memory(served) == 4

    hgrc.write_text(hgrc.read_text().replace("allow-pull = false",
                                             "allow-pull = true"))
    for number, text in enumerate((ADDRESS_CHECK, ADDRESS_CHECK_IN_SERVER,
                                   ADDRESS_CHECK_IN_POST)):
        check = tmp_path / ("addresscheck%d.py" % number)
        check.write_text(text)
        guarded = hgserve(served, *trusted, "--config",
                          "extensions.addresscheck=%s" % check)
        for source in ("127.0.0.1", "127.0.0.1", "127.0.0.2", "127.0.0.2"):
            status, body = ask_from(guarded.url, source)
            assert status.startswith(
                b"HTTP/1.1 200" if source == "127.0.0.1"
                else b"HTTP/1.1 403"), (number, source, status)
        guarded.stop()
    view = tmp_path / "secretview.py"
    view.write_text(SECRET_VIEW)
    hg("phase", "-R", served, "--force", "--secret", "-r", "tip")
    secret = hg("log", "-R", served, "-r", "tip", "-T", "{node}").encode()
    viewed = hgserve(served, *trusted, "--config",
                     "extensions.secretview=%s" % view)
    for source in ("127.0.0.1", "127.0.0.1", "127.0.0.2", "127.0.0.2"):
        status, body = ask_from(viewed.url, source, "/?cmd=heads")
        assert (secret in body) == (source == "127.0.0.1"), source
    assert answered_from_memory(served) == 4


def test_memory_bound_counts_each_answer_whole(served, hg, hgserve):
    """Answers with an empty body (listkeys of bookmarks where there are
    none) still cost their key, headers and objects: 64 distinct ones
    with ``wirecache.memory=64k`` drop the first, whose request is then
    computed again (each costs at least 1 KB: at most 64 are kept)."""
    server = hgserve(served, "--config", "wirecache.memory=64k")
    path = "/?cmd=listkeys&namespace=bookmarks"
    for number in range(64):
        status, _type, body = ask(server.url, None, path=path,
                                  headers={"X-Pad": str(number)})
        assert (status, body) == (200, b"")
    ask(server.url, None, path=path, headers={"X-Pad": "0"})
    ask(server.url, None, path=path, headers={"X-Pad": "63"})
    assert answered_from_memory(served, 1) == 1
    assert "listkeys answered from memory" in _server_log(served)


def test_a_share_serves_the_bookmarks_its_source_moved(served, hg, hgserve,
                                                       tmp_path):
    """A share made with ``hg share -B`` reads its bookmarks from the
    source, whose file neither the share's file cache nor hgweb's check
    of the repository watches: a bookmark moved in the source in the
    second hgweb last opened the repository is still seen, through
    listkeys, a discovery batch never kept and ``hg clone -r BOOKMARK``,
    as a server without the cache that had not read it sees it."""
    share_ext = ("--config", "extensions.share=")
    hg(*share_ext, "bookmark", "-R", served, "-r", "0", "bm")
    share = tmp_path / "share"
    hg(*share_ext, "share", "-q", "-U", "-B", served, share)
    configure(share, extra="share =")
    memory = ("--config", "wirecache.memory=32m")
    cached = hgserve(share, *memory)
    cacheless = hgserve(share, "--config", "wirecache.enabled=no")
    bookmarks = ("listkeys", {"namespace": "bookmarks"})
    batch = ("batch", {"cmds": "listkeys namespace=bookmarks;lookup key=bm"})
    for _ in range(2):
        ask(cached.url, "capabilities")
        ask(cached.url, *bookmarks)
    assert answered_from_memory(share, 2) >= 2
    store = served / ".hg" / "store"
    before = os.stat(store)
    hg(*share_ext, "bookmark", "-R", served, "-f", "-r", "1", "bm")
    # The move as if in that second: hgweb checks the store's time by the
    # second, and sees no change.
    os.utime(store, ns=(before.st_atime_ns, before.st_mtime_ns))
    moved = hg("log", "-R", served, "-r", "bm", "-T", "{node}")
    for cmd, args in (bookmarks, batch):
        want = ask(cacheless.url, cmd, args)
        assert moved.encode() in want[2]
        for _ in range(2):
            assert ask(cached.url, cmd, args) == want
    clone = tmp_path / "clone"
    hg("clone", "-q", "-U", "-r", "bm", cached.url, clone)
    assert hg("log", "-R", clone, "-r", "bm", "-T", "{node}") == moved


#: A third-party check of the client's address in the wire commands
#: themselves (no function the permission checks go through): its
#: refusal is an error sent with a 200.
COMMAND_CHECK = '''\
from mercurial import extensions, wireprotov1server, wireprototypes


def _guard(orig, repo, proto, *args):
    if proto._req.remotehost != b'127.0.0.1':
        return wireprototypes.ooberror(b'address not allowed')
    return orig(repo, proto, *args)


def extsetup(ui):
    for name in (b'capabilities', b'heads', b'batch'):
        extensions.wrapfunction(wireprotov1server.commands[name], 'func',
                                _guard)
'''


def test_a_refusal_is_never_kept_for_the_next_client(served, hgserve,
                                                     tmp_path):
    """An error a command answers with a 200 (an extension's refusal of
    127.0.0.2) is not kept: 127.0.0.1, asking next, gets the answer a
    server without the cache gives it, then that answer from memory."""
    check = tmp_path / "commandcheck.py"
    check.write_text(COMMAND_CHECK)
    loaded = ("--config", "extensions.commandcheck=%s" % check)
    cached = hgserve(served, *loaded)
    cacheless = hgserve(served, *loaded, "--config", "wirecache.enabled=no")
    paths = ["/?cmd=capabilities", "/?cmd=heads",
             "/?cmd=batch&cmds=heads+%3Bknown+nodes%3D"]
    for path in paths:
        want = ask_from(cacheless.url, "127.0.0.1", path)
        assert want[0].startswith(b"HTTP/1.1 200") and b"not allowed" \
            not in want[1]
        for _ in range(2):
            assert ask_from(cached.url, "127.0.0.2", path) == (
                b"HTTP/1.1 200 Script output follows", b"address not allowed")
        for _ in range(2):
            assert ask_from(cached.url, "127.0.0.1", path) == want
    # The second of 127.0.0.1's, each; never a refusal.
    assert answered_from_memory(served, len(paths)) == len(paths)


def test_manifests_written_after_answers_were_kept_change_them(
        served, hg, hgserve, proxy, tmp_path):
    """Core reads two files beside the repository: clonebundles'
    capabilities advertise clone bundles while
    ``.hg/clonebundles.manifest`` exists, and getbundle sends a bundle
    ``.hg/pullbundles.manifest`` lists instead of computing one.  Each
    written after the answers it changes were kept (in memory, and on
    disk for the getbundle) is obeyed, as by a server without the
    cache."""
    configure(served, extra="clonebundles =")
    pair = Pair(hg, hgserve, proxy, served)
    for _ in range(2):
        assert ask(pair.cached.url, "capabilities") == ask(
            pair.cacheless.url, "capabilities")
    pair.clone(tmp_path / "one")
    pair.clone(tmp_path / "two")
    # The second capabilities, and the second clone's three requests.
    assert answered_from_memory(served, 4) == 4
    assert "getbundle answered from memory" in _server_log(served)
    full = served / ".hg" / "full.hg"
    hg("bundle", "-q", "-R", served, "--all", "-t", "none-v2", full)
    (served / ".hg" / "pullbundles.manifest").write_text("full.hg\n")
    pair.clone(tmp_path / "three")
    for recorder in (pair.cached, pair.cacheless):
        body = recorder.bodies("cmd=getbundle")[-1]
        assert payload(body) == (b"none", full.read_bytes())
    hg("verify", "-q", "-R", tmp_path / "three")
    # Kept again (the pull bundles' manifest made other keys).
    for _ in range(2):
        ask(pair.cached.url, "capabilities")
    (served / ".hg" / "clonebundles.manifest").write_text(
        "http://example.invalid/full.hg BUNDLESPEC=zstd-v2\n")
    want = ask(pair.cacheless.url, "capabilities")
    assert b"clonebundles" in want[2]
    for _ in range(2):
        assert ask(pair.cached.url, "capabilities") == want
