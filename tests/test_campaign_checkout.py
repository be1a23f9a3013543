"""The adversarial campaign for pooled checkouts (tests/campaign.py): any
bytes in a lock file, ``hg robustcheckout`` and ``gitbridge checkout``
killed with SIGKILL at seeded random moments, bytes flipped in the
pool's indexes and the checkout's dirstate, and a server that stalls,
trickles, cuts its answers or lies.  After each, a rerun must finish:
the requested revision, nothing modified, ``hg verify`` or ``git fsck``
clean."""

import filecmp
import hashlib
import os
import shutil
import subprocess
import threading
import time

import pytest
from hypothesis import given, settings, strategies as st
from mercurial import store as hgstore

import campaign
from checkout_drivers import (
    GitDriver,
    HgDriver,
    git_served,  # noqa: F401 (a fixture)
    hg_served,  # noqa: F401 (a fixture)
    hg_source,  # noqa: F401 (a fixture)
    hgrc,  # noqa: F401 (a fixture)
    module_hgserve,  # noqa: F401 (a fixture)
)
from vcsperf.core import pooling
from vcsperf.harness import tools
from vcsperf.harness.proxies import Fault, FlakyProxy
from vcsperf.harness.servers import FileServer, GitServer

KINDS = ("clone", "pull", "update")
#: A full campaign runs longer than the suite's timeout per test.
_TIMEOUT = pytest.mark.timeout(campaign.size(600, 3600))


def _on_real_history(test):
    """A campaign test on the real history (so marked slow)."""
    return pytest.mark.slow(pytest.mark.campaign(_TIMEOUT(test)))

# Lock files ---------------------------------------------------------------

_HOST = pooling.owner_identity().rpartition(":")[0]
# Contents near the real format, beside arbitrary bytes.
_LOCKISH = st.builds(
    lambda host, sep, pid: ("%s%s%s" % (host, sep, pid)).encode(
        "utf-8", "surrogateescape"),
    st.sampled_from([_HOST, "old-container.example/4026531836", "", " ",
                     _HOST + "\n", "h\x00st", "h\u00e9te"]),
    st.sampled_from([":", "::", "", ": "]),
    st.one_of(st.integers(-5, 2 ** 40).map(str),
              st.text(max_size=12)))


@pytest.mark.campaign
@_TIMEOUT
def test_any_lock_file_is_judged_and_never_waited_for_unboundedly(
        tmp_path, tally):
    """Property, for any bytes in a lock (a regular file's content or a
    symlink's target) or a directory in its place, of any age: reading
    and judging it raises nothing; content that is not ``host:pid`` is
    garbage, taken over within GARBAGE_SETTLE seconds; any other verdict
    is a finite wait.  An old garbage lock is taken over at once."""
    path = str(tmp_path / "pool.lock")

    @settings(max_examples=campaign.size(300, 5000), deadline=None,
              derandomize=not campaign.FULL)
    @given(content=st.one_of(st.binary(max_size=300), _LOCKISH),
           kind=st.sampled_from(["file", "symlink", "directory"]),
           age=st.floats(0, 7200), private=st.booleans())
    def judged(content, kind, age, private):
        pooling.remove_lock(path)
        target = content.replace(b"\0", b"")[:4000]
        if kind == "directory":
            os.mkdir(path)
        elif kind == "symlink" and target:
            os.symlink(target, os.fsencode(path))
        else:
            with open(path, "wb") as fh:
                fh.write(content)
        stamp = time.time() - age
        os.utime(path, (stamp, stamp), follow_symlinks=False)
        what = "%s %r, %.0f s old" % (kind, content[:40], age)
        policy = pooling.LockPolicy(private=private, grace=600,
                                    timeout=3600)
        read = pooling.read_lock(path)
        owner = pooling.parse_owner(read)
        pooling.describe_owner(read)
        verdict = policy.verdict(read, pooling.lock_age(path), 0)
        ok = isinstance(read, str)
        if owner is None:
            ok = ok and (verdict is None or (
                verdict[1] and 0 < verdict[0] <= pooling.GARBAGE_SETTLE))
            if age > pooling.GARBAGE_SETTLE + 1:
                # taken over at once: the lock is then ours
                lock = pooling.PidLock(path, policy, None)
                thread = threading.Thread(target=lock.acquire, daemon=True)
                thread.start()
                thread.join(10)
                ok = ok and not thread.is_alive() and os.readlink(
                    path) == pooling.owner_identity()
                lock.release()
        else:
            host, pid = owner
            ok = ok and 0 < pid < 2 ** 31 and read.startswith(host + ":")
            ok = ok and (verdict is None or 0 < verdict[0] <= 3600)
        tally.case(ok, what)
        assert ok, what

    judged()
    pooling.remove_lock(path)
    tally.check()


# Rounds, for both commands ---------------------------------------------------

def _kill_rounds(pool, tally, prepare, env):
    """Run the checkout of ``pool``, each round from the state
    ``prepare(kind)`` makes (it returns the revision to ask for), and kill
    it at a seeded moment within how long that kind of run takes
    unharmed (the last run that ended by itself); then the rerun must
    leave no ``pool.problems``.  Rounds go on until the campaign's number
    of kills came before the command ended."""
    durations = {}
    wanted, rounds, killed = campaign.size(2, 24), 0, 0
    while killed < wanted and rounds < 3 * wanted:
        kind = KINDS[rounds % len(KINDS)]
        if kind not in durations:
            start = time.monotonic()
            warmup = pool.run(prepare(kind))
            assert warmup.returncode == 0, (kind, warmup.stderr)
            durations[kind] = time.monotonic() - start
        revision = prepare(kind)
        delay = tally.rng.uniform(0.02, durations[kind])
        start = time.monotonic()
        if campaign.kill_after(pool.run_command(revision), env, delay):
            killed += 1
        else:  # it ended by itself: how long such a run takes now
            durations[kind] = time.monotonic() - start
        problems = pool.problems(pool.run(revision), revision)
        tally.case(not problems, "round %d: %s killed after %.2f s: %s"
                   % (rounds, kind, delay, problems))
        rounds += 1
    print("%d rounds, %d killed before the command ended" % (rounds, killed))
    assert killed == wanted, "the kills came too late"
    tally.check()


def _flip_rounds(pool, tally, revisions, damage_store, checkout_state):
    """Check out one revision, damage the pool (``damage_store(old,
    new)``) or DEST (its file ``checkout_state``) with flipped bytes, then
    check out another: it must leave no ``pool.problems``."""
    rng = tally.rng
    rounds = campaign.size(2, 16)
    for round_ in range(rounds):
        old, new = rng.sample(revisions, 2)
        first = pool.run(old)
        # a failed rerun of the round before is the failure to report
        assert first.returncode == 0, (tally.failures, first.stderr)
        if round_ % 2:
            damage = _flip_bytes(pool.dest / checkout_state, rng)
        else:
            damage = damage_store(old, new)
        # flipped bytes may leave a store that reads without error but
        # wrong: the files are compared with the served ones
        problems = pool.problems(pool.run(new), new, files=True)
        tally.case(not problems, "round %d, %s: %s"
                   % (round_, damage, problems))
    print("%d rounds of flipped bytes" % rounds)
    tally.check()


def _flip_bytes(path, rng):
    """Flip one to eight bytes of the file ``path``; says which."""
    data = bytearray(path.read_bytes())
    spots = sorted(rng.randrange(len(data))
                   for _ in range(rng.randint(1, 8)))
    for spot in spots:
        data[spot] ^= rng.randrange(1, 256)
    path.write_bytes(bytes(data))
    return "%s bytes %s" % (path.name, spots)


# hg robustcheckout ---------------------------------------------------------

@pytest.fixture
def hg_pool(hg, real_hg_repo, hgserve, tmp_path):
    """The real history served by hg serve, a pool and one DEST."""
    return HgDriver(hg, real_hg_repo, hgserve(real_hg_repo).url, tmp_path)


@_on_real_history
def test_robustcheckout_killed_at_random_moments_then_rerun_finishes(
        hg, hg_pool, tmp_path, tally):
    """robustcheckouts of real history -- a clone, a pull or an update --
    each killed (the whole process group) at a seeded random moment: the
    next run finishes the checkout, and the store passes hg verify."""
    pool = hg_pool
    old_store = tmp_path / "old-store"
    hg("clone", "-q", "-U", "-r", pool.revisions[20], pool.repo, old_store)

    def prepare(kind):
        """The starting state of a round, and the revision it asks for."""
        if kind != "update":
            pooling.discard(pool.pool)
            pooling.discard(pool.dest)
        if kind == "pull":
            hg("clone", "-q", "-U", old_store, pool.store)
        return tally.rng.choice(pool.revisions[25:] if kind != "update"
                                else pool.revisions)

    _kill_rounds(pool, tally, prepare, hg.env)


#: Bytes of a revlog index entry that reading the revision depends on:
#: offset and flags, compressed length, delta base, parents, node.  (The
#: linkrev and the full length are for hg verify to check, not a read.)
_READ_FIELDS = [*range(0, 12), *range(16, 20), *range(24, 52)]


def _entry_position(index, rev):
    """Where entry ``rev`` starts in the revlog index bytes ``index``."""
    inline = int.from_bytes(index[:4], "big") & (1 << 16)
    position = 0
    for _ in range(rev):
        length = int.from_bytes(index[position + 8:position + 12], "big")
        position += 64 + (length if inline else 0)
    return position


def _flip_filelog_entry(pool, rng, path, node):
    """Flip one byte that reading file ``path`` at ``node`` depends on, in
    the entry of its filelog's index in the pool's store."""
    filenode = [line.split()[0] for line in pool.tool(
        "manifest", "--debug", "-r", node, cwd=pool.repo).splitlines()
        if line.split(None, 2)[2] == path][0]
    rev = [int(line.split()[0]) for line in pool.tool(
        "debugindex", path, cwd=pool.repo).splitlines()[1:]
        if filenode.startswith(line.split()[2])][0]
    index = pool.store / ".hg" / "store" / os.fsdecode(
        hgstore._pathencode(b"data/" + os.fsencode(path) + b".i"))
    data = bytearray(index.read_bytes())
    spot = _entry_position(data, rev) + rng.choice(_READ_FIELDS)
    data[spot] ^= rng.randrange(1, 256)
    index.write_bytes(bytes(data))
    return "%s rev %d byte %d" % (path, rev, spot)


@_on_real_history
def test_robustcheckout_recovers_from_flipped_bytes(hg_pool, tally):
    """A checkout of one revision, then damage -- a byte flipped in the
    pool's filelog index entry that the next revision's update reads, or
    bytes flipped in DEST's dirstate -- then a checkout of another
    revision: it finishes with exactly the served files, and the store
    passes hg verify."""
    pool = hg_pool

    def damage_store(old, new):
        changed = pool.tool("status", "-n", "-ma", "--rev", old, "--rev", new,
                          cwd=pool.repo).splitlines()
        return _flip_filelog_entry(pool, tally.rng,
                                   tally.rng.choice(changed), new)

    _flip_rounds(pool, tally, pool.revisions, damage_store,
                 os.path.join(".hg", "dirstate"))


# gitbridge checkout ----------------------------------------------------------

@pytest.fixture
def git_pool(git, real_git_repo, tmp_path):
    """The real history behind git http-backend, a pool and one DEST."""
    repos = tmp_path / "repos"
    repos.mkdir()
    os.symlink(real_git_repo, repos / "pip.git")
    with GitServer(repos) as server:
        server.repo_url = server.url + "pip.git"
        yield GitDriver(git, real_git_repo, server, tmp_path)


@_on_real_history
def test_gitbridge_checkout_killed_at_random_moments_then_rerun_finishes(
        git, git_pool, tmp_path, tally):
    """gitbridge checkouts of real history -- clone, fetch or update --
    each killed (with its git children) at a seeded random moment: the
    next run finishes, and the store passes git fsck."""
    pool = git_pool
    # a store that saw only the first 21 releases, copied in for each
    # "pull" round (the URL's root is known from the first round on)
    old_store = tmp_path / "old-store.git"
    key = pool.url_key
    git("init", "-q", "--bare", old_store)
    git("-C", old_store, "fetch", "-q", pool.repo,
        "%s:refs/pool/%s/heads/main" % (pool.revisions[20], key))

    def prepare(kind):
        if kind != "update":
            pooling.discard(pool.store)
            pooling.discard(pool.dest)
        if kind == "pull":
            shutil.copytree(old_store, pool.store, symlinks=True)
        return tally.rng.choice(pool.revisions[25:] if kind != "update"
                                else pool.revisions)

    _kill_rounds(pool, tally, prepare, git.env)


def _flip_packed_object(pool, rng, path, commit):
    """Flip one byte of the packed object holding ``path`` at ``commit``
    in the pool's store (git checks every object it inflates)."""
    blob = pool.tool("-C", pool.store, "rev-parse",
                    "%s:%s" % (commit, path)).strip()
    for index in sorted((pool.store / "objects" / "pack").glob("*.idx")):
        for line in pool.tool("verify-pack", "-v", index).splitlines():
            fields = line.split()
            if fields and fields[0] == blob:
                size, offset = int(fields[3]), int(fields[4])
                pack = index.with_suffix(".pack")
                data = bytearray(pack.read_bytes())
                spot = offset + rng.randrange(size)
                data[spot] ^= rng.randrange(1, 256)
                os.chmod(pack, 0o644)
                pack.write_bytes(bytes(data))
                return "%s (%s) byte %d of %s" % (path, blob[:12], spot,
                                                   pack.name)
    raise AssertionError("%s not packed in the store" % blob)


@_on_real_history
def test_gitbridge_checkout_recovers_from_flipped_bytes(git_pool, tally):
    """A checkout of one commit, then damage -- a byte flipped in the
    pool's packed object that the next commit's checkout reads, or bytes
    flipped in DEST's index -- then a checkout of another commit: it
    finishes with exactly the served files, and the store passes git
    fsck."""
    pool = git_pool

    def damage_store(old, new):
        changed = pool.tool("-C", pool.repo, "diff", "--name-only",
                           "--diff-filter=AM", old, new).splitlines()
        return _flip_packed_object(pool, tally.rng,
                                   tally.rng.choice(changed), new)

    _flip_rounds(pool, tally, pool.revisions, damage_store,
                 os.path.join(".git", "index"))


# A server that stalls, trickles, cuts or lies ------------------------------

#: The requests of each command that a fault may hit ("/": any).
_REQUESTS = {
    "hg": ["cmd=capabilities", "cmd=batch", "cmd=getbundle", "/"],
    "git": ["info/refs", "command=ls-refs", "command=fetch", "/"],
}
#: The deadline of each network step in these rounds (seconds).
_DEADLINE = 3


def _server_fault(rng, vcs):
    """A seeded fault of one of the four classes, on a seeded request."""
    match = rng.choice(_REQUESTS[vcs])
    times = rng.choice([1, 2, None])
    kind = rng.choice(["stall", "trickle", "cut", "lie"])
    # where in the answer it starts: the first byte, anywhere, or its end
    where = rng.choice([None, rng.randrange(2000), -rng.randrange(1, 400)])
    if kind == "stall":
        return Fault(match, cut=where, stall=rng.uniform(0.5, 2 * _DEADLINE),
                     times=times)
    if kind == "trickle":
        return Fault(match, cut=where, trickle=rng.uniform(0.2, 0.6),
                     times=times)
    if kind == "cut":
        return Fault(match, cut=where or 0, times=times)
    return Fault(match, flip=[rng.randrange(1 << 20)
                              for _ in range(rng.randint(1, 4))],
                 times=times)


def _server_fault_rounds(pool, proxy, tally, prepare):
    """Checkouts through ``proxy`` of revisions the pool lacks, from the
    state ``prepare(kind)`` makes (a new pool, or a store that lacks the
    revision), each with a seeded server fault: the checkout finishes
    right or ends in one ``abort:`` line, within the deadline's bound;
    then a rerun against the healed server must leave no
    ``pool.problems``."""
    rng = tally.rng
    pool.url = pool.url_via(proxy)
    pool.configure("sharepool.network-deadline", str(_DEADLINE))
    rounds = campaign.size(4, 24)
    for round_ in range(rounds):
        kind = rng.choice(["clone", "pull"])
        revision = prepare(kind)
        fault = _server_fault(rng, pool.vcs)
        proxy.faults.clear()
        proxy.add(fault)
        what = "round %d: %s, %r" % (round_, kind, fault)
        try:
            # the bound: 2 attempts, each within the deadline, and a
            # wait, with room for a slow machine
            faulted = subprocess.run(
                pool.command("--purge", "-r", revision, "--networkattempts",
                             "2"), env=pool.env, capture_output=True,
                text=True, timeout=20 * _DEADLINE)
        except subprocess.TimeoutExpired:
            tally.case(False, "%s: still running after %d s"
                       % (what, 20 * _DEADLINE))
            continue
        if faulted.returncode == 0:
            wrong = pool.problems(faulted, revision, files=True)
        elif campaign.is_clean_abort(faulted):
            wrong = []
        else:
            wrong = ["exit %d: %s" % (faulted.returncode,
                                      faulted.stderr.strip()[-300:])]
        proxy.faults.clear()
        wrong += pool.problems(pool.run(revision), revision, files=True)
        tally.case(not wrong, "%s: %s" % (what, wrong))
    print("%d rounds of server faults" % rounds)
    tally.check()


@pytest.mark.campaign
@pytest.mark.slow
@_TIMEOUT
def test_robustcheckout_survives_a_server_that_stalls_trickles_cuts_or_lies(
        hg, hg_source, hg_served, tmp_path, tally):  # noqa: F811 (a fixture)
    """hg robustcheckout through a proxy of hg serve that stalls (before
    answering or midway), trickles, cuts or flips bytes of a seeded
    request, for a new pool or a store that lacks the revision."""
    pool = HgDriver(hg, hg_source, hg_served.url, tmp_path)

    def prepare(kind):
        pooling.discard(pool.pool)
        pooling.discard(pool.dest)
        if kind == "pull":
            hg("clone", "-q", "-U", "-r", pool.revisions[0], pool.repo,
               pool.store)
        return tally.rng.choice(pool.revisions[1:])

    with FlakyProxy(hg_served.url) as proxy:
        _server_fault_rounds(pool, proxy, tally, prepare)


@pytest.mark.campaign
@pytest.mark.slow
@_TIMEOUT
def test_gitbridge_survives_a_server_that_stalls_trickles_cuts_or_lies(
        git, git_served, tmp_path, tally):  # noqa: F811 (a fixture)
    """gitbridge checkout through a proxy of git http-backend that stalls,
    trickles, cuts or flips bytes of a seeded request, for a new pool or
    a store that lacks the commit."""
    pool = GitDriver(git, git_served.repo, git_served, tmp_path)
    old_store = tmp_path / "old-store.git"

    with FlakyProxy(git_served.url) as proxy:
        # the first checkout through the proxy records the URL's root
        pool.url = pool.url_via(proxy)
        pool.checkout("-r", pool.revisions[0])
        key = pool.url_key = _url_key(pool.url)
        git("init", "-q", "--bare", old_store)
        git("-C", old_store, "fetch", "-q", pool.repo,
            "%s:refs/pool/%s/heads/main" % (pool.revisions[0], key))

        def prepare(kind):
            pooling.discard(pool.store)
            pooling.discard(pool.dest)
            if kind == "pull":
                shutil.copytree(old_store, pool.store, symlinks=True)
            return tally.rng.choice(pool.revisions[1:])

        _server_fault_rounds(pool, proxy, tally, prepare)


def _url_key(url):
    """gitbridge's name for a URL in the pool."""
    return hashlib.sha256(url.encode()).hexdigest()[:20]


# A clone bundle host that misbehaves ---------------------------------------

#: Mozilla's robustcheckout, when version-control-tools is extracted there
#: (contrib/robustcheckout_suite.py): it runs the same rounds.
MOZILLA_ROBUSTCHECKOUT = "/tmp/vct/hgext/robustcheckout"


@pytest.mark.campaign
@pytest.mark.slow
@_TIMEOUT
def test_robustcheckout_from_a_clone_bundle_host_that_stalls_cuts_or_lies(
        hg, hgserve, tmp_path, tally):
    """A new pool cloned from a stream clone bundle that ``hg bundlegen``
    published and ``hg serve`` advertises, as Firefox CI clones from
    hg.mozilla.org's bundles, the bundle host (a web server behind a
    proxy) stalling, cutting its answer, answering 500, trickling or
    flipping bytes: ours, and Mozilla's when present, end with the
    revision's tree (the store passing ``hg verify``) or one ``abort:``
    line, within a bound; a rerun against the healed host finishes.
    Mozilla's has no deadline for a host that trickles: that fault is
    ours alone."""
    from checkout_drivers import make_hg_source

    source = make_hg_source(hg, tmp_path / "source")
    node = source.nodes[-1]
    output = tmp_path / "bundles"
    home = tmp_path / "bundlegen-home"
    home.mkdir()
    sides = {"ours": ["--config", "extensions.robustcheckout="]}
    if os.path.isdir(MOZILLA_ROBUSTCHECKOUT):
        sides["mozilla"] = ["--config", "extensions.robustcheckout=%s"
                            % MOZILLA_ROBUSTCHECKOUT, "--config",
                            "robustcheckout.retryjittermin=0", "--config",
                            "robustcheckout.retryjittermax=50"]
    with FileServer(output) as files, FlakyProxy(files.url) as host:
        (home / "hgrc").write_text(
            "[extensions]\nbundlegen =\n[bundlegen]\noutput = %s\n"
            "base-url = %s\nformats = stream\n" % (output, host.url))
        bundlegen_env = tools.isolated_env(str(home), str(home / "hgrc"))
        tools.hg(["-R", source, "bundlegen"], bundlegen_env)
        server = hgserve(source, "--config", "extensions.clonebundles=")
        # the last applies to both sides: their stores are verified then
        faults = [Fault(".hg", trickle=0.3), Fault(".hg", cut=500),
                  Fault(".hg", status=500), Fault(".hg", stall=0.5),
                  Fault(".hg", flip=[100, 2000, -5])]
        for fault in faults:
            for side, config in sides.items():
                if side == "mozilla" and fault.trickle:
                    continue
                pool, dest = tmp_path / "pool", tmp_path / "co"
                pooling.discard(str(pool))
                pooling.discard(str(dest))
                command = hg.binary, *config, "robustcheckout", \
                    "--sharebase", pool, "-r", node, server.url, dest
                if side == "ours":
                    # retries are tried elsewhere: one attempt each here
                    command += ("--networkdeadline", "2",
                                "--networkattempts", "1")
                host.faults.clear()
                host.add(Fault(fault.match, cut=fault.cut,
                               status=fault.status, stall=fault.stall,
                               trickle=fault.trickle, flip=fault.flip,
                               times=None))
                what = "%s, %r" % (side, fault)
                try:
                    faulted = subprocess.run(
                        [str(arg) for arg in command], env=hg.env,
                        capture_output=True, encoding="utf-8",
                        errors="replace", timeout=60)
                except subprocess.TimeoutExpired:
                    tally.case(False, "%s: still running after 60 s" % what)
                    continue
                if faulted.returncode == 0:
                    wrong = _bundle_checkout_problems(hg, source, dest, node)
                elif campaign.is_clean_abort(faulted):
                    wrong = []
                else:
                    wrong = ["exit %d: %s" % (faulted.returncode,
                                              faulted.stderr[-400:])]
                host.faults.clear()
                rerun = subprocess.run([str(arg) for arg in command],
                                       env=hg.env, capture_output=True,
                                       encoding="utf-8", errors="replace",
                                       timeout=60)
                wrong += (["rerun: exit %d: %s" % (rerun.returncode,
                                                    rerun.stderr[-400:])]
                          if rerun.returncode else
                          _bundle_checkout_problems(hg, source, dest, node))
                if fault is faults[-1]:
                    # the store each side's last rerun made
                    (store,) = os.listdir(pool)
                    verify = hg.proc("verify", "-q", "-R", pool / store)
                    wrong += ["verify: %s" % verify.stderr[-300:]] * bool(
                        verify.returncode)
                tally.case(not wrong, "%s: %s" % (what, wrong))
        # the rounds took the bundle host, not the origin's stream
        assert [entry for entry in host.log if entry[2] == "passed"]
    tally.check()


def _bundle_checkout_problems(hg, source, dest, node):
    """What is wrong with a checkout said to be done: its parent, and its
    files against the source's (whose working directory is at ``node``)."""
    wrong = []
    parent = hg("log", "-R", dest, "-r", ".", "-T", "{node}")
    if parent != node:
        wrong.append("parent %s, not %s" % (parent, node))
    pending = [filecmp.dircmp(source, dest, ignore=[".hg"])]
    while pending:
        compared = pending.pop()
        if compared.left_only or compared.right_only or compared.diff_files:
            wrong.append("%s differs: %s %s %s" % (
                compared.right, compared.left_only, compared.right_only,
                compared.diff_files))
        pending += compared.subdirs.values()
    return wrong
