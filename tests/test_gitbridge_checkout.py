"""gitbridge checkout, the Git counterpart of hg robustcheckout, against a
real smart-HTTP Git server (git http-backend) on 127.0.0.1."""

import hashlib
import json
import os
import shutil
import subprocess

import pytest

from vcsperf.core import pooling
from vcsperf.harness import tools
from vcsperf.harness.proxies import Fault, FlakyProxy
from vcsperf.harness.servers import GitServer


@pytest.fixture
def gitbridge(env, home):
    """Runs ``gitbridge`` with fast retries configured in git config."""
    binary = tools.executable("gitbridge")
    gitconfig = home / ".gitconfig"
    gitconfig.write_text("[sharepool]\n\tretry-backoff = 0.05\n"
                         "\tretry-jitter-min = 0\n\tretry-jitter-max = 0.05\n"
                         "\thttp-timeout = 20\n")

    def run(*args, check=True):
        proc = subprocess.run([binary, *map(str, args)], env=env,
                              capture_output=True, text=True)
        if check and proc.returncode != 0:
            raise AssertionError("gitbridge failed:\n%s%s"
                                 % (proc.stdout, proc.stderr))
        return proc

    run.binary = binary
    return run


def commit(git, work, files, message):
    for name, text in files.items():
        path = os.path.join(work, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write(text)
    git("-C", work, "add", "-A")
    git("-C", work, "commit", "-q", "-m", message)
    git("-C", work, "push", "-q", "origin", "HEAD:main")
    return git("-C", work, "rev-parse", "HEAD").strip()


@pytest.fixture
def served(git, tmp_path):
    """A bare repository behind git http-backend, and a clone to push
    from; ``served.commits`` lists its commits, oldest first."""
    repos = tmp_path / "repos"
    git("init", "-q", "--bare", "-b", "main", repos / "project.git")
    work = tmp_path / "work"
    git("clone", "-q", repos / "project.git", work)
    commits = []
    for n in range(3):
        files = {"src/module%d.py" % i: "x = %d\n" % (n * i) for i in range(8)}
        files["docs/readme.txt"] = "release %d\n" % n
        files["profiles/docs.sparse"] = "/docs/\n"
        commits.append(commit(git, work, files, "release %d" % n))
    with GitServer(repos) as server:
        server.repo_url = server.url + "project.git"
        server.commits = commits
        server.work = work
        yield server


def head(git, dest):
    return git("-C", dest, "rev-parse", "HEAD").strip()


def timings(proc):
    (line,) = [line for line in proc.stdout.splitlines()
               if line.startswith('{"checkout"')]
    return json.loads(line)["checkout"]


def abort_line(proc):
    assert proc.returncode == 255, proc.stderr
    aborts = [line for line in proc.stderr.splitlines()
              if line.startswith("abort: ")]
    assert len(aborts) == 1, proc.stderr
    return aborts[0]


def store_of(tmp_path, served):
    return tmp_path / "pool" / (served.commits[0] + ".git")


@pytest.mark.parametrize("layout", ["alternates", "worktree"])
def test_ci_jobs_share_one_store_and_fetch_only_what_is_missing(
        git, gitbridge, served, tmp_path, layout):
    pool = tmp_path / "pool"
    first, middle, tip = served.commits
    one = gitbridge("checkout", "--sharebase", pool, "--layout", layout,
                    "-r", middle[:12], served.repo_url, tmp_path / "job1",
                    "--timings")
    assert timings(one)["cloned"] and timings(one)["node"] == middle
    assert head(git, tmp_path / "job1") == middle
    assert len(served.fetches()) == 1

    two = gitbridge("checkout", "--sharebase", pool, "--layout", layout,
                    "-b", "main", served.repo_url, tmp_path / "job2")
    assert "(sharing from existing pooled repository %s.git)" % first \
        in two.stdout
    assert head(git, tmp_path / "job2") == tip
    assert len(served.fetches()) == 1

    pushed = commit(git, served.work, {"src/new.py": "new\n"}, "release 3")
    (tmp_path / "job1" / "build-output.o").write_text("stale\n")
    three = gitbridge("checkout", "--sharebase", pool, "--layout", layout,
                      "-r", pushed, "--purge", served.repo_url,
                      tmp_path / "job1", "--timings")
    assert timings(three)["pulled"] and "purge" in timings(three)["steps"]
    assert not (tmp_path / "job1" / "build-output.o").exists()
    assert head(git, tmp_path / "job1") == pushed
    assert git("-C", tmp_path / "job1", "status", "--porcelain",
               "--ignored") == ""
    assert len(served.fetches()) == 2
    assert set(os.listdir(pool)) == {first + ".git", "checkouts", "urls"}
    git("-C", store_of(tmp_path, served), "fsck", "--no-progress")
    if layout == "alternates":
        # gc in the store keeps what the checkouts stand on
        git("-C", store_of(tmp_path, served), "gc", "--prune=now", "-q")
        git("-C", tmp_path / "job1", "fsck", "--no-progress")


def test_bad_input_aborts_with_one_line(git, gitbridge, served, tmp_path):
    pool = tmp_path / "pool"
    cases = [
        (["-r", "123456789abc"], "abort: revision 123456789abc not found on "
                                 + served.repo_url),
        (["-b", "no-such"], "abort: no-such not found on %s: no such branch "
                            "or tag" % served.repo_url),
        (["-r", "12345"], "abort: --revision must be a SHA-1 fragment 12-40 "
                          "characters long"),
        (["-b", "main", "--sparseprofile", "missing.sparse"],
         "abort: sparse profile missing.sparse does not exist at revision "
         + served.commits[-1]),
    ]
    for args, expected in cases:
        proc = gitbridge("checkout", "--sharebase", pool, *args,
                         served.repo_url, tmp_path / "co", check=False)
        assert abort_line(proc) == expected
        assert proc.stderr.strip().splitlines()[-1].startswith("(")


def test_ambiguous_short_hash_aborts(git, gitbridge, served, tmp_path):
    """A branch named like the 12-digit prefix of another commit."""
    first, middle, tip = served.commits
    git("-C", served.work, "push", "-q", "origin", "%s:refs/heads/%s"
        % (first, tip[:12]))
    proc = gitbridge("checkout", "--sharebase", tmp_path / "pool", "-r",
                     tip[:12], served.repo_url, tmp_path / "co", check=False)
    assert abort_line(proc).startswith(
        "abort: --revision argument is ambiguous: %s names %s"
        % (tip[:12], first))


def test_sparse_profile(git, gitbridge, served, tmp_path):
    proc = gitbridge("checkout", "--sharebase", tmp_path / "pool", "-b",
                     "main", "--sparseprofile", "profiles/docs.sparse",
                     served.repo_url, tmp_path / "co")
    assert "(setting sparse config to profile profiles/docs.sparse)" \
        in proc.stdout
    assert sorted(os.listdir(tmp_path / "co")) == [".git", "docs"]


def test_switching_sparse_profile_with_purge(git, gitbridge, served,
                                             tmp_path):
    """Another profile replaces the first, and --purge removes what lies
    outside the profile too."""
    tip = commit(git, served.work, {"profiles/src.sparse": "/src/\n"},
                 "second profile")
    dest = tmp_path / "co"
    gitbridge("checkout", "--sharebase", tmp_path / "pool", "-r", tip,
              "--sparseprofile", "profiles/docs.sparse", served.repo_url,
              dest)
    for stray in ("docs/stray.o", "src/stray.o", "elsewhere/stray.o"):
        (dest / stray).parent.mkdir(exist_ok=True)
        (dest / stray).write_text("build output\n")
    proc = gitbridge("checkout", "--sharebase", tmp_path / "pool", "-r", tip,
                     "--purge", "--sparseprofile", "profiles/src.sparse",
                     served.repo_url, dest)
    assert "(setting sparse config to profile profiles/src.sparse)" \
        in proc.stdout
    assert sorted(os.listdir(dest)) == [".git", "src"]
    assert sorted(os.listdir(dest / "src")) == [
        "module%d.py" % i for i in range(8)]
    assert git("-C", dest, "status", "--porcelain", "--ignored") == ""


def test_leaves_a_directory_that_is_not_a_checkout_alone(gitbridge, served,
                                                         tmp_path):
    dest = tmp_path / "co"
    dest.mkdir()
    (dest / "precious.txt").write_text("keep me\n")
    proc = gitbridge("checkout", "--sharebase", tmp_path / "pool", "-b",
                     "main", served.repo_url, dest, check=False)
    assert abort_line(proc) == ("abort: destination exists but no .git "
                                "directory")
    assert (dest / "precious.txt").read_text() == "keep me\n"
    assert not list((tmp_path / "pool").glob("*.git"))  # before any clone


@pytest.mark.parametrize("private", [True, False])
def test_another_hosts_lock_is_taken_over_by_policy(git, gitbridge, served,
                                                    tmp_path, private):
    """A lock left by a killed task's container names another host: taken
    over at once for a private cache, else once it is
    sharepool.foreign-lock-grace seconds old, saying so."""
    gitbridge("checkout", "--sharebase", tmp_path / "pool", "-r",
              served.commits[0], served.repo_url, tmp_path / "co")
    os.symlink("old-container.example/4026531836:1068",
               str(store_of(tmp_path, served)) + ".lock")
    commit(git, served.work, {"late.txt": "late\n"}, "late")  # must fetch
    setting = (["sharepool.private-cache", "true"] if private
               else ["sharepool.foreign-lock-grace", "1"])
    git("config", "--global", *setting)
    proc = gitbridge("checkout", "--sharebase", tmp_path / "pool", "-b",
                     "main", served.repo_url, tmp_path / "co")
    waited = "held by process 1068 on host old-container.example/" \
        "4026531836; taking it over then)"
    assert (waited in proc.stderr) != private, proc.stderr
    assert head(git, tmp_path / "co") == git(
        "-C", served.work, "rev-parse", "HEAD").strip()


def _dead_pid():
    dead = subprocess.Popen(["true"])
    dead.wait()
    return dead.pid


def _stale_store_locks(git, gitbridge, served, tmp_path):
    gitbridge("checkout", "--sharebase", tmp_path / "pool", "-r",
              served.commits[0], served.repo_url, tmp_path / "co")
    store = store_of(tmp_path, served)
    key = hashlib.sha256(served.repo_url.encode()).hexdigest()[:20]
    (store / "refs" / "pool" / key / "heads" / "main.lock").write_text("")
    (store / "objects" / "pack" / "tmp_pack_killed").write_text("")
    owner = pooling.owner_identity().rpartition(":")[0]
    os.symlink("%s:%d" % (owner, _dead_pid()), str(store) + ".lock")
    # make the next run fetch
    commit(git, served.work, {"late.txt": "late\n"}, "late")
    served.commits.append(git("-C", served.work, "rev-parse",
                              "HEAD").strip())


def _not_shared(git, gitbridge, served, tmp_path):
    git("clone", "-q", served.repo_url, tmp_path / "co")


def _dangling(git, gitbridge, served, tmp_path):
    gitbridge("checkout", "--sharebase", tmp_path / "oldpool", "-r",
              served.commits[0], served.repo_url, tmp_path / "co")
    shutil.rmtree(tmp_path / "oldpool")


def _unrelated(git, gitbridge, served, tmp_path):
    other = tmp_path / "pool" / ("0" * 40 + ".git")
    git("init", "-q", "--bare", other)
    git("init", "-q", tmp_path / "co")
    (tmp_path / "co/.git/objects/info/alternates").write_text(
        str(other / "objects") + "\n")


def _interrupted_checkout(git, gitbridge, served, tmp_path):
    gitbridge("checkout", "--sharebase", tmp_path / "pool", "-r",
              served.commits[0], served.repo_url, tmp_path / "co")
    (tmp_path / "co" / ".git" / "index.lock").write_text("")


RECOVERIES = {
    "stale store locks": (_stale_store_locks, "(removing 2 lock and "
                          "temporary files left by an interrupted git "
                          "process)"),
    "not a share": (_not_shared, "(destination is not shared; deleting "
                                 "destination)"),
    "dangling share": (_dangling, "does not exist; deleting destination)"),
    "unrelated repository": (_unrelated, "an unrelated repository; deleting "
                                         "destination)"),
    "interrupted checkout": (_interrupted_checkout, "index.lock, left by an "
                                                    "interrupted checkout)"),
}


@pytest.mark.parametrize("damage", sorted(RECOVERIES))
def test_recovers_and_says_what_it_does(git, gitbridge, served, tmp_path,
                                        damage):
    make, message = RECOVERIES[damage]
    make(git, gitbridge, served, tmp_path)
    proc = gitbridge("checkout", "--sharebase", tmp_path / "pool", "-r",
                     served.commits[-1], served.repo_url, tmp_path / "co")
    assert message in proc.stderr, proc.stderr
    assert head(git, tmp_path / "co") == served.commits[-1]
    assert git("-C", tmp_path / "co", "status", "--porcelain") == ""
    git("-C", store_of(tmp_path, served), "fsck", "--no-progress")


#: Where the first entry's flags start in an index of version 2: after the
#: 12-byte header, its stat data, mode, ids, size and object id.
_FIRST_ENTRY_FLAGS = 12 + 60


_REBUILT = "is damaged: checksum mismatch; rebuilding it from the " \
    "checked-out commit)"


@pytest.mark.parametrize("layout, checksum, message", [
    ("alternates", True, _REBUILT),
    ("worktree", True, _REBUILT),
    # written with index.skipHash: nothing to check, git's error tells
    ("alternates", False,
     "(purge failed: fatal: unknown index entry format 0x646f0000"),
], ids=["alternates", "worktree", "skiphash"])
def test_purge_recovers_from_a_damaged_index(git, gitbridge, served,
                                             tmp_path, layout, checksum,
                                             message):
    """The campaign's damage (seed 1864152229): a flipped byte in an
    entry's flags sets its "extended" bit, so git reads the first bytes
    of its path as more flags and dies on every command that reads the
    index, git clean of --purge first.  The run repairs it and ends at the
    requested commit with exactly its files."""
    dest = tmp_path / "co"
    first, _, tip = served.commits
    gitbridge("checkout", "--sharebase", tmp_path / "pool", "--layout",
              layout, "-r", first, served.repo_url, dest)
    index = dest / git("-C", dest, "rev-parse", "--git-path",
                       "index").strip()
    data = bytearray(index.read_bytes())
    assert data[4:8] == b"\0\0\0\2" and data[_FIRST_ENTRY_FLAGS] == 0
    data[_FIRST_ENTRY_FLAGS] = 0xea
    if not checksum:
        data[-20:] = bytes(20)
    index.write_bytes(bytes(data))
    (dest / "src" / "build.o").write_text("stale\n")
    proc = gitbridge("checkout", "--sharebase", tmp_path / "pool", "--layout",
                     layout, "-r", tip, "--purge", served.repo_url, dest)
    assert message in proc.stderr, proc.stderr
    assert head(git, dest) == tip
    assert git("-C", dest, "status", "--porcelain", "--ignored") == ""
    assert git("-C", dest, "ls-files").split() == git(
        "-C", served.work, "ls-tree", "-r", "--name-only", tip).split()
    git("-C", dest, "fsck", "--no-progress")  # checks the index's checksum


@pytest.mark.parametrize("faults, failures", [
    ([Fault("command=fetch", cut=300)], {1}),
    ([Fault("info/refs", status=503)], {1}),
    # curl sometimes resends a request whose connection went silent, by
    # itself: two stalls make one or two failures
    ([Fault("command=fetch", stall=3, times=2)], {1, 2}),
])
def test_retries_through_a_misbehaving_server(git, gitbridge, served,
                                              tmp_path, faults, failures):
    git("config", "--global", "sharepool.http-timeout", "1")
    expected = sum(fault.times for fault in faults)
    with FlakyProxy(served.url) as proxy:
        proxy.add(*faults)
        proc = gitbridge("checkout", "--sharebase", tmp_path / "pool", "-b",
                         "main", proxy.url + "project.git", tmp_path / "co",
                         "--timings")
    assert len(proxy.applied()) == expected
    assert timings(proc)["network_failures"] in failures
    assert "(retrying after network failure on attempt 1 of 3)" \
        in proc.stderr
    assert head(git, tmp_path / "co") == served.commits[-1]


def test_gives_up_after_the_network_attempts(gitbridge, served, tmp_path):
    with FlakyProxy(served.url) as proxy:
        proxy.add(Fault("/", status=500, times=None))
        proc = gitbridge("checkout", "--sharebase", tmp_path / "pool", "-b",
                         "main", "--networkattempts", "2",
                         proxy.url + "project.git", tmp_path / "co",
                         check=False)
    assert abort_line(proc).startswith(
        "abort: reached maximum number of network attempts; giving up "
        "(2 attempts; last failure: ")


# Real history: the 57 pip releases as a Git repository ------------------------

@pytest.fixture
def real_served(real_git_repo, tmp_path):
    repos = tmp_path / "repos"
    repos.mkdir()
    os.symlink(real_git_repo, repos / "pip.git")
    with GitServer(repos) as server:
        server.repo_url = server.url + "pip.git"
        yield server


@pytest.mark.slow
def test_eight_concurrent_checkouts_clone_once(git, gitbridge, real_served,
                                               real_git_repo, tmp_path):
    commits = git("-C", real_git_repo, "rev-list", "main").split()
    jobs = [subprocess.Popen(
        [gitbridge.binary, "checkout", "--sharebase", str(tmp_path / "pool"),
         "-r", commits[n * 5], real_served.repo_url,
         str(tmp_path / ("job%d" % n))],
        env=git.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True) for n in range(8)]
    results = [(job.wait(), *job.communicate()) for job in jobs]
    for n, (code, out, err) in enumerate(results):
        assert code == 0, err
        assert head(git, tmp_path / ("job%d" % n)) == commits[n * 5]
        assert git("-C", tmp_path / ("job%d" % n), "status",
                   "--porcelain") == ""
    assert len(real_served.fetches()) == 1
    outputs = "".join(out + err for _, out, err in results)
    assert outputs.count("(cloning ") == 1
    assert "for lock on pool entry for " in outputs
