"""``hg bundlegen`` and ``gitbridge bundlegen`` refuse an output directory
in the repository's own files (``.hg``, ``.git``, a bare repository, a
share's source, through a symbolic link, from ``--output`` or the
configuration, for a run or ``--check-fresh``) with the same one abort
line, before anything is written; beside the repository is fine."""

import os

from checkout_drivers import hg_commit

EXT = ("--config", "extensions.bundlegen=")
BASE = "https://cdn.example.com/b"


def snapshot(directory):
    """Every file and directory under ``directory``, with its size and
    modification time: what any write changes."""
    return {os.path.join(root, name): (
        os.lstat(os.path.join(root, name)).st_size,
        os.lstat(os.path.join(root, name)).st_mtime_ns)
        for root, dirs, files in os.walk(directory)
        for name in dirs + files}


def refused(proc, output, top, vcs):
    """Whether ``proc`` is the one abort of an output directory in
    ``top`` (a byte of a path that is not UTF-8 as Python's stderr
    writes it)."""
    top = os.path.realpath(top)
    return proc.returncode == 255 and proc.stderr == (
        "abort: output directory %s is inside the repository's own files "
        "(%s)\n(%s keeps its files there, not bundles: give a directory "
        "outside %s)\n" % (output, top, vcs, top)).encode(
            "utf-8", "backslashreplace").decode()


def test_git_output_in_git_files_is_refused(git, gitbridge, tmp_path):
    work = tmp_path / "work"
    git("init", "-q", "-b", "main", work)
    (work / "f").write_text("one\n")
    git("-C", work, "add", "f")
    git("-C", work, "commit", "-q", "-m", "one")
    bare = tmp_path / "bare.git"
    git("clone", "-q", "--bare", work, bare)
    # a path that is not UTF-8 (git's answer is read as bytes)
    odd = tmp_path / os.fsdecode(b"odd-\xff.git")
    git("clone", "-q", "--bare", work, odd)
    linked = tmp_path / "linked"
    git("-C", work, "worktree", "add", "-q", "-b", "side", linked)
    (tmp_path / "into-objects").symlink_to(bare / "objects")
    cases = [
        (work, work / ".git", work / ".git"),
        (work, work / ".git" / "objects" / "pack" / "b", work / ".git"),
        (bare, bare, bare),
        (bare, bare / "refs" / "bundles", bare),
        (bare, tmp_path / "into-objects" / "b", bare),
        (linked, work / ".git" / "bundles", work / ".git"),
        (linked, work / ".git" / "worktrees", work / ".git"),
        (odd, odd / "objects", odd),
    ]
    before = snapshot(tmp_path)
    for number, (repo, output, top) in enumerate(cases):
        extra = ("--check-fresh",) if number % 2 else ()
        proc = gitbridge("bundlegen", "--repo", repo, "--output", output,
                         "--base-url", BASE, *extra, check=False)
        assert refused(proc, output, top, "git"), (output, proc.stderr)
    assert snapshot(tmp_path) == before
    # the config's relative output is the repository's: in a bare one,
    # inside it; beside it is fine
    git("-C", bare, "config", "bundlegen.output", "bundles")
    git("-C", bare, "config", "bundlegen.base-url", BASE)
    before = snapshot(tmp_path)
    proc = gitbridge("bundlegen", "--repo", bare, check=False)
    assert refused(proc, bare / "bundles", bare, "git"), proc.stderr
    assert snapshot(tmp_path) == before
    git("-C", bare, "config", "bundlegen.output", "../bundles")
    gitbridge("bundlegen", "--repo", bare)
    assert (tmp_path / "bundles" / "bundle-list").is_file()
    # a non-bare repository's working tree is not git's own files
    gitbridge("bundlegen", "--repo", work, "--output", work / "out",
              "--base-url", BASE, "--dry-run")


def test_hg_output_in_hg_files_is_refused(hg, tmp_path):
    repo = tmp_path / "repo"
    hg("init", repo)
    hg_commit(hg, repo, {"f": "one\n"}, "one")
    shared = tmp_path / "shared"
    hg("--config", "extensions.share=", "share", "-q", "-U", repo, shared)
    (tmp_path / "into-store").symlink_to(repo / ".hg" / "store")
    # where hg runs, the output directory, the .hg it is in, and how the
    # run is asked for (--output or the config; a run or --check-fresh)
    cases = [
        (repo, str(repo / ".hg"), repo / ".hg", "--output", ()),
        (repo, str(repo / ".hg" / "cache" / "b"), repo / ".hg", "config",
         ()),
        (repo, str(tmp_path / "into-store" / "b"), repo / ".hg", "--output",
         ("--check-fresh",)),
        (shared, str(repo / ".hg" / "bundles"), repo / ".hg", "config",
         ("--check-fresh",)),
        (shared, str(shared / ".hg" / "bundles"), shared / ".hg",
         "--output", ()),
        (repo, ".hg/bundles", repo / ".hg", "config", ()),
        # a path that is not ASCII, in the message as it is
        (repo, str(repo / ".hg" / "bündel"), repo / ".hg", "--output", ()),
    ]
    before = snapshot(tmp_path)
    for where, output, top, given, extra in cases:
        given = ("--output", output) if given == "--output" else (
            "--config", "bundlegen.output=" + output)
        proc = hg.proc(*EXT, "bundlegen", *given, "--base-url", BASE,
                       *extra, cwd=where)
        assert refused(proc, output, top, "Mercurial"), (output, proc.stderr)
    assert snapshot(tmp_path) == before
    hg("-R", repo, *EXT, "bundlegen", "--output", tmp_path / "out",
       "--base-url", BASE, "--dry-run")
