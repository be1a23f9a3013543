"""The campaign for ready trees (``gitbridge ready-trees`` and the take
in ``gitbridge checkout``, tests/campaign.py): refills and takes killed
with SIGKILL at seeded random moments, and seeded damage done to ready
trees behind the pool's back -- to the working tree, the index, the
files the seal holds, the seal itself, and special files in their
place.  After each: no tree is handed out dirty or half made, none is
lost, the pool holds exactly the trees it was asked for, and every
checkout ends on its commit with exactly the served files."""

import json
import os
import re
import subprocess
import time

import pytest

import campaign
from checkout_drivers import git_served  # noqa: F401 (a fixture)
from test_readytrees import Pool
from vcsperf.core import readytrees
from vcsperf.harness import tools

_TIMEOUT = pytest.mark.timeout(campaign.size(600, 3600))


@pytest.fixture
def pool(git, git_served, tmp_path):  # noqa: F811 (a fixture)
    return Pool(git, git_served.repo, git_served, tmp_path,
                work=git_served.work)


def _pool_problems(pool, count):
    """What is wrong with the ready directory after a refill of
    ``count``: anything but that many sealed trees."""
    names = pool.ready_names()
    found = []
    if len(names) != count or not all(
            readytrees._TREE.fullmatch(name) for name in names):
        found.append("ready directory holds %s" % names)
    trees = readytrees.ReadyTrees(str(pool.ready), ".git",
                                  (".git/index",))
    for name in names:
        _revision, problem = trees.seal_problem(str(pool.ready / name))
        if problem:
            found.append("%s: %s" % (name, problem))
    return found


@pytest.mark.campaign
@_TIMEOUT
def test_refills_and_takes_killed_at_random_moments(pool, tmp_path, tally):
    """Each round kills a refill (making or refreshing trees) or a
    checkout that takes one, at a seeded moment within how long it takes
    unharmed; then the killed command is run again and the pool refilled:
    the checkout's DEST is its commit with exactly the served files, and
    the pool holds exactly its trees, sealed."""
    rng = tally.rng
    count = 2
    pool.refill(count=count)
    durations = {}
    rounds, killed, wanted = 0, 0, campaign.size(3, 24)
    while killed < wanted and rounds < 3 * wanted:
        kind = ("refill", "take")[rounds % 2]
        revision = rng.choice(pool.revisions)
        if kind not in durations:
            # how long such a run takes unharmed
            pool.dest = tmp_path / ("warmup%d" % rounds)
            start = time.monotonic()
            proc = subprocess.run(_argv(pool, kind, count, revision),
                                  env=pool.env, capture_output=True,
                                  text=True)
            assert proc.returncode == 0, proc.stderr
            durations[kind] = time.monotonic() - start
            pool.refill(count=count)
        pool.dest = dest = tmp_path / ("job%d" % rounds)
        argv = _argv(pool, kind, count, revision)
        delay = rng.uniform(0.02, durations[kind])
        if campaign.kill_after(argv, pool.env, delay):
            killed += 1
        rerun = subprocess.run(argv, env=pool.env, capture_output=True,
                               text=True)
        problems = []
        if kind == "take":
            problems = pool.problems(rerun, revision, files=True)
        elif rerun.returncode:
            problems = ["refill failed: %s" % rerun.stderr[-300:]]
        pool.refill(count=count)
        problems += _pool_problems(pool, count)
        tally.case(not problems, "round %d: %s of %s killed after %.2f s: "
                   "%s" % (rounds, kind, revision[:12], delay, problems))
        if kind == "take" and dest.exists():
            subprocess.run(["rm", "-rf", str(dest)], check=True)
        rounds += 1
    print("%d rounds, %d killed before the command ended" % (rounds, killed))
    assert killed == wanted, "the kills came too late"
    tally.check()


def _argv(pool, kind, count, revision):
    """A refill of ``count`` trees at ``revision``, or a checkout of it
    into the pool's DEST."""
    if kind == "take":
        return pool.command("-r", revision)
    return [tools.executable("gitbridge"), "ready-trees", "--sharebase",
            str(pool.pool), "--count", str(count), "-r", revision, pool.url]


def _flip(path, rng):
    data = bytearray(path.read_bytes())
    if not data:
        path.write_bytes(b"\xff")
        return "%s: emptied file written" % path.name
    spot = rng.randrange(len(data))
    data[spot] ^= rng.randrange(1, 256)
    path.write_bytes(bytes(data))
    return "%s byte %d flipped" % (path.name, spot)


def _damage(tree, rng, marker):
    """One seeded change to the ready tree ``tree``; says which."""
    git = tree / ".git"
    kind = rng.choice(["add", "change", "remove", "remove-dir",
                       "flip-index", "flip-head", "flip-config",
                       "flip-alternates", "flip-seal", "fsmonitor",
                       "hooks", "fifo", "symlink", "directory",
                       "chmod-file"])
    files = sorted(p for p in tree.rglob("*") if p.is_file()
                   and ".git" not in p.relative_to(tree).parts)
    victim = rng.choice(files)
    if kind == "add":
        (victim.parent / "planted.txt").write_text("planted\n")
    elif kind == "change":
        victim.write_text("changed\n")
    elif kind == "remove":
        victim.unlink()
    elif kind == "remove-dir":
        subprocess.run(["rm", "-rf", str(victim.parent)], check=True)
    elif kind == "chmod-file":
        os.chmod(victim, 0o755)
    elif kind.startswith("flip-"):
        target = {"index": git / "index", "head": git / "HEAD",
                  "config": git / "config",
                  "alternates": git / "objects" / "info" / "alternates",
                  "seal": git / readytrees.SEAL}[kind[5:]]
        return "%s (%s)" % (kind, _flip(target, rng))
    elif kind == "fsmonitor":
        with open(git / "config", "a") as fh:
            fh.write("[core]\n\tfsmonitor = touch %s\n" % marker)
    elif kind == "hooks":
        hooks = git / "hooks"
        hooks.mkdir(exist_ok=True)
        hook = hooks / "post-checkout"
        hook.write_text("#!/bin/sh\ntouch %s\n" % marker)
        hook.chmod(0o755)
    else:
        target = rng.choice([git / "index", git / "config", git / "HEAD",
                             git / readytrees.SEAL])
        target.unlink()
        if kind == "fifo":
            os.mkfifo(target)
        elif kind == "symlink":
            os.symlink("/dev/zero", target)
        else:
            target.mkdir()
        return "%s replaced by a %s" % (target.name, kind)
    return "%s (%s)" % (kind, victim.relative_to(tree))


@pytest.mark.campaign
@_TIMEOUT
def test_damage_behind_the_pools_back_is_never_handed_out(pool, tmp_path,
                                                         tally):
    """Seeded damage to a ready tree, then a new checkout: it ends on its
    commit with exactly the served files (the tree was taken and
    repaired, or set aside and the whole tree written), nothing the
    damage planted runs, and the next refill leaves the pool sound."""
    rng = tally.rng
    marker = tmp_path / "planted-command-ran"
    rounds = campaign.size(6, 40)
    for round_ in range(rounds):
        pool.refill(count=1, revision=rng.choice(pool.revisions))
        (name,) = [n for n in pool.ready_names() if n.startswith("t-")]
        what = _damage(pool.ready / name, rng, marker)
        revision = rng.choice(pool.revisions)
        pool.dest = dest = tmp_path / ("job%d" % round_)
        proc = subprocess.run(pool.command("-r", revision), env=pool.env,
                              capture_output=True, text=True, timeout=120)
        problems = pool.problems(proc, revision, files=True)
        if marker.exists():
            problems.append("a command planted in the tree ran")
            marker.unlink()
        pool.refill(count=1)
        problems += _pool_problems(pool, 1)
        tally.case(not problems, "round %d: %s: %s" % (round_, what,
                                                       problems))
        subprocess.run(["rm", "-rf", str(dest)], check=True)
    print("%d rounds of damage" % rounds)
    tally.check()


@pytest.mark.campaign
@_TIMEOUT
def test_concurrent_takers_never_share_a_tree(pool, tmp_path, tally):
    """Rounds of two to four checkouts started at once against a pool of
    zero to three ready trees (a refill running beside them in some
    rounds): each tree is handed out at most once, as many checkouts
    take one as there were trees (fewer only beside a refill), and every
    DEST ends on its commit with exactly the served files."""
    rng = tally.rng
    rounds = campaign.size(3, 16)
    for round_ in range(rounds):
        trees, takers = rng.randint(0, 3), rng.randint(2, 4)
        beside = rng.random() < 0.3
        if trees:
            pool.refill(count=trees)
        revision = rng.choice(pool.revisions)
        dests = [tmp_path / ("r%d-%d" % (round_, n)) for n in range(takers)]
        argvs = [pool.command("-r", revision, "--timings", dest=dest)
                 for dest in dests]
        if beside:
            argvs.append(_argv(pool, "refill", trees, revision))
        jobs = [subprocess.Popen(argv, env=pool.env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
                for argv in argvs]
        results = [(job.wait(timeout=300), *job.communicate())
                   for job in jobs]
        problems, took = [], []
        for dest, (code, out, err) in zip(dests, results):
            if code:
                problems.append("exit %d: %s" % (code, err[-300:]))
                continue
            took.append(json.loads(out.splitlines()[-1])["checkout"]
                        .get("ready_tree"))
            pool.dest = dest
            if pool.parent() != revision or pool.changes():
                problems.append("%s not clean at %s" % (dest.name,
                                                        revision[:12]))
        taken = [name for name in took if name]
        # names are slots: a refill beside the takers makes a new tree
        # in a slot a taker emptied, and a later taker may get that one
        remade = set(re.findall(r"\(ready tree (t-[0-9a-f]+) "
                                r"(?:made|cloned),",
                                results[-1][1])) if beside else set()
        for name in set(taken):
            if taken.count(name) > 1 + (name in remade):
                problems.append("a tree handed out twice: %s (the refill "
                                "made %s)" % (taken, sorted(remade)))
        if not beside and len(taken) != min(trees, takers):
            problems.append("%d trees, %d takers, %d took"
                            % (trees, takers, len(taken)))
        if beside and results[-1][0]:
            problems.append("refill beside them failed: %s"
                            % results[-1][2][-300:])
        tally.case(not problems, "round %d: %d trees, %d takers%s: %s"
                   % (round_, trees, takers, ", a refill beside"
                      if beside else "", problems))
        for dest in dests:
            subprocess.run(["rm", "-rf", str(dest)], check=True)
        pool.refill(count=0)
    print("%d rounds of concurrent takers" % rounds)
    tally.check()
