"""``gitbridge commitid-lookup`` with the real git: the index in the Git
directory answers as reading every reachable commit's message does, after
commits, amend, rebase, a force push into a bare repository, branch
deletion and ``git gc``, after a shallow clone is deepened, in a
read-only repository, and hostile keys or index files get one ``abort:``
line."""

import json
import os
import shutil
import subprocess

import pytest

from vcsperf.core.commitid import message_keys
from vcsperf.core.commitindex import read_docket
from vcsperf.core.errors import Abort
from vcsperf.core.spawn import git_bytes
from vcsperf.harness import tools

COMMITTER = ["-c", "user.name=t", "-c", "user.email=t@example.com"]


def message(number):
    return ("Bug %d - change %d\n\nDifferential Revision: "
            "https://phabricator.example/D%d\nMozReview-Commit-ID: id%d\n"
            % (100 + number, number, number, number))


def commit(git, repo, number):
    (repo / ("f%d" % number)).write_text("%d\n" % number)
    git("add", "f%d" % number, cwd=repo)
    git(*COMMITTER, "commit", "-qm", message(number), cwd=repo)


def scan(git, repo):
    """{"kind:key": {sha, ...}} of every commit a ref reaches."""
    out = git("log", "--all", "-z", "--format=%H%n%B", cwd=repo)
    found = {}
    for entry in out.split("\0"):
        sha, _, text = entry.partition("\n")
        for kind, key in message_keys(text):
            found.setdefault("%s:%s" % (kind, key), set()).add(sha.strip())
    return found


def all_reachable(git_dir):
    """Whether the docket says every indexed commit is reachable (the
    lookups that read only the index)."""
    covers = read_docket(str(git_dir), "commitindex").covers
    return covers.split(b"\n")[0] == b"all-reachable"


def check(git, gitbridge, repo, gone=()):
    """Every key of every reachable commit, and the keys in ``gone``
    (which no reachable commit has any more), answer as the scan does."""
    expected = scan(git, repo)
    keys = sorted(expected) + list(gone)
    proc = gitbridge("commitid-lookup", "--json", *keys, cwd=repo,
                     check=False)
    assert proc.returncode == (1 if gone else 0), proc.stderr
    found = {}
    for item in json.loads(proc.stdout):
        found.setdefault(item["key"], set()).add(item["node"])
    assert found == expected
    return expected


def test_lookups_stay_right_through_rewrites_force_pushes_and_gc(
        git, gitbridge, gitrepo, tmp_path):
    for number in range(1, 4):
        commit(git, gitrepo, number)
    assert check(git, gitbridge, gitrepo)["review:D2"]
    assert os.path.exists(gitrepo / ".git" / "commitindex")
    # Moving forward keeps every indexed commit reachable.
    commit(git, gitrepo, 4)
    check(git, gitbridge, gitrepo)
    assert all_reachable(gitrepo / ".git")
    out = gitbridge("commitid-lookup", "D2", "bug 103", "id4",
                    cwd=gitrepo).stdout
    assert [line.split()[0] for line in out.splitlines()] == \
        ["D2", "bug", "id4"]
    # Rewrites: an amend, then a rebase that drops D2.
    git(*COMMITTER, "commit", "-q", "--amend", "-m", message(5), cwd=gitrepo)
    check(git, gitbridge, gitrepo, gone=["review:D4"])
    assert not all_reachable(gitrepo / ".git")
    git(*COMMITTER, "rebase", "-q", "--onto", "HEAD~3", "HEAD~2",
        cwd=gitrepo)
    check(git, gitbridge, gitrepo, gone=["review:D2", "review:D4"])
    # A bare server: pushed, force-pushed, a branch deleted, then gc.
    server = tmp_path / "server.git"
    git("init", "-q", "--bare", server)
    git("push", "-q", server, "main", "main:side", cwd=gitrepo)
    check(git, gitbridge, server)
    assert all_reachable(server)
    git(*COMMITTER, "commit", "-q", "--amend", "-m", message(6),
        cwd=gitrepo)
    git("push", "-q", "--force", server, "main", cwd=gitrepo)
    check(git, gitbridge, server)
    assert all_reachable(server)  # "side" still reaches the old tip
    git("branch", "-q", "-D", "side", cwd=server)
    check(git, gitbridge, server, gone=["review:D5"])
    assert not all_reachable(server)
    git("gc", "-q", "--prune=now", cwd=server)
    check(git, gitbridge, server, gone=["review:D5"])
    # Until it is built again, on demand:
    assert not all_reachable(server)
    gitbridge("commitid-lookup", "--rebuild", "D1", cwd=server)
    assert all_reachable(server)
    check(git, gitbridge, server, gone=["review:D5"])
    # A damaged index is rebuilt, never trusted.
    with open(server / "commitindex", "r+b") as fh:
        fh.write(b"garbage!")
    check(git, gitbridge, server, gone=["review:D5"])
    assert all_reachable(server)  # built again from the refs
    # An index from before the reachability line: built again too.
    docket = read_docket(str(server), "commitindex")
    docket.covers = docket.covers.partition(b"\n")[2]
    (server / "commitindex").write_bytes(docket.pack())
    assert not all_reachable(server)
    check(git, gitbridge, server, gone=["review:D5"])
    assert all_reachable(server)
    bad = gitbridge("commitid-lookup", "bug:x", cwd=server, check=False)
    assert bad.returncode == 255 and "not a bug number" in bad.stderr


def test_history_a_shallow_clone_fetches_below_its_boundary_is_found(
        git, gitbridge, gitrepo, tmp_path):
    """``git fetch --deepen`` and ``--unshallow`` bring commits below the
    ones the index covers, with the refs where they were: the index sees
    the shallow boundary change and is built again (these keys were "not
    found" until ``--rebuild``)."""
    for number in range(1, 7):
        commit(git, gitrepo, number)
    clone = tmp_path / "shallow"
    git("clone", "-q", "--depth", "2", "file://%s" % gitrepo, clone)
    assert sorted(check(git, gitbridge, clone)) == [
        "bug:105", "bug:106", "id:id5", "id:id6", "review:D5", "review:D6"]
    git("fetch", "-q", "--deepen", "2", cwd=clone)
    assert "review:D3" in check(git, gitbridge, clone)
    git("fetch", "-q", "--unshallow", cwd=clone)
    assert not (clone / ".git" / "shallow").exists()
    assert "review:D1" in check(git, gitbridge, clone)
    # Deepened and moved at once: a new commit on the server too.
    clone2 = tmp_path / "shallow2"
    git("clone", "-q", "--depth", "1", "file://%s" % gitrepo, clone2)
    check(git, gitbridge, clone2)
    commit(git, gitrepo, 7)
    git("fetch", "-q", "--deepen", "3", cwd=clone2)
    assert {"review:D4", "review:D7"} <= set(check(git, gitbridge, clone2))


def unprivileged(env, *args, cwd):
    """``gitbridge ARGS`` run as root without the capabilities that let
    root write where permission bits forbid it (the tests run as root),
    so a read-only file or directory really refuses writes."""
    drop = "-dac_override,-dac_read_search,-fowner"
    return subprocess.run(
        ["setpriv", "--inh-caps=" + drop, "--bounding-set=" + drop,
         tools.executable("gitbridge"), *args], env=env, cwd=cwd,
        capture_output=True, text=True, timeout=120)


def snapshot(directory):
    """Every file under ``directory`` with its size and mtime."""
    return {os.path.join(root, name): (os.lstat(os.path.join(root, name))
                                       .st_size, os.lstat(os.path.join(
                                           root, name)).st_mtime_ns)
            for root, dirs, files in os.walk(directory)
            for name in dirs + files}


def lookup_as(run, *keys):
    proc = run("commitid-lookup", "--json", *keys)
    assert "Traceback" not in proc.stderr and proc.stderr == "", proc.stderr
    found = {}
    for item in json.loads(proc.stdout):
        found.setdefault(item["key"], set()).add(item["node"])
    return proc.returncode, found


@pytest.mark.skipif(not shutil.which("setpriv"), reason="needs setpriv")
def test_a_read_only_repository_is_answered_without_writing(
        git, gitbridge, gitrepo, env):
    """A mirror or CI cache the lookup cannot write (this crashed with
    ``OSError``): with no index, with one that covers the refs, and with
    one the refs have moved past, the answer is the scan's, nothing is
    written and nothing is said on stderr."""
    git_dir = gitrepo / ".git"

    def run(*args):
        return unprivileged(env, *args, cwd=gitrepo)

    for number in range(1, 4):
        commit(git, gitrepo, number)
    try:
        for state in ("no index", "current index", "stale index"):
            if state == "current index":
                subprocess.run(["chmod", "-R", "u+w", git_dir], check=True)
                gitbridge("commitid-lookup", "D1", cwd=gitrepo)
            elif state == "stale index":
                subprocess.run(["chmod", "-R", "u+w", git_dir], check=True)
                commit(git, gitrepo, 4)
            subprocess.run(["chmod", "-R", "a-w", git_dir], check=True)
            before = snapshot(git_dir)
            expected = scan(git, gitrepo)
            status, found = lookup_as(run, *sorted(expected), "D99")
            assert (status, found) == (1, expected), state
            assert snapshot(git_dir) == before, state
            assert (git_dir / "commitindex").exists() == \
                (state != "no index")
        assert "review:D4" in expected
    finally:
        subprocess.run(["chmod", "-R", "u+w", git_dir], check=True)


def test_an_index_begun_empty_takes_sha256_nodes(git, gitbridge, tmp_path):
    """An empty repository's index has no node width yet (20 bytes
    assumed); the first SHA-256 commit builds it again (this once waited
    for its own lock forever)."""
    repo = tmp_path / "sha256"
    git("init", "-q", "--object-format=sha256", "-b", "main", repo)
    assert gitbridge("commitid-lookup", "D1", cwd=repo,
                     check=False).returncode == 1
    commit(git, repo, 1)
    check(git, gitbridge, repo)
    assert len(git("rev-parse", "HEAD", cwd=repo).strip()) == 64


def test_the_quick_command_line_reads_as_the_parser_does(
        git, gitbridge, gitrepo, tmp_path):
    """Keys, ``-C``, ``--json`` and ``--rebuild`` are read without
    argparse; anything else still goes to argparse, as before."""
    commit(git, gitrepo, 1)
    quick = gitbridge("commitid-lookup", "-C", str(gitrepo), "D1", "--json",
                      "--rebuild", "bug 9", cwd=tmp_path, check=False)
    assert quick.returncode == 1
    assert [item["key"] for item in json.loads(quick.stdout)] == ["D1"]
    # An abbreviated option, --help, -C without its value, no key.
    parsed = gitbridge("commitid-lookup", "--js", "D1", cwd=gitrepo)
    assert json.loads(parsed.stdout) == json.loads(
        gitbridge("commitid-lookup", "--json", "D1", cwd=gitrepo).stdout)
    assert "usage: gitbridge commitid-lookup" in gitbridge(
        "commitid-lookup", "--help", cwd=gitrepo).stdout
    for args in (["D1", "-C"], ["-C", "--json", "D1"], ["--json"]):
        wrong = gitbridge("commitid-lookup", *args, cwd=gitrepo, check=False)
        assert wrong.returncode == 2 and "usage:" in wrong.stderr, args


def test_spawn_feeds_and_drains_pipes_past_their_buffers(git, gitrepo):
    """``spawn.git_bytes`` writes stdin while it reads stdout and stderr,
    so neither side waits on a full pipe (64 KiB on Linux); a failure is
    ``Abort`` with git's message."""
    commit(git, gitrepo, 1)
    line = ("%s commit %s\n" % (
        git("rev-parse", "HEAD", cwd=gitrepo).strip(),
        git("cat-file", "-s", "HEAD", cwd=gitrepo).strip())).encode()
    lines = 20000
    out = git_bytes(str(gitrepo), "cat-file", "--batch-check",
                    input=b"HEAD\n" * lines)
    assert len(line) > 40 and out == line * lines
    with pytest.raises(Abort, match="git rev-parse failed: fatal: "):
        git_bytes(str(gitrepo), "rev-parse", "--verify", "nowhere")
    assert git_bytes(str(gitrepo), "rev-parse", "--verify", "-q", "nowhere",
                     ok=(0, 1)) == b""


def clean_abort(proc):
    """Exit 255, one ``abort:`` line (a hint may follow), no traceback."""
    lines = proc.stderr.splitlines()
    return proc.returncode == 255 and "Traceback" not in proc.stderr and \
        [line[:7] for line in lines[:1]] == ["abort: "] and \
        all(line.startswith("(") for line in lines[1:])


def test_a_summary_with_thousands_of_digits_breaks_no_lookup(
        git, gitbridge, gitrepo):
    """"Bug" and 4,400 digits in a summary (``int()`` refuses more than
    4,300): the hook gives the commit its ID, every later lookup answers,
    and the key itself typed back gets one ``abort:`` line."""
    gitbridge("install-hook", cwd=gitrepo)
    commit(git, gitrepo, 1)
    huge = "1" * 4400
    (gitrepo / "huge").write_text("huge\n")
    git("add", "huge", cwd=gitrepo)
    git(*COMMITTER, "commit", "-qm", "Bug %s - huge\n\nDifferential "
        "Revision: https://phabricator.example/D7\n" % huge, cwd=gitrepo)
    assert "MozReview-Commit-ID: " in git("log", "-1", "--format=%B",
                                          cwd=gitrepo)
    commit(git, gitrepo, 2)
    assert {"review:D1", "review:D2", "review:D7"} <= set(
        check(git, gitbridge, gitrepo))
    proc = gitbridge("commitid-lookup", "bug " + huge, cwd=gitrepo,
                     check=False)
    assert clean_abort(proc), proc.stderr[-300:]


@pytest.mark.parametrize("key", [
    "D1\nD2", "bug 101\n", "D1\x1b[2J", "id\x7fx", "\t", "review:D1 x",
    "x" * 300, "bug:" + "9" * 40, "bug:", "review:xyz", ""])
def test_a_hostile_key_gets_one_abort_line(git, gitbridge, gitrepo, key):
    commit(git, gitrepo, 1)
    proc = gitbridge("commitid-lookup", "D1", key, cwd=gitrepo, check=False)
    assert clean_abort(proc), (proc.returncode, proc.stderr)
    assert proc.stdout == ""


def test_other_scripts_digits_are_no_bug_number(git, gitbridge, gitrepo):
    """``str.isdigit`` takes Arabic-Indic digits: "bug ١٠١" matched bug
    101."""
    commit(git, gitrepo, 1)
    for key in ("bug \u0661\u0660\u0661", "bug:\u0661\u0660\u0661",
                "bug 1\u00b2"):
        proc = gitbridge("commitid-lookup", key, cwd=gitrepo, check=False)
        assert proc.stdout == "" and "Traceback" not in proc.stderr, key
        assert proc.returncode in (1, 255), key
    assert gitbridge("commitid-lookup", "bug 101", cwd=gitrepo).stdout


def test_an_index_file_that_is_not_a_regular_file_is_refused(
        git, gitbridge, gitrepo, tmp_path):
    """The docket or its lock as a directory, a FIFO or a symbolic link to
    ``/dev/zero`` (read forever, or waited on forever): one ``abort:``
    line that says to remove it, and it is left where it is."""
    commit(git, gitrepo, 1)
    git_dir = gitrepo / ".git"
    for name in ("commitindex", "commitindex.lock"):
        for kind in ("directory", "fifo", "symlink"):
            path = git_dir / name
            if path.exists():
                path.unlink()
            if kind == "directory":
                path.mkdir()
            elif kind == "fifo":
                os.mkfifo(path)
            else:
                path.symlink_to("/dev/zero")
            proc = subprocess.run(
                [tools.executable("gitbridge"), "commitid-lookup", "D1"],
                cwd=gitrepo, capture_output=True, text=True, timeout=60)
            assert clean_abort(proc), (name, kind, proc.stderr)
            assert "remove it" in proc.stderr
            assert os.path.lexists(path) and not path.is_file(), (name, kind)
            if kind == "directory":
                path.rmdir()
            else:
                path.unlink()
    assert gitbridge("commitid-lookup", "D1", cwd=gitrepo).stdout
    # Git's own .git/shallow, read for its boundary: refused too.
    clone = tmp_path / "shallow"
    git("clone", "-q", "--depth", "1", "file://%s" % gitrepo, clone)
    shallow = clone / ".git" / "shallow"
    shallow.unlink()
    for make in (os.mkdir, os.mkfifo):
        make(shallow)
        proc = subprocess.run(
            [tools.executable("gitbridge"), "commitid-lookup", "D1"],
            cwd=clone, capture_output=True, text=True, timeout=60)
        assert clean_abort(proc), proc.stderr
        assert "shallow is not a regular file" in proc.stderr
        os.rmdir(shallow) if shallow.is_dir() else shallow.unlink()


def test_a_docket_with_a_non_utf8_uid_is_built_again(
        git, gitbridge, gitrepo):
    """A docket whose checksum matches but whose file uid is not text (a
    traceback, ``UnicodeDecodeError``): the index is not trusted but
    built again."""
    commit(git, gitrepo, 1)
    gitbridge("commitid-lookup", "D1", cwd=gitrepo)
    docket = read_docket(str(gitrepo / ".git"), "commitindex")
    docket.table = (b"\xff\xfe\x80", docket.table[1])
    (gitrepo / ".git" / "commitindex").write_bytes(docket.pack())
    check(git, gitbridge, gitrepo)
    assert read_docket(str(gitrepo / ".git"), "commitindex").table[0] != \
        b"\xff\xfe\x80"
