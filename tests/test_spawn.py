"""``vcsperf.core.spawn``: git's output read as it comes
(``git_records``), on a real repository: records cut across the pipe's
blocks come out whole, a reader that stops early leaves no git behind,
and a failing git still aborts with its message."""

import os
import subprocess

import pytest

from vcsperf.core.errors import Abort
from vcsperf.core.spawn import git_bytes, git_records
from vcsperf.harness import tools


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("spawn"))
    env = tools.isolated_env(path)
    subprocess.run(["git", "init", "-q", path], check=True, env=env)
    # Messages of many sizes, some larger than a pipe's block (64 KiB).
    for number in range(40):
        message = "commit %d\n\n%s\n" % (number, "x" * (number * 3000))
        subprocess.run(["git", "commit", "-q", "--allow-empty", "-F", "-"],
                       input=message.encode(), cwd=path, check=True,
                       env=env)
    return path


def test_records_come_out_whole(repo):
    args = ("log", "-z", "--format=%H%n%B")
    whole = git_bytes(repo, *args).split(b"\0")
    assert list(git_records(repo, *args)) == [r for r in whole if r]
    assert len(whole) >= 40 and max(map(len, whole)) > 1 << 16
    # Input on stdin, as the index's walk gives it.
    tip = git_bytes(repo, "rev-parse", "HEAD").strip()
    assert [r.partition(b"\n")[0] for r in git_records(
        repo, "log", "--stdin", "-z", "--format=%H%n%B", "-n", "2",
        input=tip + b"\n")] == git_bytes(
            repo, "log", "-n", "2", "--format=%H", tip.decode()).split()


def test_a_reader_that_stops_early_leaves_no_git(repo):
    records = git_records(repo, "log", "-z", "--format=%B")
    assert next(records).startswith(b"commit 39")
    assert "git" in children()
    records.close()  # git is waited for (no zombie), its pipes closed
    assert "git" not in children()


def children():
    """The command names of this process's children, zombies included."""
    names = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/stat" % pid) as fh:
                stat = fh.read()
        except OSError:
            continue
        name, _, rest = stat.partition("(")[2].rpartition(")")
        if int(rest.split()[1]) == os.getpid():
            names.append(name)
    return names


def test_a_failing_git_aborts_after_its_output(repo):
    with pytest.raises(Abort, match="unknown revision"):
        list(git_records(repo, "log", "-z", "no-such-revision"))
