"""The adversarial campaign for ``gitbridge checkout --bundle-uri``
(``gitbridge.bundleseed``): any bytes as a bundle list, read by Git's
config parser, and a bundle host that is missing, lies, stalls, trickles,
cuts or corrupts its answers, serves a stale or hostile list, or bundles
of another history.  Every case ends in the origin's tree, with at most
one line about the bundles, within its bounds."""

import os
import socket
import subprocess
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import campaign
from checkout_drivers import git_commit, git_served, release_files  # noqa: F401
from gitbridge import bundleseed
from vcsperf.core import pooling
from vcsperf.harness import tools
from vcsperf.harness.proxies import Fault, FlakyProxy
from vcsperf.harness.servers import FileServer

pytestmark = pytest.mark.campaign

STOPPED = "(seeding from bundles stopped: "
LIST_HEAD = "[bundle]\n\tversion = 1\n\tmode = all\n" \
    "\theuristic = creationToken\n"

_ENTRY = st.builds(
    lambda name, uri, token: '[bundle "%s"]\n\turi = %s\n%s' % (
        name, uri, "" if token is None else "\tcreationToken = %s\n" % token),
    st.text(alphabet="abc-.\"\\ \u00e9", max_size=8),
    st.one_of(st.sampled_from(["http://h/x.bundle", "https://h/y",
                               "x.bundle", "../up", "file:///etc/passwd",
                               "ftp://h/z", "//other/x", "\"http://h/q;r\"",
                               ""]),
              st.text(max_size=30)),
    st.one_of(st.none(), st.integers(-2, 2 ** 70).map(str),
              st.text(max_size=6)))
_LISTS = st.one_of(
    st.binary(max_size=300),
    st.builds(lambda head, entries: head + "".join(entries),
              st.sampled_from([LIST_HEAD, LIST_HEAD.replace("all", "any"),
                               LIST_HEAD.replace("creationToken", "none"),
                               "[bundle]\n\tversion = 2\n\tmode = all\n",
                               "[bundle]\n\tmode = all\n", ""]),
              st.lists(_ENTRY, max_size=6)).map(
                  lambda text: text.encode("utf-8", "surrogateescape")))


@settings(max_examples=campaign.size(150, 3000), deadline=None,
          derandomize=not campaign.FULL,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=_LISTS)
def test_any_bytes_as_a_bundle_list_are_refused_or_read(data, tally):
    """Any bytes: one line of refusal, or bundles to apply -- at most
    ``MAX_BUNDLES``, each an absolute http or https URI, in increasing
    creation tokens when the list says so, one for ``mode = any``."""
    base = "http://cdn.example.com/git/list"
    try:
        chosen = bundleseed.parse_list(data, base)
    except bundleseed.Failed as failure:
        ok = "\n" not in str(failure) and len(str(failure)) < 400
        tally.case(ok, "refusal of %r: %r" % (data, str(failure)))
        assert ok
        return
    tokens = [listed.token for listed in chosen]
    ok = 0 < len(chosen) <= bundleseed.MAX_BUNDLES and all(
        uri.split(":", 1)[0].lower() in ("http", "https")
        for listed in chosen for uri in (listed.uri, *listed.parts))
    if b"heuristic = creationToken" in data:
        ok = ok and tokens == sorted(tokens) and None not in tokens
    if b"mode = any" in data:
        ok = ok and len(chosen) == 1
    tally.case(ok, "%r read as %r" % (data, chosen))
    assert ok


def test_a_list_of_too_many_bundles_is_refused():
    data = LIST_HEAD + "".join(
        '[bundle "b%d"]\n\turi = http://h/%d\n\tcreationToken = %d\n'
        % (n, n, n) for n in range(bundleseed.MAX_BUNDLES + 1))
    with pytest.raises(bundleseed.Failed, match="over 64 bundles"):
        bundleseed.parse_list(data.encode(), "http://h/list")


def test_a_bundles_packs_are_read_when_two_to_64():
    """``gitbridgePart`` URIs resolve like ``uri``; one pack, more than
    ``MAX_PARTS``, or one that is not http or https (an outside tester's
    finding: it stopped the seeding) leaves the bundle to be taken as
    itself."""
    def entry(name, count):
        return '[bundle "%s"]\n\turi = %s.bundle\n\tcreationToken = %d\n' % (
            name, name, count) + "".join(
            '\tgitbridgePart = "%s.part%d.pack"\n' % (name, n)
            for n in range(count))
    data = LIST_HEAD + entry("a", 3) + entry("b", 1) + entry(
        "c", bundleseed.MAX_PARTS + 1)
    chosen = bundleseed.parse_list(data.encode(), "https://h/git/list")
    assert [(c.uri, c.parts) for c in chosen] == [
        ("https://h/git/b.bundle", ()),
        ("https://h/git/a.bundle", tuple(
            "https://h/git/a.part%d.pack" % n for n in range(3))),
        ("https://h/git/c.bundle", ())]
    [chosen] = bundleseed.parse_list((LIST_HEAD + entry("a", 2) + (
        '\tgitbridgePart = "file:///etc/passwd"\n')).encode(),
        "https://h/git/list")
    assert chosen.uri == "https://h/git/a.bundle" and chosen.parts == ()


def _list(entries):
    return LIST_HEAD + "".join(
        '[bundle "b%d"]\n\turi = "%s"\n\tcreationToken = %d\n'
        % (n, uri, token) for n, (uri, token) in enumerate(entries))


@pytest.fixture
def published(git, gitbridge, git_served, tmp_path):  # noqa: F811
    """A full and an incremental bundle published (``gitbridge
    bundlegen``) to a file host behind a ``FlakyProxy``, the origin one
    commit past them, lists that lie beside them, and the seeding's
    bounds set low (``sharepool.bundle-timeout`` 1 s, ``bundle-deadline``
    3 s).  Yields ``(proxy's base URL, proxy, origin's tip)``."""
    output = tmp_path / "bundles"
    output.mkdir()
    with FileServer(output) as host, FlakyProxy(host.url) as proxy:
        base = proxy.url.rstrip("/")

        def publish():
            gitbridge("bundlegen", "--repo", git_served.repo, "--output",
                      output, "--base-url", base)
        publish()
        git_commit(git, git_served.work, release_files(3, "/docs/\n"), "r3")
        publish()
        tip = git_commit(git, git_served.work, release_files(4, "/docs/\n"),
                         "release 4")
        bundles = sorted(output.glob("*.bundle"),
                         key=lambda p: int(p.name.split(".")[0]))
        full, incremental = ["%s/%s" % (base, p.name) for p in bundles]
        other = tmp_path / "other"
        git("init", "-q", "-b", "main", other)
        (other / "x").write_text("another history\n")
        git("-C", other, "add", "x")
        git("-C", other, "commit", "-q", "-m", "x")
        git("-C", other, "bundle", "create", "-q", output / "other.bundle",
            "--all")
        # bundles whose refs lie: a commit without its tree, and a ref to
        # an object the pack does not hold
        commit = git("-C", other, "rev-parse", "HEAD").strip()
        commit_only = subprocess.run(
            ["git", "-C", str(other), "pack-objects", "--stdout"],
            input=(commit + "\n").encode(), capture_output=True,
            check=True).stdout
        (output / "treeless.bundle").write_bytes(
            b"# v2 git bundle\n%s refs/heads/main\n\n" % commit.encode()
            + commit_only)
        whole = (output / "other.bundle").read_bytes()
        (output / "dangling.bundle").write_bytes(
            b"# v2 git bundle\n%s refs/heads/main\n\n" % (b"1" * 40)
            + whole[whole.index(b"\n\n") + 2:])
        lists = {
            "incremental-only": _list([(incremental, 9)]),
            "tokens-lie": _list([(full, 9), (incremental, 3)]),
            "nested": _list([(base + "/bundle-list", 1)]),
            "file-uri": _list([("file://%s" % bundles[0], 1)]),
            "other-history": _list([(base + "/other.bundle", 1)]),
            "treeless": _list([(base + "/treeless.bundle", 1)]),
            "dangling": _list([(base + "/dangling.bundle", 1)]),
            "html": "<html><body>Not found</body></html>\n",
            "no-token": _list([]).rstrip() + '\n[bundle "x"]\n\turi = '
            + full + "\n",
        }
        for name, text in lists.items():
            (output / name).write_text(text)
        git("config", "--global", "sharepool.bundle-timeout", "1")
        git("config", "--global", "sharepool.bundle-deadline", "3")
        yield base, proxy, tip


def _fall_back(git, gitbridge, git_served, tmp_path, tally,  # noqa: F811
               published, cases):
    """Each case, ``(name, list path, faults, what the one line says or
    None when the bundles apply)``, on a new pool: it ends on the
    origin's tip with a clean tree and a sound store, says at most that
    one line about the bundles, leaves no download or bundle ref behind,
    and ends within its bounds."""
    base, proxy, tip = published
    for number, (what, list_path, faults, says) in enumerate(cases):
        proxy.add(*faults)
        pool, dest = tmp_path / ("pool%d" % number), \
            tmp_path / ("dest%d" % number)
        started = time.monotonic()
        proc = gitbridge("checkout", "--sharebase", pool, "--bundle-uri",
                         base + list_path, "-r", tip, git_served.repo_url,
                         dest, check=False)
        seconds = time.monotonic() - started
        stopped = [line for line in proc.stderr.splitlines()
                   if "bundle" in line]
        ok = proc.returncode == 0 and seconds < 15
        if says is None:
            ok = ok and stopped == [] and "(seeded from" in proc.stdout
        else:
            ok = ok and len(stopped) == 1 and stopped[0].startswith(
                STOPPED) and says in stopped[0] and stopped[0].endswith(
                "from the origin)") and "(seeded from" not in proc.stdout
        if proc.returncode == 0:
            store = [p for p in pool.iterdir() if p.name.endswith(".git")][0]
            ok = ok and git("-C", dest, "rev-parse", "HEAD").strip() == tip \
                and git("-C", dest, "status", "--porcelain") == ""
            ok = ok and git("-C", store, "for-each-ref", "refs/bundles/") \
                == "" and not [name for name in os.listdir(
                    store / "objects" / "pack") if name.startswith("tmp_")]
            git("-C", store, "fsck", "--connectivity-only")
        tally.case(ok, "%s: rc %d, %.1f s, %r" % (
            what, proc.returncode, seconds, proc.stderr))
        proxy.faults.clear()
    tally.check()


def test_a_host_that_is_missing_stalls_or_corrupts_falls_back_to_the_origin(
        git, gitbridge, git_served, tmp_path, tally, published):  # noqa: F811
    _fall_back(git, gitbridge, git_served, tmp_path, tally, published, [
        ("list missing", "/gone", [], "HTTP 404"),
        ("list stalls", "/bundle-list", [Fault("bundle-list", stall=6)],
         "timed out"),
        ("bundle corrupt", "/bundle-list", [Fault(".full.", flip=[-30])],
         ".full."),
        ("bundle trickles", "/bundle-list",
         [Fault(".full.", cut=100, trickle=0.05)], "below"),
        ("tokens lie", "/tokens-lie", [], "prerequisite"),
    ])


@pytest.mark.slow
def test_every_misbehaving_bundle_host_falls_back_to_the_origin(
        git, gitbridge, git_served, tmp_path, tally, published):  # noqa: F811
    """The other ways; without a low-speed limit, a trickle is stopped by
    ``sharepool.bundle-deadline`` (3 s here): the wait is bounded however
    the host sends."""
    git("config", "--global", "sharepool.bundle-low-speed", "0")
    _fall_back(git, gitbridge, git_served, tmp_path, tally, published, [
        ("trickle past the deadline", "/bundle-list",
         [Fault(".full.", cut=100, trickle=0.02)],
         "past sharepool.bundle-deadline (3s)"),
        ("list 500", "/bundle-list", [Fault("bundle-list", status=500)],
         "HTTP 500"),
        ("list is HTML", "/html", [], "not a bundle list"),
        ("bundle cut", "/bundle-list", [Fault(".full.", cut=200)],
         "cut short"),
        ("incremental corrupt", "/bundle-list",
         [Fault(".incremental.", flip=[-30])], ".incremental."),
        ("stale: incremental only", "/incremental-only", [],
         "prerequisite"),
        ("nested list", "/nested", [], "not a bundle"),
        ("file URI", "/file-uri", [], "not http or https"),
        ("no token", "/no-token", [], "no bundle it can use"),
        ("another history", "/other-history", [], None),
        ("a commit without its tree", "/treeless", [],
         "did not receive expected object"),
        ("a ref to nothing", "/dangling", [], "which it does not hold"),
    ])



@pytest.fixture
def header_trickler():
    """A host on 127.0.0.1 that sends a status line, then one header byte
    every 0.2 s for as long as the client reads; yields its URL."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    done = threading.Event()

    def trickle(conn):
        with conn:
            conn.recv(4096)
            try:
                conn.sendall(b"HTTP/1.0 200 OK\r\n")
                while not done.wait(0.2):
                    conn.sendall(b"X")
            except OSError:
                pass

    def accept():
        while True:
            try:
                conn, _address = server.accept()
            except OSError:
                return
            threading.Thread(target=trickle, args=(conn,),
                             daemon=True).start()
    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield "http://127.0.0.1:%d/list" % server.getsockname()[1]
    finally:
        done.set()
        # A close alone leaves accept() blocked, and the thread later
        # took the connections of a server that got the same descriptor
        # (a later test's origin answered "no refs"): shutdown wakes it.
        try:
            server.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        server.close()
        acceptor.join(10)


def test_a_host_that_trickles_its_headers_is_given_up(
        git, tmp_path, header_trickler):
    """Headers a byte at a time never trip the per-read timeout: they
    must come within ``bundle-timeout`` in all, and ``bundle-deadline``
    reaches a connection still reading them."""
    for limits, says in [
            (bundleseed.Limits(timeout=1, deadline=60),
             "no response headers within 1s"),
            (bundleseed.Limits(timeout=60, deadline=1.5),
             "past sharepool.bundle-deadline (1.5s)")]:
        store = tmp_path / ("store%g" % limits.deadline)
        git("init", "-q", "--bare", store)
        started = time.monotonic()
        seeded = bundleseed.seed(str(store), header_trickler, limits)
        seconds = time.monotonic() - started
        assert seeded.failure is not None and says in seeded.failure, \
            seeded.failure
        # a few seconds over the limit on a loaded machine; a host held
        # to its headers' end would take the trickler's 60 s
        assert seconds < 10, seconds
        assert seeded.bundles == 0


def test_a_clone_killed_midway_is_removed_by_the_next(
        git, gitbridge, git_served, env, tmp_path,  # noqa: F811
        header_trickler):
    """A checkout killed while it clones a URL new to the pool (here
    while its bundle host trickles) leaves ``.url-<key>.cloning-<pid>``;
    the next checkout of that URL, under the URL's lock, removes it, and
    only it: a partial whose process lives, a symlink of that name and
    other names stay, and nothing outside the pool is touched."""
    pool, victim = tmp_path / "pool", tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("not the pool's\n")
    killed = subprocess.Popen(
        [tools.executable("gitbridge"), "checkout", "--sharebase", pool,
         "--bundle-uri", header_trickler, "-r", git_served.commits[-1],
         git_served.repo_url, tmp_path / "dest0"], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        partials = list(pool.glob(".url-*.cloning-%d" % killed.pid)) \
            if pool.is_dir() else []
        if partials:
            break
        time.sleep(0.05)
    killed.kill()
    killed.wait()
    assert len(partials) == 1 and partials[0].is_dir()
    prefix = partials[0].name[:-len(str(killed.pid))]
    exited = subprocess.Popen(["true"])
    exited.wait()
    live = pool / (prefix + str(os.getpid()))
    live.mkdir()
    (pool / (prefix + str(exited.pid))).symlink_to(victim)
    others = [pool / (prefix + "x%d" % exited.pid),
              pool / (prefix + "%d.kept" % exited.pid)]
    for other in others:
        other.mkdir()
    proc = gitbridge("checkout", "--sharebase", pool, "-r",
                     git_served.commits[-1], git_served.repo_url,
                     tmp_path / "dest1")
    assert "(removing %s, left by an interrupted clone)" % partials[0] \
        in proc.stderr
    assert not os.path.lexists(partials[0])
    assert live.is_dir() and all(other.is_dir() for other in others)
    assert os.path.islink(pool / (prefix + str(exited.pid)))
    assert os.listdir(victim) == ["keep"]
    assert git("-C", tmp_path / "dest1", "rev-parse", "HEAD").strip() == \
        git_served.commits[-1]


def test_bundles_that_name_too_many_refs_are_given_up(
        git, tmp_path, monkeypatch):
    """Each ref a bundle names is written, shown to the origin and
    deleted: a header of over ``MAX_REFS`` refs (10,000) is refused as it
    is read, and so is one that takes the bundles of a list past it."""
    work = tmp_path / "work"
    git("init", "-q", "-b", "main", work)
    (work / "f").write_text("one\n")
    git("-C", work, "add", "f")
    git("-C", work, "commit", "-q", "-m", "one")
    commit = git("-C", work, "rev-parse", "HEAD").strip().encode()
    git("-C", work, "bundle", "create", "-q", tmp_path / "one.bundle",
        "main")
    pack = (tmp_path / "one.bundle").read_bytes().partition(b"\n\n")[2]
    served = tmp_path / "served"
    served.mkdir()

    def bundle(name, refs):
        (served / name).write_bytes(b"# v2 git bundle\n" + b"".join(
            b"%s refs/heads/r%d\n" % (commit, n) for n in range(refs))
            + b"\n" + pack)
    bundle("many.bundle", bundleseed.MAX_REFS + 1)
    bundle("two.bundle", 2)
    limits = bundleseed.Limits(timeout=5, deadline=30)
    with FileServer(served) as host:
        (served / "list").write_text(_list([(host.url + "two.bundle", 1),
                                            (host.url + "two.bundle", 2)]))
        git("init", "-q", "--bare", tmp_path / "store")
        seeded = bundleseed.seed(str(tmp_path / "store"),
                                 host.url + "many.bundle", limits)
        assert "names over 10000 refs" in seeded.failure, seeded.failure
        assert seeded.bundles == 0
        assert git("-C", tmp_path / "store", "for-each-ref") == ""
        monkeypatch.setattr(bundleseed, "MAX_REFS", 3)
        git("init", "-q", "--bare", tmp_path / "store2")
        seeded = bundleseed.seed(str(tmp_path / "store2"), host.url + "list",
                                 limits)
        assert "names over 1 refs (3 in all" in seeded.failure, \
            seeded.failure
        assert seeded.bundles == 1 and seeded.refs == 2
        assert len(git("-C", tmp_path / "store2", "for-each-ref",
                       bundleseed.REFS).splitlines()) == 2


@pytest.fixture
def published_parts(git, gitbridge, git_served, tmp_path):  # noqa: F811
    """A full bundle published as itself and as three packs
    (``bundlegen.parts``) to a file host behind a ``FlakyProxy``, the
    origin one commit past it, lists whose packs lie beside it, and the
    seeding's bounds set low.  Yields ``(proxy's base URL, proxy, origin's
    tip, the checksum of the bundle's pack)``."""
    output = tmp_path / "bundles"
    output.mkdir()
    with FileServer(output) as host, FlakyProxy(host.url) as proxy:
        base = proxy.url.rstrip("/")
        git("-C", git_served.repo, "config", "bundlegen.parts", "3")
        gitbridge("bundlegen", "--repo", git_served.repo, "--output",
                  output, "--base-url", base)
        published = git("-C", git_served.repo, "rev-parse", "main").strip()
        tip = git_commit(git, git_served.work, release_files(3, "/docs/\n"),
                         "r3")
        full = next(output.glob("*.full.*.bundle"))
        bundle = "%s/%s" % (base, full.name)
        git("-C", git_served.repo, "bundle", "create", "-q",
            output / "inc.bundle", "%s..main" % published)
        parts = ["%s/%s" % (base, p.name) for p in sorted(
            output.glob("*.part*.pack"))]
        assert len(parts) == 3
        other = tmp_path / "other"
        git("init", "-q", "-b", "main", other)
        (other / "x").write_text("another history\n")
        git("-C", other, "add", "x")
        git("-C", other, "commit", "-q", "-m", "x")
        (output / "other.pack").write_bytes(subprocess.run(
            ["git", "-C", str(other), "pack-objects", "--stdout",
             "--all"], input=b"", capture_output=True, check=True).stdout)

        whole = full.read_bytes()
        pack = whole[whole.index(b"\n\n") + 2:]
        (output / "again.pack").write_bytes(pack)
        (output / "cut.bundle").write_bytes(
            whole[:whole.index(b"\n\n") + 2] + pack[:1000])

        def listing(packs, uri=bundle, earlier=""):
            return LIST_HEAD + earlier + '[bundle "full"]\n\turi = "%s"\n' \
                '\tcreationToken = 2\n' % uri + "".join(
                    '\tgitbridgePart = "%s"\n' % pack for pack in packs)
        lists = {
            "incremental-packs": listing(
                parts[:2], base + "/inc.bundle",
                '[bundle "first"]\n\turi = "%s"\n\tcreationToken = 1\n'
                % bundle),
            # the bundle applied, then its pack again as a part of a cut
            # bundle whose other part stalls (the first is in by then)
            "pack-again": listing(
                [base + "/again.pack", parts[1]],
                base + "/cut.bundle", '[bundle "first"]\n\turi = "%s"\n'
                '\tcreationToken = 1\n' % bundle),
            "another-history": listing(parts[:2] + [base + "/other.pack"]),
            "twice": listing(parts[:2] + parts[:1]),
            "bundle-as-part": listing(parts[:2] + [bundle]),
        }
        for name, text in lists.items():
            (output / name).write_text(text)
        git("config", "--global", "sharepool.bundle-timeout", "1")
        git("config", "--global", "sharepool.bundle-deadline", "6")
        yield base, proxy, tip, pack[-20:]


def test_a_bundles_packs_that_lie_give_way_to_the_bundle(
        git, gitbridge, git_served, tmp_path, tally,  # noqa: F811
        published_parts):
    """Each case on a new pool: the packs are indexed side by side when
    they are right; any pack that is missing, cut, corrupt, stalled, of
    another history or not a pack makes the bundle itself apply, with one
    line saying why, and leaves none of the packs' objects behind; every
    case ends on the origin's tip, clean, with a sound store."""
    base, proxy, tip, pack_checksum = published_parts
    cases = [
        ("packs right", "/bundle-list", [], None),
        ("a pack missing", "/bundle-list",
         [Fault(".part2.", status=404)], "HTTP 404"),
        ("a pack cut", "/bundle-list", [Fault(".part3.", cut=300)],
         "cut short"),
        ("a pack corrupt", "/bundle-list", [Fault(".part1.", flip=[-30])],
         ".part1."),
        ("a pack stalls", "/bundle-list", [Fault(".part2.", stall=6)],
         "timed out"),
        ("a pack of another history", "/another-history", [],
         "lack objects"),
        ("a pack twice, one left out", "/twice", [], "lack objects"),
        ("the bundle named as a pack", "/bundle-as-part", [], ".full."),
        ("the bundle missing, its packs there", "/bundle-list",
         [Fault(".full.", status=404)], "HTTP 404"),
        ("a pack the store had", "/pack-again", [Fault(".part2.", stall=3)],
         "timed out"),
        ("packs of an incremental bundle", "/incremental-packs", [],
         "has prerequisites"),
    ]
    for number, (what, list_path, faults, says) in enumerate(cases):
        proxy.add(*faults)
        pool, dest = tmp_path / ("pool%d" % number), \
            tmp_path / ("dest%d" % number)
        started = time.monotonic()
        proc = gitbridge("checkout", "--sharebase", pool, "--bundle-uri",
                         base + list_path, "-r", tip, git_served.repo_url,
                         dest, check=False)
        seconds = time.monotonic() - started
        said = [line for line in proc.stderr.splitlines()
                if "bundle" in line]
        ok = proc.returncode == 0 and seconds < 20 \
            and "(seeded from 1 bundle" in proc.stdout
        if says is None:
            ok = ok and said == []
        elif what.startswith("the bundle missing"):  # no refs, no packs
            ok = proc.returncode == 0 and len(said) == 1 and said[
                0].startswith(STOPPED) and says in said[0]
        elif what == "packs of an incremental bundle":  # it applies
            ok = proc.returncode == 0 and len(said) == 1 and said[
                0].startswith("(bundle packs not used: ") and says in said[
                0] and "(seeded from 2 bundles" in proc.stdout
        elif what == "a pack the store had":  # then a cut bundle
            ok = proc.returncode == 0 and len(said) == 2 and said[
                0].startswith("(bundle packs not used: ") and says in said[
                0] and said[1].startswith(STOPPED) and "cut.bundle" in said[1]
        else:
            ok = ok and len(said) == 1 and said[0].startswith(
                "(bundle packs not used: ") and says in said[0] \
                and said[0].endswith("taking the bundle itself)")
        if proc.returncode == 0:
            store = [p for p in pool.iterdir() if p.name.endswith(".git")][0]
            packs = sorted(name for name in os.listdir(
                store / "objects" / "pack") if name.endswith(".pack"))
            if what == "a pack the store had":
                # named by its checksum, its last 20 bytes
                ok = ok and "pack-%s.pack" % (
                    pack_checksum.hex()) in packs
            # the bundle's one pack (or its three), and the origin's
            ok = ok and len(packs) <= (4 if says is None else 3) \
                and not [n for n in packs if n.startswith("tmp_")]
            ok = ok and git("-C", dest, "rev-parse", "HEAD").strip() == tip \
                and git("-C", dest, "status", "--porcelain") == "" \
                and git("-C", store, "for-each-ref", "refs/bundles/") == ""
            git("-C", store, "fsck", "--connectivity-only")
        tally.case(ok, "%s: rc %d, %.1f s, %r, %r" % (
            what, proc.returncode, seconds, proc.stdout, proc.stderr))
        proxy.faults.clear()
    tally.check()


def test_a_pack_stream_that_fails_midway_leaves_no_process_to_kill(
        tmp_path):
    """A pack download that fails while ``git index-pack`` reads it: the
    process is killed and reaped, and taken off the list of those to stop
    (its number, once reaped, may be another process group's); a pack
    read whole is taken off too."""
    store = tmp_path / "store.git"
    tools.run(["git", "init", "-q", "--bare", str(store)], None)
    source = tmp_path / "src"
    tools.run(["git", "init", "-q", str(source)], None)
    (source / "f").write_bytes(os.urandom(100000))
    tools.run(["git", "-C", str(source), "add", "f"], None)
    tools.run(["git", "-C", str(source), "-c", "user.name=t", "-c",
               "user.email=t@example.org", "commit", "-q", "-m", "one"], None)
    pack = subprocess.run(["git", "pack-objects", "--all", "--stdout"],
                          cwd=source, input=b"", capture_output=True,
                          check=True).stdout

    def failing():
        yield pack[:len(pack) // 2]
        raise OSError("connection reset")

    running = []
    with pooling.StepDeadline(60) as deadline:
        with pytest.raises(OSError):
            bundleseed._index_pack(str(store), failing(), "http://h/p",
                                   deadline, None, (), running)
        assert running == []
        name = bundleseed._index_pack(str(store), iter([pack]),
                                      "http://h/p", deadline, None, (),
                                      running)
    assert running == [] and len(name) == 40
    assert (store / "objects" / "pack" / ("pack-%s.pack" % name)).exists()
