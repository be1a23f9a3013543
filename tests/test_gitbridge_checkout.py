"""gitbridge checkout, the Git counterpart of hg robustcheckout, against a
real smart-HTTP Git server (git http-backend) on 127.0.0.1: the CI story
in both layouts, the aborts for bad input, sparse profiles and Git's own
damage.  The failure tests it shares with hg robustcheckout (recoveries,
locks, a misbehaving proxy, concurrent checkouts) are the contract suite,
test_checkout_contract.py."""

import os
import shutil
import subprocess
import sys

import pytest

import checkout_drivers
from checkout_drivers import (
    GITCONFIG,
    abort_line,
    git_commit,
    git_served,  # noqa: F401 (a fixture)
)
from gitbridge import gitconfig
from vcsperf.harness import tools
from vcsperf.harness.proxies import Fault, FlakyProxy


@pytest.fixture
def gitbridge(env, home):
    """Runs ``gitbridge`` with fast retries configured in git config."""
    binary = tools.executable("gitbridge")
    (home / ".gitconfig").write_text(GITCONFIG)

    def run(*args, check=True, cwd=None, env=env):
        proc = subprocess.run([binary, *map(str, args)], env=env, cwd=cwd,
                              capture_output=True, text=True)
        if check and proc.returncode != 0:
            raise AssertionError("gitbridge failed:\n%s%s"
                                 % (proc.stdout, proc.stderr))
        return proc

    run.binary = binary
    run.env = env
    return run


@pytest.fixture
def served(git_served):  # noqa: F811 (a fixture)
    """git_served: ``commits``, ``work``, ``repo_url``."""
    return git_served


def head(git, dest):
    return git("-C", dest, "rev-parse", "HEAD").strip()


def timings(proc):
    return checkout_drivers.timings(proc, "checkout")


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

    pushed = git_commit(git, served.work, {"src/new.py": "new\n"},
                        "release 3")
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
        (["-b", "main", "--networkdeadline", "-5"],
         "abort: the network deadline must be a positive number of "
         "seconds, at most a year"),
        (["-b", "main", "--networkdeadline", "1e12"],
         "abort: the network deadline must be a positive number of "
         "seconds, at most a year"),
    ]
    for args, expected in cases:
        proc = gitbridge("checkout", "--sharebase", pool, *args,
                         served.repo_url, tmp_path / "co", check=False)
        assert abort_line(proc) == expected
        assert proc.stderr.strip().splitlines()[-1].startswith("(")


BOOLEAN_REFUSED = ("abort: sharepool.timings must be a boolean (yes or no, "
                   "on or off, true or false, always or never, 1 or 0), "
                   "not 'maybe'")


def test_a_setting_without_a_value_is_true_as_git_reads_it(tmp_path):
    """``[section] name`` with no ``=`` is true to git (``git config
    --bool``); the one reader takes it so, and as empty text, and tells
    it from ``name =``, which is false."""
    repo = str(tmp_path / "repo")
    subprocess.run(["git", "init", "-q", repo], check=True)
    with open(os.path.join(repo, ".git", "config"), "a") as fh:
        fh.write("[vcsperftest]\n\tbare\n\tempty =\n")
    asked = {name: subprocess.run(
        ["git", "-C", repo, "config", "--bool", "vcsperftest." + name],
        capture_output=True, text=True, check=True).stdout.strip()
        for name in ("bare", "empty")}
    assert asked == {"bare": "true", "empty": "false"}
    config = gitconfig.read(repo, r"^vcsperftest\.")
    assert config.boolean("vcsperftest.bare", False) is True
    assert config.boolean("vcsperftest.empty", True) is False
    assert config.get("vcsperftest.bare") == ""
    assert config.boolean("vcsperftest.unset", True) is True


def test_booleans_take_mercurials_words(git, gitbridge, served, home,
                                        tmp_path):
    """Issue 28: git config booleans read as Mercurial reads its own:
    ``always`` was taken for false (no timings line), and so was a word
    that is no boolean."""
    config = home / ".gitconfig"
    config.write_text(GITCONFIG + "\ttimings = always\n"
                      "\tprivate-cache = off\n")
    proc = gitbridge("checkout", "--sharebase", tmp_path / "pool", "-b",
                     "main", served.repo_url, tmp_path / "co")
    assert timings(proc)["result"] == "ok"
    config.write_text(GITCONFIG + "\ttimings = maybe\n")
    proc = gitbridge("checkout", "--sharebase", tmp_path / "pool", "-b",
                     "main", served.repo_url, tmp_path / "co", check=False)
    assert abort_line(proc) == BOOLEAN_REFUSED


def test_broken_git_config_is_an_error_not_unset(gitbridge, served, home,
                                                 tmp_path):
    """Issue 28: a git config that git cannot parse was read as no
    config at all (here: "share base directory not defined").  It is
    git's one line, before anything is touched."""
    (home / ".gitconfig").write_text(
        GITCONFIG + "[share]\n\tpool = %s\n[sharepool\n"
        % (tmp_path / "pool"))
    proc = gitbridge("checkout", "-b", "main", served.repo_url,
                     tmp_path / "co", check=False)
    assert abort_line(proc) == ("abort: git config failed: fatal: bad "
                                "config line 8 in file %s"
                                % (home / ".gitconfig"))
    assert not (tmp_path / "pool").exists()
    assert not (tmp_path / "co").exists()


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


def test_a_full_hash_the_pool_has_asks_the_server_nothing(
        git, gitbridge, served, tmp_path):
    """robustcheckout's rule: a full hash the pool holds is checked out
    without a request to the server (here every request would fail); a
    full hash it lacks is fetched, and a branch fetched with the hash's
    name, naming another commit, makes it ambiguous, as ``ls-remote``
    would have."""
    first, middle, tip = served.commits
    pool = tmp_path / "pool"
    with FlakyProxy(served.url) as proxy:
        url = proxy.url + served.repo_url[len(served.url):]
        gitbridge("checkout", "--sharebase", pool, "-r", middle, url,
                  tmp_path / "co")
        proxy.add(Fault("/", status=500, times=None))
        before = len(proxy.applied())
        gitbridge("checkout", "--sharebase", pool, "-r", first, url,
                  tmp_path / "co")
        assert head(git, tmp_path / "co") == first
        assert len(proxy.applied()) == before
        proxy.faults.clear()
        newer = git_commit(git, served.work, {"newer.txt": "newer\n"},
                           "newer")
        git("-C", served.work, "push", "-q", "origin", "%s:refs/heads/%s"
            % (first, newer))
        proc = gitbridge("checkout", "--sharebase", pool, "-r", newer, url,
                         tmp_path / "co", check=False, env=dict(
                             gitbridge.env, GIT_TRACE2_EVENT=str(
                                 tmp_path / "trace.json")))
    assert abort_line(proc) == (
        "abort: --revision argument is ambiguous: %s names %s on %s"
        % (newer, first, url)), proc.stderr
    assert '"ls-remote"' not in (tmp_path / "trace.json").read_text()
    assert head(git, tmp_path / "co") == first


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
    tip = git_commit(git, served.work, {"profiles/src.sparse": "/src/\n"},
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
    # the damage is to an entry of version 2 (a new checkout's index is
    # version 4, which stock git writes as version 2 when told)
    git("-C", dest, "update-index", "--index-version", "2")
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


def _processes_naming(text):
    """The pids of this machine's processes whose command line holds
    ``text``."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as fh:
                if text.encode() in fh.read():
                    found.append(int(entry))
        except (OSError, ValueError):
            continue
    return found


#: A ``git`` that ignores SIGTERM and does not pass it on to the real git
#: it runs, which holds the pipes: what a parent that outlives its
#: children's deadline looks like.
DEAF_GIT = """#!%s
import signal, subprocess, sys
signal.signal(signal.SIGTERM, signal.SIG_IGN)
sys.exit(subprocess.call(
    [%r] + sys.argv[1:],
    preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL)))
"""


def test_a_fetch_past_its_deadline_is_ended_with_its_children(
        git, gitbridge, served, tmp_path):
    """issue 27: git fetch runs children (git-remote-http, fetch-pack,
    index-pack) that hold its pipes; at the step's deadline the whole
    process group is ended (here under a ``git`` that ignores SIGTERM
    and keeps the real one running), so nothing of the fetch outlives
    the command, and the next run finishes."""
    pool, dest = tmp_path / "pool", tmp_path / "co"
    deaf = tmp_path / "deaf" / "git"
    deaf.parent.mkdir()
    deaf.write_text(DEAF_GIT % (sys.executable, shutil.which("git")))
    deaf.chmod(0o755)
    env = dict(gitbridge.env, PATH="%s:%s" % (deaf.parent,
                                              gitbridge.env["PATH"]))
    with FlakyProxy(served.url) as proxy:
        url = proxy.url + "project.git"
        gitbridge("checkout", "--sharebase", pool, "-b", "main", url, dest)
        tip = git_commit(git, served.work, {"late.txt": "late\n"}, "late")
        proxy.add(Fault("command=fetch", cut=-200, trickle=0.5, times=None))
        # a bound for the test only: before the deadline, the fetch took
        # as long as the server trickled
        proc = subprocess.run(
            [gitbridge.binary, "checkout", "--sharebase", pool,
             "--networkdeadline", "2", "--networkattempts", "1", "-r", tip,
             url, dest], env=env, capture_output=True, text=True,
            timeout=60)
        assert abort_line(proc) == (
            "abort: reached maximum number of network attempts; giving up "
            "(1 attempts; last failure: fetch exceeded the network deadline "
            "of 2 seconds (sharepool.network-deadline); interrupted)")
        assert _processes_naming(url) == []
        proxy.faults.clear()
        gitbridge("checkout", "--sharebase", pool, "-r", tip, url, dest)
    assert head(git, dest) == tip
    git("-C", store_of(tmp_path, served), "fsck", "--no-progress")


def test_a_ref_name_that_is_not_utf8_is_no_traceback(git, gitbridge, served,
                                                      tmp_path):
    """Found by the campaign (a server that lies): ls-remote printing a
    ref name in Latin-1 ended the checkout in a UnicodeDecodeError."""
    first, _middle, tip = served.commits
    subprocess.run([b"git", b"-C", bytes(served.repo), b"update-ref",
                    b"refs/heads/caf\xe9", first.encode()], env=gitbridge.env,
                   check=True)
    gitbridge("checkout", "--sharebase", tmp_path / "pool", "-b", "main",
              served.repo_url, tmp_path / "co")
    assert head(git, tmp_path / "co") == tip


def test_a_destination_that_is_the_source_is_refused(git, gitbridge,
                                                      tmp_path):
    """Issue 27, an outside tester: DEST, the local source repository,
    is no checkout of the pool, so it was removed with the work in it."""
    source = tmp_path / "src"
    git("init", "-q", "-b", "main", source)
    (source / "readme.txt").write_text("one\n")
    git("-C", source, "add", "readme.txt")
    git("-C", source, "commit", "-q", "-m", "one")
    (source / "wip.txt").write_text("uncommitted\n")
    proc = gitbridge("checkout", "--sharebase", tmp_path / "pool", "-b",
                     "main", source, source, check=False)
    assert abort_line(proc).endswith(
        "is or holds the source; refusing to replace it"), proc.stderr
    assert (source / "wip.txt").read_text() == "uncommitted\n"
    git("-C", source, "fsck", "--no-progress")


def test_a_relative_source_and_a_missing_one(git, gitbridge, tmp_path):
    """An outside tester: a relative source path (``hg robustcheckout``
    takes one) failed with ``git fetch --quiet failed (128): and the
    repository exists.``: git ran in the store, where the path named
    nothing, and the abort showed the last line of git's advice, which
    says the opposite of a missing repository.  A relative source is the
    caller's; a missing one is named by git's ``fatal:`` line."""
    source = tmp_path / "src"
    git("init", "-q", "-b", "main", source)
    (source / "readme.txt").write_text("one\n")
    git("-C", source, "add", "readme.txt")
    git("-C", source, "commit", "-q", "-m", "one")
    gitbridge("checkout", "--sharebase", tmp_path / "pool", "-b", "main",
              "src", "co", cwd=tmp_path)
    assert (tmp_path / "co" / "readme.txt").read_text() == "one\n"
    proc = gitbridge("checkout", "--sharebase", tmp_path / "pool", "-b",
                     "main", "nosuch", "co2", cwd=tmp_path, check=False)
    assert proc.returncode == 255
    assert proc.stderr.splitlines() == [
        "abort: git ls-remote nosuch failed (128): fatal: 'nosuch' does not "
        "appear to be a git repository",
        "(git's reason is shown; run the command again with GIT_TRACE=1 "
        "for the rest)"]
    assert not (tmp_path / "co2").exists()


def test_gitbridge_checkout_of_a_non_utf8_source_path(git, env, home,
                                                      tmp_path):
    """Finding: ``gitbridge checkout`` of a source whose path (or URL) is
    not UTF-8 ends in a UnicodeEncodeError traceback before anything
    (``_key``: ``text.encode()``), where git itself clones it fine and
    ``hg robustcheckout`` checks it out: bad input gets no ``abort:``
    line, and good input is refused."""
    (home / ".gitconfig").write_text(GITCONFIG)
    top = os.fsencode(str(tmp_path))
    src = os.fsdecode(os.path.join(top, b"d\xe9p\xf4t.git"))
    git("init", "-q", "--bare", "-b", "main", src)
    work = tmp_path / "work"
    git("clone", "-q", src, work)
    git_commit(git, work, {"a.txt": "a\n"}, "one")
    proc = subprocess.run(
        [tools.executable("gitbridge"), "checkout", "--sharebase",
         str(tmp_path / "pool"), "-b", "main", os.fsencode(src),
         str(tmp_path / "co")],
        env=env, capture_output=True)
    assert b"Traceback" not in proc.stderr
    assert proc.returncode == 0, proc.stderr[-500:]
    assert (tmp_path / "co" / "a.txt").exists()


def test_outside_repositories_and_environment_are_never_touched(
        git, gitbridge, served, tmp_path):
    """An outside attack: git run from DEST reached other repositories.
    DEST inside another clone, its own ``.git`` damaged (HEAD gone):
    git took the parent's repository, detached its branch and reverted
    its edits.  ``GIT_DIR`` in the caller's environment (a hook's):
    git worked in that repository.  A replace ref planted in DEST: the
    checkout wrote another commit's tree under the wanted commit's name.
    Now DEST is rebuilt, the others keep their state, and the tree is the
    commit's."""
    first, _middle, tip = served.commits
    parent, other = tmp_path / "parent", tmp_path / "other"
    for clone in (parent, other):
        git("clone", "-q", served.repo_url, clone)
        git("-C", clone, "checkout", "-q", "-b", "mine", first)
        (clone / "mine.txt").write_text("work in progress\n")
    pool, dest = tmp_path / "pool", parent / "dest"
    gitbridge("checkout", "--sharebase", pool, "-r", tip, served.repo_url,
              dest)
    os.unlink(dest / ".git" / "HEAD")
    gitbridge("checkout", "--sharebase", pool, "-r", tip, served.repo_url,
              dest)
    other_head = git("-C", other, "rev-parse", "HEAD").strip()
    tree = {path: (dest / path).read_bytes()
            for path in git("-C", dest, "ls-files").split()}
    git("-C", dest, "replace", tip, first)
    gitbridge("checkout", "--sharebase", pool, "-r", tip, "--purge",
              served.repo_url, dest, env=dict(
                  gitbridge.env, GIT_DIR=str(other / ".git"),
                  GIT_WORK_TREE=str(other)))
    for clone in (parent, other):
        assert git("-C", clone, "symbolic-ref", "HEAD").strip() \
            == "refs/heads/mine"
        assert (clone / "mine.txt").read_text() == "work in progress\n"
    assert git("-C", other, "rev-parse", "HEAD").strip() == other_head
    assert head(git, dest) == tip
    assert {path: (dest / path).read_bytes() for path in tree} == tree


def test_a_source_that_git_would_read_as_an_option_is_refused(
        gitbridge, tmp_path):
    """An outside attack: ``--upload-pack=COMMAND`` as the source ran
    COMMAND through ``git ls-remote``."""
    marker = tmp_path / "ran"
    proc = gitbridge("checkout", "--sharebase", tmp_path / "pool", "-r",
                     "a" * 40, "--", "--upload-pack=touch %s" % marker,
                     tmp_path / "co", check=False)
    assert proc.returncode == 255
    assert abort_line(proc).startswith("abort: source '--upload-pack=")
    assert not marker.exists()


@pytest.mark.parametrize("damage", ["config", "index-directory"])
def test_a_checkout_git_cannot_read_is_rebuilt(git, gitbridge, served,
                                               tmp_path, damage):
    """An outside attack: a line git cannot parse in DEST's config made
    every later run abort; an index replaced by a directory ended the
    run in a traceback.  Both DESTs are deleted and checked out again."""
    first, _middle, tip = served.commits
    pool, dest = tmp_path / "pool", tmp_path / "co"
    gitbridge("checkout", "--sharebase", pool, "-r", first, served.repo_url,
              dest)
    if damage == "config":
        with open(dest / ".git" / "config", "a") as fh:
            fh.write("[core\n")
    else:
        os.unlink(dest / ".git" / "index")
        (dest / ".git" / "index" / "sub").mkdir(parents=True)
    proc = gitbridge("checkout", "--sharebase", pool, "-r", tip, "--purge",
                     served.repo_url, dest)
    assert "Traceback" not in proc.stderr
    assert "deleting destination" in proc.stderr, proc.stderr
    assert head(git, dest) == tip
    assert git("-C", dest, "status", "--porcelain") == ""


def test_one_destination_named_through_a_link_is_locked_once(
        git, gitbridge, served, tmp_path):
    """An outside attack: DEST's lock was keyed on the path as given, so
    the same directory named through a symbolic link was checked out by
    two runs at once, each deleting the other's work.  The lock is the
    real path's: the second run waits for the first."""
    first, _middle, tip = served.commits
    pool, real = tmp_path / "pool", tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "link")
    gitbridge("checkout", "--sharebase", pool, "-r", first, served.repo_url,
              real / "co")
    with FlakyProxy(served.url) as proxy:
        url = proxy.url + served.repo_url[len(served.url):]
        proxy.add(Fault("command=fetch", stall=2))
        runs = [subprocess.Popen(
            [gitbridge.binary, "checkout", "--sharebase", str(pool), "-r",
             tip, url, str(parent / "co")], env=gitbridge.env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for parent in (real, tmp_path / "link")]
        outputs = [run.communicate(timeout=120) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs
    assert not any("deleting" in err for _out, err in outputs), outputs
    assert any("for lock on checkout" in err + out
               for out, err in outputs), outputs
    assert head(git, real / "co") == tip
    assert git("-C", real / "co", "status", "--porcelain") == ""


@pytest.mark.parametrize("setting", ["core.worktree", "core.bare"])
def test_a_config_naming_another_working_tree_is_not_followed(
        git, gitbridge, served, tmp_path, setting):
    """An outside attack: ``core.worktree`` planted in DEST's config made
    the checkout write (and ``git clean`` remove) in the tree it names,
    outside DEST.  DEST is deleted and checked out again; the other tree
    keeps every file."""
    first, _middle, tip = served.commits
    pool, dest, victim = tmp_path / "pool", tmp_path / "co", tmp_path / "v"
    gitbridge("checkout", "--sharebase", pool, "-r", first, served.repo_url,
              dest)
    victim.mkdir()
    names = [path for path in git("-C", dest, "ls-files").split()
             if "/" not in path] + ["untracked.o"]
    for name in names:
        (victim / name).write_text("precious\n")
    git("-C", dest, "config", setting,
        str(victim) if setting == "core.worktree" else "true")
    proc = gitbridge("checkout", "--sharebase", pool, "-r", tip, "--purge",
                     served.repo_url, dest)
    assert "(destination's config names another working tree; deleting " \
        "destination)" in proc.stderr, proc.stderr
    assert sorted(os.listdir(victim)) == sorted(names)
    assert all((victim / name).read_text() == "precious\n"
               for name in names)
    assert head(git, dest) == tip
    assert git("-C", dest, "status", "--porcelain", "--ignored") == ""


_LYING_PACK_HOOK = """#!/bin/sh
# uploadpack.packObjectsHook: while FLAG exists (removed at first use),
# every pack leaves out the blob VICTIM
if [ ! -e '{flag}' ]; then shift; exec git "$@"; fi
rm '{flag}'
awk '/^--not$/ {{ not = 1; next }} /^(-|$)/ {{ next }}
     {{ print (not ? "^" : "") $0 }}' |
    git rev-list --objects --stdin | grep -v '^{victim}' | cut -c1-40 |
    git pack-objects -q --stdout
"""


def _serve_lying_once(git, served, tmp_path, victim):
    """The next pack the server sends leaves out the blob ``victim``."""
    flag = tmp_path / "lie-once"
    hook = tmp_path / "lying-pack-objects"
    hook.write_text(_LYING_PACK_HOOK.format(flag=flag, victim=victim))
    hook.chmod(0o755)
    # the backend's HOME is the served root: its global config
    git("config", "--file", served.repo.parent / ".gitconfig",
        "uploadpack.packObjectsHook", str(hook))
    flag.write_text("")
    return flag


def _history_with_a_blob_only_its_past_holds(git, served, name):
    """Two commits: ``name`` written, then changed; the first's blob,
    which the second's tree does not hold, and the second."""
    git_commit(git, served.work, {name: "first %s\n" % name}, "add " + name)
    victim = git("-C", served.work, "rev-parse", "HEAD:" + name).strip()
    return victim, git_commit(git, served.work, {name: "second text\n"},
                              "change " + name)


def test_a_pull_missing_an_object_of_its_history_deletes_the_store(
        git, gitbridge, served, tmp_path):
    """A pull into a full store moves the refs before its objects are
    walked (beside the checkout: ``gitbridge.connectivity``).  A server
    that leaves out a blob of the history but none of the tip's tree:
    the walk finds it missing, the store is deleted and cloned again,
    and nothing is left that git fsck rejects; no promisor mark or
    setting stays in the store.  A mark left by a run killed before its
    walk (here a fetch made by hand as the pull makes it, from the same
    lying server) makes the next pull walk from every ref, and find the
    hole it left."""
    pool, dest = tmp_path / "pool", tmp_path / "co"
    store = store_of(tmp_path, served)
    gitbridge("checkout", "--sharebase", pool, "-r", served.commits[-1],
              served.repo_url, dest)

    victim, tip = _history_with_a_blob_only_its_past_holds(
        git, served, "history.txt")
    flag = _serve_lying_once(git, served, tmp_path, victim)
    proc = gitbridge("checkout", "--sharebase", pool, "--purge", "-r", tip,
                     served.repo_url, dest)
    assert not flag.exists()
    assert "(the fetched history is incomplete: fatal: missing blob " \
        "object '%s'; deleting shared store)" % victim in proc.stderr
    assert "(cloning %s into new pooled repository)" % served.repo_url \
        in proc.stdout
    assert head(git, dest) == tip
    assert "gitbridge-pull" not in (store / "config").read_text()
    assert not list((store / "objects" / "pack").glob("*.promisor"))
    for repo in (store, dest):
        git("-C", repo, "fsck", "--no-progress")

    victim, killed = _history_with_a_blob_only_its_past_holds(
        git, served, "killed.txt")
    _serve_lying_once(git, served, tmp_path, victim)
    git("-C", store, "-c", "remote.gitbridge-pull.url=" + served.repo_url,
        "-c", "remote.gitbridge-pull.promisor=true",
        "-c", "remote.gitbridge-pull.partialclonefilter=blob:limit=1024g",
        "fetch", "-q", "gitbridge-pull", "+refs/heads/*:refs/killed/*")
    assert list((store / "objects" / "pack").glob("*.promisor"))
    newest = git_commit(git, served.work, {"newest.txt": "x\n"}, "newest")
    proc = gitbridge("checkout", "--sharebase", pool, "-r", newest,
                     served.repo_url, dest)
    assert "(the fetched history is incomplete: fatal: missing blob " \
        "object '%s'; deleting shared store)" % victim in proc.stderr
    assert head(git, dest) == newest
    assert not list((store / "objects" / "pack").glob("*.promisor"))
    for repo in (store, dest):
        git("-C", repo, "fsck", "--no-progress")


def test_a_run_stopped_between_its_pull_and_its_walk_leaves_the_walk_to_the_next(
        git, gitbridge, served, tmp_path):
    """A run that pulls a pack with a hole in its history, then aborts
    before its walk (the revision is not on the server): the next run,
    which needs no pull, walks the store from every ref before it
    succeeds, and clones it again."""
    pool, dest = tmp_path / "pool", tmp_path / "co"
    gitbridge("checkout", "--sharebase", pool, "-r", served.commits[-1],
              served.repo_url, dest)
    victim, tip = _history_with_a_blob_only_its_past_holds(
        git, served, "history.txt")
    _serve_lying_once(git, served, tmp_path, victim)
    absent = gitbridge("checkout", "--sharebase", pool, "-r", "12" * 20,
                       served.repo_url, dest, check=False)
    assert abort_line(absent).startswith("abort: revision 1212"), \
        absent.stderr
    proc = gitbridge("checkout", "--sharebase", pool, "-r", tip,
                     served.repo_url, dest)
    assert "(pulling to obtain" not in proc.stdout
    assert "(the fetched history is incomplete: fatal: missing blob " \
        "object '%s'; deleting shared store)" % victim in proc.stderr
    assert head(git, dest) == tip
    for repo in (store_of(tmp_path, served), dest):
        git("-C", repo, "fsck", "--no-progress")


def test_a_server_refusing_the_filter_gets_a_plain_fetch(
        git, gitbridge, served, tmp_path):
    """A server that takes partial clone filters but not ``blob:limit``
    (``uploadpackfilter.*``): the pull fetches again without one, and
    the store is kept."""
    pool, dest = tmp_path / "pool", tmp_path / "co"
    gitbridge("checkout", "--sharebase", pool, "-r", served.commits[-1],
              served.repo_url, dest)
    for setting, value in (("uploadpack.allowFilter", "true"),
                           ("uploadpackfilter.allow", "false"),
                           ("uploadpackfilter.blob:none.allow", "true")):
        git("-C", served.repo, "config", setting, value)
    newer = git_commit(git, served.work, {"newer.txt": "newer\n"}, "newer")
    proc = gitbridge("checkout", "--sharebase", pool, "-r", newer,
                     served.repo_url, dest, "--timings")
    assert not timings(proc)["cloned"] and timings(proc)["pulled"]
    assert "deleting" not in proc.stderr, proc.stderr
    assert head(git, dest) == newer
    git("-C", store_of(tmp_path, served), "fsck", "--no-progress")


def test_the_users_config_and_planted_marks_do_not_steer_the_pull(
        git, gitbridge, served, home, tmp_path):
    """The user's git config names a remote ``gitbridge-pull`` (another
    repository, a refspec of its own) and a promisor remote of the same
    server, and a directory named like a promisor mark sits among the
    store's packs: the pull fetches from the URL given only, the walk
    finds a hole in the history rather than fetching it, and the
    directory is left alone."""
    pool, dest = tmp_path / "pool", tmp_path / "co"
    store = store_of(tmp_path, served)
    gitbridge("checkout", "--sharebase", pool, "-r", served.commits[-1],
              served.repo_url, dest)
    other = tmp_path / "other.git"
    git("clone", "-q", "--bare", served.repo, other)
    elsewhere = git("-C", other, "commit-tree", "-m", "elsewhere",
                    "%s^{tree}" % served.commits[-1]).strip()
    git("-C", other, "update-ref", "refs/heads/main", elsewhere)
    with open(home / ".gitconfig", "a") as fh:
        fh.write('[remote "gitbridge-pull"]\n\turl = %s\n\tfetch = '
                 '+refs/heads/*:refs/remotes/elsewhere/*\n'
                 '[remote "lazy"]\n\turl = %s\n\tpromisor = true\n'
                 % (other, served.repo_url))
    planted = store / "objects" / "pack" / "planted.promisor"
    planted.mkdir()
    victim, tip = _history_with_a_blob_only_its_past_holds(
        git, served, "history.txt")
    _serve_lying_once(git, served, tmp_path, victim)
    proc = gitbridge("checkout", "--sharebase", pool, "-r", tip,
                     served.repo_url, dest)
    # git says it its own way when a promisor remote is configured
    walked = proc.stderr.split("(the fetched history is incomplete: ")[1]
    assert victim in walked.split("; deleting shared store)")[0]
    assert head(git, dest) == tip
    assert "elsewhere" not in git("-C", store, "for-each-ref")
    newer = git_commit(git, served.work, {"newer.txt": "newer\n"}, "newer")
    (store / "objects" / "pack" / "planted.promisor").mkdir()
    gitbridge("checkout", "--sharebase", pool, "-r", newer,
              served.repo_url, dest)
    assert head(git, dest) == newer
    assert planted.is_dir()
    git("-C", store, "fsck", "--no-progress")
