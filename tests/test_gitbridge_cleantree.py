"""``gitbridge checkout --purge`` from the record of a clean tree
(gitbridge/cleantree.py): whatever is done to a checkout behind its back,
the purge removes exactly what ``git clean -ffdx`` removes from a twin
checkout treated the same way, and keeps what it keeps; where it cannot
be exact (a stock git wrote the index, no record, a removal fails) it
says so and ``git clean`` runs.  Real git, real files, a real server."""

import os
import shutil
import socket
import subprocess
import threading
import time

import pytest

import checkout_drivers
from checkout_drivers import (
    GITCONFIG,
    git_commit,
    git_served,  # noqa: F401 (a fixture)
)
from gitbridge import cleantree
from vcsperf.harness import tools
from vcsperf.harness.proxies import Fault, FlakyProxy

TREE = {"src/deep/er/leaf.txt": "leaf\n", "src/deep/file.txt": "file\n",
        "src/kept.c": "int x;\n", "lib/a.py": "a\n", "lib/b/c.py": "c\n",
        "top.txt": "top\n", "docs/readme.txt": "readme\n",
        ".gitignore": "*.o\nbuild/\n"}


@pytest.fixture
def served(git, git_served):  # noqa: F811 (a fixture)
    """The small source with a deeper tree and ignore rules on top."""
    git_served.tip = git_commit(git, git_served.work, TREE, "deeper tree")
    return git_served


@pytest.fixture
def gitbridge(env, home):
    (home / ".gitconfig").write_text(GITCONFIG)

    def run(*args):
        return subprocess.run([tools.executable("gitbridge"), "checkout",
                               *map(str, args)], env=env,
                              capture_output=True, text=True, check=True)
    return run


def listing(top):
    """Every entry under ``top`` but the top's .git: path and kind."""
    found = {}
    for dirpath, dirs, files in os.walk(top):
        if dirpath == str(top):
            dirs[:] = [d for d in dirs if d != ".git"]
        for name in dirs + files:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, top)
            mode = os.lstat(path).st_mode
            found[rel] = ("dir" if os.path.isdir(path)
                          and not os.path.islink(path) else
                          "link" if os.path.islink(path) else
                          "file" if os.path.isfile(path) else
                          "special %o" % (mode >> 12))
    return found


# What is done behind the checkout's back: one function each, applied
# to both twins.

def junk_everywhere(d):
    (d / "src/deep/er/__pycache__").mkdir()
    (d / "src/deep/er/__pycache__/leaf.pyc").write_bytes(b"\0pyc")
    (d / "src/deep/new.o").write_text("ignored by .gitignore\n")
    (d / "build/x/y").mkdir(parents=True)
    (d / "build/x/y/z.o").write_text("deep\n")
    (d / "untracked.txt").write_text("top\n")


def added_behind_an_unchanged_mtime(d):
    """A file added, and the directory's mtime set back to what it was:
    its ctime moved, which no one can set back."""
    where = d / "lib/b"
    st = os.lstat(where)
    (where / "sneaky.py").write_text("hidden\n")
    os.utime(where, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.lstat(where).st_mtime_ns == st.st_mtime_ns


def directory_replaced_by_a_file(d):
    shutil.rmtree(d / "lib/b")
    (d / "lib/b").write_text("now a file\n")


def file_replaced_by_a_directory(d):
    (d / "top.txt").unlink()
    (d / "top.txt").mkdir()
    (d / "top.txt/inside").write_text("x\n")


def special_files(d):
    """git clean skips FIFOs and sockets in tracked directories, and
    removes them with an untracked directory."""
    os.mkfifo(d / "src/fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(d / "docs/sock"))
    sock.close()
    (d / "tmpdir").mkdir()
    os.mkfifo(d / "tmpdir/fifo")


def dot_git_entries(d):
    """An entry named .git is never git clean's, in a tracked directory;
    an untracked directory holding a repository goes whole (-ff)."""
    (d / "src/.git").write_text("gitdir: nowhere\n")
    subprocess.run(["git", "init", "-q", str(d / "nested")], check=True)
    (d / "nested/file").write_text("x\n")


def symlinks(d):
    """Untracked symbolic links are removed, never followed."""
    outside = d.parent / ("outside-" + d.name)
    outside.mkdir(exist_ok=True)
    (outside / "precious").write_text("keep\n")
    os.symlink(outside, d / "src/link-to-outside")
    os.symlink(outside, d / "lib/b/dirlink")
    shutil.rmtree(d / "docs")
    os.symlink(outside, d / "docs")


def directory_replaced_by_a_symlink_out_of_dest(d):
    """A tracked directory (with a tracked directory in it) replaced by a
    link to a directory outside DEST that has a directory of the same
    name: nothing out there is read or removed, the link is."""
    outside = d.parent / ("outside-" + d.name)
    (outside / "b").mkdir(parents=True, exist_ok=True)
    (outside / "precious").write_text("keep\n")
    (outside / "b/untracked-looking.py").write_text("keep\n")
    shutil.rmtree(d / "lib")
    os.symlink(outside, d / "lib")


def read_only_directory(d):
    (d / "lib/b/stuck.o").write_text("x\n")
    os.chmod(d / "lib/b", 0o555)


def renamed_directory(d):
    os.rename(d / "src/deep", d / "src/shallow")


CHANGES = [junk_everywhere, added_behind_an_unchanged_mtime,
           directory_replaced_by_a_file, file_replaced_by_a_directory,
           special_files, dot_git_entries, symlinks,
           directory_replaced_by_a_symlink_out_of_dest, read_only_directory,
           renamed_directory]


def twins(gitbridge, served, tmp_path):
    """Two checkouts of the tip, each with its record of a clean tree."""
    made = []
    for name in ("ours", "git"):
        dest = tmp_path / name
        gitbridge("--sharebase", tmp_path / "pool", "-r", served.tip,
                  served.repo_url, dest)
        assert (dest / ".git" / cleantree.NAME).exists()
        made.append(dest)
    return made


@pytest.mark.parametrize("change", CHANGES, ids=lambda c: c.__name__)
def test_purge_from_the_record_is_git_clean(git, gitbridge, served,
                                            tmp_path, change):
    ours, theirs = twins(gitbridge, served, tmp_path)
    for dest in (ours, theirs):
        change(dest)
    try:
        record = cleantree.read(str(ours / ".git" / cleantree.NAME))
        index = cleantree.index_checksum(str(ours / ".git" / "index"))
        removed = cleantree.find(str(ours), str(ours), record, index).remove()
        out = git("-C", theirs, "clean", "-ffdx")
        assert listing(ours) == listing(theirs)
        assert removed == len(out.splitlines())
        for dest in (ours, theirs):
            outside = tmp_path / ("outside-" + dest.name)
            if outside.exists():
                assert (outside / "precious").read_text() == "keep\n"
                if (outside / "b").exists():
                    assert os.listdir(outside / "b") == [
                        "untracked-looking.py"]
    finally:
        for dest in (ours, theirs):
            for dirpath, dirs, _files in os.walk(dest):
                os.chmod(dirpath, 0o755)


def test_checkout_purges_from_the_record_and_ends_clean(git, gitbridge,
                                                        served, tmp_path):
    """Through the command: a checkout made new records its tree; a purge
    at another commit reads the record, ends clean, keeps what git clean
    keeps, and records the new tree for the next purge."""
    dest, pool = tmp_path / "co", tmp_path / "pool"
    gitbridge("--sharebase", pool, "-r", served.tip, served.repo_url, dest)
    os.unlink(served.work / "src/deep/er/leaf.txt")
    tip = git_commit(git, served.work, {"added/dir/new.txt": "new\n"},
                     "move things")
    junk_everywhere(dest)
    os.mkfifo(dest / "src/fifo")
    for target in (tip, served.tip):
        proc = gitbridge("--sharebase", pool, "-r", target, "--purge",
                         "--timings", served.repo_url, dest)
        facts = checkout_drivers.timings(proc, "checkout")
        assert facts["purge_from_record"] is True
        assert git("-C", dest, "rev-parse", "HEAD").strip() == target
        assert git("-C", dest, "status", "--porcelain",
                   "--untracked-files=all", "--ignored") == ""
        assert "(disk:" not in proc.stdout
        if target == tip:
            assert not (dest / "src/deep/er").exists()
            assert (dest / "added/dir/new.txt").exists()
        (dest / "lib/b/more.o").write_text("x\n")
    assert not (dest / "added").exists()
    assert (dest / "src/fifo").exists()  # git clean keeps FIFOs
    # a new index is in version 4
    assert (dest / ".git/index").read_bytes()[:8] == b"DIRC\0\0\0\4"


def test_a_stock_git_between_runs_makes_the_purge_git_clean(
        git, gitbridge, served, tmp_path):
    """A stock git that wrote the index (here ``git rm --cached``, which
    turns a tracked file untracked without touching its directory) voids
    the record: the purge runs git clean, which removes that file."""
    dest, pool = tmp_path / "co", tmp_path / "pool"
    gitbridge("--sharebase", pool, "-r", served.tip, served.repo_url, dest)
    git("-C", dest, "rm", "-q", "--cached", "lib/a.py")
    record = cleantree.read(str(dest / ".git" / cleantree.NAME))
    with pytest.raises(cleantree.Fallback):
        cleantree.find(str(dest), str(dest), record, cleantree.index_checksum(
            str(dest / ".git" / "index")))
    proc = gitbridge("--sharebase", pool, "-r", served.tip, "--purge",
                     "--timings", served.repo_url, dest)
    assert checkout_drivers.timings(proc, "checkout")[
        "purge_from_record"] is False
    assert git("-C", dest, "status", "--porcelain", "--untracked-files=all",
               "--ignored") == ""
    assert (dest / "lib/a.py").read_text() == "a\n"


@pytest.mark.parametrize("damage", ["garbage", "missing", "truncated"])
def test_a_damaged_or_missing_record_is_git_clean(git, gitbridge, served,
                                                  tmp_path, damage):
    dest, pool = tmp_path / "co", tmp_path / "pool"
    gitbridge("--sharebase", pool, "-r", served.tip, served.repo_url, dest)
    path = dest / ".git" / cleantree.NAME
    if damage == "garbage":
        path.write_bytes(b"\xff\x00garbage")
    elif damage == "missing":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[:40])
    (dest / "lib/b/junk.o").write_text("x\n")
    proc = gitbridge("--sharebase", pool, "-r", served.tip, "--purge",
                     "--timings", served.repo_url, dest)
    assert checkout_drivers.timings(proc, "checkout")[
        "purge_from_record"] is False
    assert not (dest / "lib/b/junk.o").exists()
    # the verified tree is recorded again
    assert cleantree.read(str(path)) is not None


def test_a_directory_changed_in_the_recording_tick_is_read(tmp_path, git):
    """A directory whose mtime is not before the record's clock may have
    changed after it was examined, in the same tick: it is recorded as
    racy and read by the next purge, whatever its stat data."""
    dest = tmp_path / "repo"
    git("init", "-q", dest)
    (dest / "d").mkdir()
    (dest / "d/tracked").write_text("x\n")
    git("-C", dest, "add", "-A")
    git("-C", dest, "-c", "user.name=t", "-c", "user.email=t@example.com",
        "commit", "-q", "-m", "one")
    commit = git("-C", dest, "rev-parse", "HEAD").strip()
    future = 4102444800 * 10 ** 9  # 2100: not before any clock now
    os.utime(dest / "d", ns=(future, future))
    index = cleantree.index_checksum(str(dest / ".git/index"))
    path = str(dest / ".git" / cleantree.NAME)
    cleantree.write(path, str(dest), commit, index,
                    cleantree.directories(str(dest), commit))
    (dest / "d/junk").write_text("x\n")
    os.utime(dest / "d", ns=(future, future))
    _commit, _index, dirs, stats = cleantree.read(path)
    at = 3 * dirs.index(b"d")
    assert list(stats[at:at + 3]) == [-1, -1, -1]
    assert cleantree.find(str(dest), str(dest), cleantree.read(path),
                          index).remove() == 1
    assert sorted(os.listdir(dest / "d")) == ["tracked"]


def one_file_repository(git, tmp_path):
    """``(path, commit, index checksum, record path)`` of a new repository
    holding one committed file."""
    dest = tmp_path / "repo"
    git("init", "-q", dest)
    (dest / "f").write_text("x\n")
    git("-C", dest, "add", "-A")
    git("-C", dest, "-c", "user.name=t", "-c", "user.email=t@example.com",
        "commit", "-q", "-m", "one")
    return (dest, git("-C", dest, "rev-parse", "HEAD").strip(),
            cleantree.index_checksum(str(dest / ".git/index")),
            str(dest / ".git" / cleantree.NAME))


@pytest.mark.parametrize("name", [b"../outside", b"/etc", b"a/../../x",
                                  b"src/.git", b"a//b", b"."])
def test_a_record_naming_what_no_tree_holds_is_no_record(tmp_path, git,
                                                         name):
    """A record whose directories are not paths a tree can hold (outside
    DEST, in a .git) is read as none: the purge then runs git clean."""
    dest, commit, index, path = one_file_repository(git, tmp_path)
    cleantree.write(path, str(dest), commit, index, [b"", b"src", name])
    assert cleantree.read(path) is None
    # a killed run's temporary record is removed by the next write
    with open(path + ".tmp-99999999", "wb") as fh:
        fh.write(b"half a record")
    cleantree.write(path, str(dest), commit, index, [b"", b"src"])
    assert cleantree.read(path)[2] == [b"", b"src"]
    assert not os.path.exists(path + ".tmp-99999999")


def test_purge_from_record_removes_a_directory_left_where_a_file_was(
        git, gitbridge, git_served, tmp_path):  # noqa: F811 (a fixture)
    """Finding: a tracked file replaced by a directory (``rm a; mkdir a``)
    and a ``--purge`` to a commit without that file.  git clean keeps the
    directory (the index still has ``a``), ``git checkout --force`` cannot
    unlink it, and the purge from the record skips ``git status``: the run
    says "verified: ... clean" while ``?? a/`` is in the tree, and it
    records that tree as clean, so every later ``--purge`` keeps the
    directory that ``git clean -ffdx`` then removes."""
    tip = git_commit(git, git_served.work, {"gone.txt": "x\n"}, "add gone")
    os.unlink(git_served.work / "gone.txt")
    after = git_commit(git, git_served.work, {}, "remove gone")
    dest, pool = tmp_path / "co", tmp_path / "pool"
    gitbridge("--sharebase", pool, "-r", tip, git_served.repo_url, dest)
    (dest / "gone.txt").unlink()
    (dest / "gone.txt").mkdir()
    (dest / "gone.txt" / "junk").write_text("junk\n")
    proc = gitbridge("--sharebase", pool, "-r", after, "--purge",
                     git_served.repo_url, dest)
    status = git("-C", dest, "status", "--porcelain",
                 "--untracked-files=all", "--ignored")
    # the run said so, or the tree is clean
    assert "clean" not in proc.stdout or status == ""
    gitbridge("--sharebase", pool, "-r", after, "--purge",
              git_served.repo_url, dest)
    # a second purge at the same commit removes what git clean would
    assert git("-C", dest, "clean", "-ffdxn") == ""


def test_purge_from_record_removes_a_dropped_submodules_directory(
        git, gitbridge, git_served, tmp_path):  # noqa: F811 (a fixture)
    """A submodule's directory holding files (its checkout, or anything)
    that the next commit drops: ``git checkout`` cannot remove the
    directory and the purge from the record never reads it (its parent is
    unchanged); it is looked at again after the checkout and removed, as
    ``git clean -ffdx`` would."""
    work = git_served.work
    base = git_commit(git, work, {"keep.txt": "k\n"}, "base")

    def commit(*change):
        # not git_commit: its ``add -A`` drops a gitlink with no directory
        git("-C", work, *change)
        git("-C", work, "commit", "-q", "-m", change[0])
        git("-C", work, "push", "-q", "origin", "HEAD:main")
        return git("-C", work, "rev-parse", "HEAD").strip()

    with_sub = commit("update-index", "--add", "--cacheinfo",
                      "160000,%s,sub" % base)
    without = commit("rm", "-q", "--cached", "sub")
    dest, pool = tmp_path / "co", tmp_path / "pool"
    gitbridge("--sharebase", pool, "-r", with_sub, git_served.repo_url, dest)
    (dest / "sub").mkdir(exist_ok=True)
    (dest / "sub" / "file.c").write_text("its checkout\n")
    proc = gitbridge("--sharebase", pool, "-r", without, "--purge",
                     "--timings", git_served.repo_url, dest)
    assert checkout_drivers.timings(proc, "checkout")[
        "purge_from_record"] is True
    assert not (dest / "sub").exists()
    assert git("-C", dest, "status", "--porcelain", "--untracked-files=all",
               "--ignored") == ""
    assert "clean" in proc.stdout


def test_purge_from_record_reads_a_kept_directory_that_becomes_tracked(
        git, gitbridge, git_served, tmp_path):  # noqa: F811 (a fixture)
    """A file replaced by a directory holding junk, and a commit that makes
    that path a directory: the checkout writes into the directory the
    purge kept, so the junk is looked at again and removed."""
    tip = git_commit(git, git_served.work, {"node": "file\n"}, "a file")
    os.unlink(git_served.work / "node")
    after = git_commit(git, git_served.work, {"node/inside.txt": "in\n"},
                       "a directory")
    dest, pool = tmp_path / "co", tmp_path / "pool"
    gitbridge("--sharebase", pool, "-r", tip, git_served.repo_url, dest)
    (dest / "node").unlink()
    (dest / "node").mkdir()
    (dest / "node" / "junk").write_text("junk\n")
    gitbridge("--sharebase", pool, "-r", after, "--purge",
              git_served.repo_url, dest)
    assert (dest / "node" / "inside.txt").read_text() == "in\n"
    assert git("-C", dest, "status", "--porcelain", "--untracked-files=all",
               "--ignored") == ""
    # and what is recorded is clean: the next purge keeps nothing more
    gitbridge("--sharebase", pool, "-r", after, "--purge",
              git_served.repo_url, dest)
    assert git("-C", dest, "clean", "-ffdxn") == ""


def test_a_record_after_a_purge_keeps_only_untouched_directories(
        git, gitbridge, served, tmp_path):
    """After a purge from the record, the new record keeps the stat data
    of the directories the purge found unchanged and the checkout did not
    touch, and the rest are racy: junk put into any of them, even while
    the run went on, is found by the next purge."""
    dest, pool = tmp_path / "co", tmp_path / "pool"
    gitbridge("--sharebase", pool, "-r", served.tip, served.repo_url, dest)
    path = str(dest / ".git" / cleantree.NAME)
    before = cleantree.read(path)
    tip = git_commit(git, served.work, {"lib/b/c.py": "changed\n"}, "c")
    (dest / "src/deep/junk.o").write_text("x\n")
    gitbridge("--sharebase", pool, "-r", tip, "--purge", served.repo_url,
              dest)
    after = cleantree.read(path)

    def stat_data(record, name):
        at = 3 * record[2].index(name)
        return list(record[3][at:at + 3])
    # untouched: kept as it was; changed (the purge read it) or touched
    # (the checkout wrote in it): racy, read by the next purge
    assert stat_data(after, b"docs") == stat_data(before, b"docs")
    for name in (b"src/deep", b"lib/b", b""):
        assert stat_data(after, name) == [-1, -1, -1]
    junk_everywhere(dest)
    (dest / "docs/junk.txt").write_text("x\n")
    (dest / "lib/b/junk.o").write_text("x\n")
    proc = gitbridge("--sharebase", pool, "-r", tip, "--purge", "--timings",
                     served.repo_url, dest)
    assert checkout_drivers.timings(proc, "checkout")[
        "purge_from_record"] is True
    assert git("-C", dest, "status", "--porcelain", "--untracked-files=all",
               "--ignored") == ""


def test_an_index_repaired_after_the_purge_was_found_is_found_again(
        git, gitbridge, served, tmp_path):
    """What to purge is found beside the pull, from the index as it was;
    an index the share checks then rebuild (damaged: its checksum does not
    match) voids that finding.  The rebuilt index holds exactly the
    recorded commit's tree, so the record still holds: the purge is found
    again from it, and the tree ends clean."""
    dest, pool = tmp_path / "co", tmp_path / "pool"
    gitbridge("--sharebase", pool, "-r", served.tip, served.repo_url, dest)
    tip = git_commit(git, served.work, {"lib/new.py": "new\n"}, "new")
    junk_everywhere(dest)
    index = dest / ".git" / "index"
    data = bytearray(index.read_bytes())
    data[len(data) // 2] ^= 0xFF
    index.write_bytes(bytes(data))
    proc = gitbridge("--sharebase", pool, "-r", tip, "--purge", "--timings",
                     served.repo_url, dest)
    assert "is damaged" in proc.stderr + proc.stdout
    facts = checkout_drivers.timings(proc, "checkout")
    assert facts["pulled"] is True and facts["purge_from_record"] is True
    assert not (dest / "untracked.txt").exists()
    assert git("-C", dest, "rev-parse", "HEAD").strip() == tip
    assert git("-C", dest, "status", "--porcelain", "--untracked-files=all",
               "--ignored") == ""


def test_junk_written_while_the_pull_runs_is_purged_next_time(
        git, gitbridge, served, tmp_path):
    """What to purge is found before the pull ends; files another process
    writes into DEST after that (here while the server trickles its
    pack) may stay for this run, but the record never says the
    directories they went into are clean: the next purge removes them,
    as git clean would."""
    dest, pool = tmp_path / "co", tmp_path / "pool"
    with FlakyProxy(served.url) as proxy:
        url = proxy.url + served.repo_url[len(served.url):]
        gitbridge("--sharebase", pool, "-r", served.tip, url, dest)
        tip = git_commit(git, served.work, {"lib/new.py": "new\n"}, "new")
        junk_everywhere(dest)
        proxy.add(Fault("command=fetch", trickle=0.002))
        late = [dest / "src/deep/late.o", dest / "docs/late.txt",
                dest / "late-top.txt"]

        def write_late():
            while not proxy.applied():
                time.sleep(0.01)
            for path in late:
                path.write_text("late\n")
        writer = threading.Thread(target=write_late)
        writer.start()
        try:
            gitbridge("--sharebase", pool, "-r", tip, "--purge", url, dest)
        finally:
            writer.join(60)
        assert all(path.exists() for path in late)
        proc = gitbridge("--sharebase", pool, "-r", tip, "--purge",
                         "--timings", url, dest)
    assert checkout_drivers.timings(proc, "checkout")[
        "purge_from_record"] is True
    assert not any(path.exists() for path in late)
    assert git("-C", dest, "status", "--porcelain", "--untracked-files=all",
               "--ignored") == ""


def test_a_directory_made_a_link_while_the_pull_runs_leads_nowhere(
        git, gitbridge, served, tmp_path):
    """Finding: what to purge is found before the pull ends; a directory
    it was found in (or an untracked directory it found) replaced by a
    symbolic link to a directory outside DEST while the pull runs led the
    removal there.  The directories are looked at again before anything
    is removed: the purge runs git clean, nothing outside DEST is
    touched, and the tree ends clean."""
    dest, pool = tmp_path / "co", tmp_path / "pool"
    outside = tmp_path / "outside"
    with FlakyProxy(served.url) as proxy:
        url = proxy.url + served.repo_url[len(served.url):]
        gitbridge("--sharebase", pool, "-r", served.tip, url, dest)
        tip = git_commit(git, served.work, {"lib/new.py": "new\n"}, "new")
        junk_everywhere(dest)
        (dest / "lib/b/junk.o").write_text("x\n")
        for name in ("src", "b"):
            (outside / name).mkdir(parents=True)
            for junk in ("junk.o", "untracked.txt", "new.o", "x"):
                (outside / name / junk).write_text("precious\n")
        proxy.add(Fault("command=fetch", trickle=0.002))

        def swap():
            while not proxy.applied():
                time.sleep(0.01)
            shutil.rmtree(dest / "build")
            os.symlink(outside / "src", dest / "build")
            shutil.rmtree(dest / "lib/b")
            os.symlink(outside / "b", dest / "lib/b")
        swapper = threading.Thread(target=swap)
        swapper.start()
        try:
            proc = gitbridge("--sharebase", pool, "-r", tip, "--purge",
                             "--timings", url, dest)
        finally:
            swapper.join(60)
    assert checkout_drivers.timings(proc, "checkout")[
        "purge_from_record"] is False
    for name in ("src", "b"):
        assert sorted(os.listdir(outside / name)) == [
            "junk.o", "new.o", "untracked.txt", "x"]
    assert git("-C", dest, "rev-parse", "HEAD").strip() == tip
    assert git("-C", dest, "status", "--porcelain", "--untracked-files=all",
               "--ignored") == ""


@pytest.mark.parametrize("kind", ["option", "fifo", "endless"])
def test_a_hostile_record_is_no_record(tmp_path, git, kind):
    """A record whose commit is no hash (it goes to git as an argument:
    ``--output=FILE`` would have git write FILE), a FIFO in its place
    (reading it would wait forever) or a link to an endless device is
    read as none, at once."""
    dest, _commit, index, path = one_file_repository(git, tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    if kind == "option":
        cleantree.write(path, str(dest), "--output=%s" % victim, index,
                        [b""])
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        os.symlink("/dev/zero", path)
    assert cleantree.read(path) is None
    assert victim.read_text() == "keep\n"


# The tracked files compared beside the pull ------------------------------------

def checkout_traced(env, tmp_path, *args):
    """``gitbridge checkout ARGS`` with git's monitor trace on: the run,
    and what the trace says (the hook's command and the files it named,
    in order)."""
    trace = tmp_path / ("fsmonitor-%d.log" % time.monotonic_ns())
    proc = subprocess.run([tools.executable("gitbridge"), "checkout",
                           *map(str, args)],
                          env=dict(env, GIT_TRACE_FSMONITOR=str(trace)),
                          capture_output=True, text=True, check=True)
    return proc, trace.read_text(errors="surrogateescape") \
        if trace.exists() else ""


def named_by_the_hook(trace):
    return sorted(line.split("fsmonitor_refresh_callback '", 1)[1]
                  .rsplit("' (pos", 1)[0] for line in trace.splitlines()
                  if "fsmonitor_refresh_callback" in line)


@pytest.mark.parametrize("dest_name", ["co", "co 'it''s' $HOME \\ \"x\""])
def test_a_reuse_lstats_only_the_changed_files_and_reverts_them(
        git, gitbridge, env, served, tmp_path, dest_name):
    """A reuse compares the tracked files with the index beside the pull
    and tells the checkout which differ (a monitor hook, through the
    shell: DEST's name is quoted): git is told exactly the files edited,
    deleted or replaced behind its back, and the tree ends at the commit
    with each of them restored; the answer file is gone afterwards, and
    a stock git reads the index."""
    dest, pool = tmp_path / dest_name, tmp_path / "pool"
    gitbridge("--sharebase", pool, "-r", served.tip, served.repo_url, dest)
    tip = git_commit(git, served.work, {"lib/new.py": "new\n"}, "new")
    (dest / "lib/a.py").write_text("edited\n")
    os.unlink(dest / "top.txt")
    os.unlink(dest / "src/kept.c")
    os.symlink("top.txt", dest / "src/kept.c")
    proc, trace = checkout_traced(env, tmp_path, "--sharebase", pool, "-r",
                                  tip, "--purge", served.repo_url, dest)
    assert "returned success" in trace, trace
    assert named_by_the_hook(trace) == ["lib/a.py", "src/kept.c", "top.txt"]
    # the others were vouched for by the new checkout: never looked at
    looked_at = {line.split("mark_fsmonitor_clean '", 1)[1][:-1]
                 for line in trace.splitlines()
                 if "mark_fsmonitor_clean '" in line}
    assert looked_at <= {"lib/a.py", "src/kept.c", "top.txt", "lib/new.py"}
    assert git("-C", dest, "rev-parse", "HEAD").strip() == tip
    assert git("-C", dest, "status", "--porcelain", "--untracked-files=all",
               "--ignored") == ""
    assert (dest / "lib/a.py").read_text() == "a\n"
    assert (dest / "top.txt").read_text() == "top\n"
    assert not os.path.islink(dest / "src/kept.c")
    assert not [name for name in os.listdir(dest / ".git")
                if name.startswith("gitbridge-changed-files")]
    # nothing changed since: the hook names nothing, the tree stays
    proc, trace = checkout_traced(env, tmp_path, "--sharebase", pool, "-r",
                                  tip, "--purge", served.repo_url, dest)
    assert "returned success" in trace and named_by_the_hook(trace) == []
    assert git("-C", dest, "status", "--porcelain") == ""


def test_a_monitor_configured_in_dest_that_lies_is_not_trusted(
        git, gitbridge, env, served, tmp_path):
    """DEST's own ``core.fsmonitor`` hook says nothing ever changes: the
    comparison beside the pull does not ask it, the checkout asks ours,
    and an edited file is still restored."""
    dest, pool = tmp_path / "co", tmp_path / "pool"
    gitbridge("--sharebase", pool, "-r", served.tip, served.repo_url, dest)
    liar = tmp_path / "liar"
    liar.write_text("#!/bin/sh\nprintf 'lie\\0'\n")
    liar.chmod(0o755)
    git("-C", dest, "config", "core.fsmonitor", str(liar))
    git("-C", dest, "config", "core.fsmonitorHookVersion", "2")
    git("-C", dest, "status", "--porcelain")  # the liar's token in the index
    (dest / "lib/a.py").write_text("edited\n")
    tip = git_commit(git, served.work, {"lib/new.py": "new\n"}, "new")
    gitbridge("--sharebase", pool, "-r", tip, served.repo_url, dest)
    assert (dest / "lib/a.py").read_text() == "a\n"
    assert (dest / "lib/new.py").read_text() == "new\n"


def test_tracked_names_git_quotes_are_told_and_restored(
        git, gitbridge, env, served, tmp_path):
    """Tracked files named with a newline, quotes, a backslash and bytes
    that are not UTF-8, edited: the hook's answer carries the names as
    they are (NUL-separated), and each is restored."""
    names = [b"odd/new\nline.txt", b"odd/quo\"te's.txt", b"odd/back\\slash",
             b"odd/latin-\xe9.txt"]
    for name in names:
        path = os.fsdecode(os.path.join(bytes(served.work), name))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(b"original\n")
    git("-C", served.work, "add", "-A")
    git("-C", served.work, "commit", "-q", "-m", "odd names")
    git("-C", served.work, "push", "-q", "origin", "HEAD:main")
    dest, pool = tmp_path / "co", tmp_path / "pool"
    base = git("-C", served.work, "rev-parse", "HEAD").strip()
    gitbridge("--sharebase", pool, "-r", base, served.repo_url, dest)
    for name in names:
        with open(os.path.join(bytes(dest), name), "wb") as fh:
            fh.write(b"edited!!\n")
    tip = git_commit(git, served.work, {"lib/new.py": "new\n"}, "new")
    proc, trace = checkout_traced(env, tmp_path, "--sharebase", pool, "-r",
                                  tip, "--purge", served.repo_url, dest)
    assert "returned success" in trace
    assert len(named_by_the_hook(trace)) == len(names)
    for name in names:
        with open(os.path.join(bytes(dest), name), "rb") as fh:
            assert fh.read() == b"original\n"
    assert git("-C", dest, "status", "--porcelain") == ""


@pytest.mark.parametrize("planted", ["link", "directory", "fifo"])
def test_a_hostile_answer_file_is_replaced_or_not_used(
        git, gitbridge, env, served, tmp_path, planted):
    """Something planted where the monitor answer goes: a symbolic link
    to a file outside DEST is replaced, never written through; a FIFO is
    replaced without being opened; a directory there cannot be replaced,
    and the checkout compares every file itself.  An edit is restored
    each time, and nothing outside DEST changes."""
    dest, pool = tmp_path / "co", tmp_path / "pool"
    gitbridge("--sharebase", pool, "-r", served.tip, served.repo_url, dest)
    outside = tmp_path / "precious"
    outside.write_text("precious\n")
    answer = dest / ".git" / "gitbridge-changed-files"
    if planted == "link":
        os.symlink(outside, answer)
    elif planted == "fifo":
        os.mkfifo(answer)
    else:
        (answer / "sub").mkdir(parents=True)
    (dest / "lib/a.py").write_text("edited\n")
    tip = git_commit(git, served.work, {"lib/new.py": "new\n"}, "new")
    proc, trace = checkout_traced(env, tmp_path, "--sharebase", pool, "-r",
                                  tip, "--purge", served.repo_url, dest)
    assert outside.read_text() == "precious\n"
    assert (dest / "lib/a.py").read_text() == "a\n"
    assert git("-C", dest, "status", "--porcelain") == ""
    if planted == "directory":
        assert "fsmonitor process" not in trace
        assert (answer / "sub").is_dir()
    else:
        assert "returned success" in trace
        assert not os.path.lexists(answer)


def test_a_tracked_file_edited_while_the_pull_runs_is_restored_next_time(
        git, gitbridge, env, served, tmp_path):
    """The tracked files are compared before the pull ends; a file
    another process edits after that (here while the server trickles its
    pack), while the run holds DEST's lock, is not told to the checkout
    (the record's miss, cleantree's docstring).  The next run compares
    again, from scratch, and restores it."""
    dest, pool = tmp_path / "co", tmp_path / "pool"
    with FlakyProxy(served.url) as proxy:
        url = proxy.url + served.repo_url[len(served.url):]
        gitbridge("--sharebase", pool, "-r", served.tip, url, dest)
        tip = git_commit(git, served.work, {"lib/new.py": "new\n"}, "new")
        proxy.add(Fault("command=fetch", trickle=0.002))

        def edit():
            while not proxy.applied():
                time.sleep(0.01)
            (dest / "lib/a.py").write_text("edited during the pull\n")
        editor = threading.Thread(target=edit)
        editor.start()
        try:
            gitbridge("--sharebase", pool, "-r", tip, url, dest)
        finally:
            editor.join(60)
        assert git("-C", dest, "rev-parse", "HEAD").strip() == tip
        gitbridge("--sharebase", pool, "-r", tip, url, dest)
    assert (dest / "lib/a.py").read_text() == "a\n"
    assert git("-C", dest, "status", "--porcelain") == ""


def test_a_replace_ref_planted_in_dest_does_not_make_tracked_files_junk(
        git, gitbridge, served, tmp_path):
    """What to purge is found in DEST before the pull (its objects are the
    store's).  A replace ref planted there, swapping ``lib/b``'s tree for
    an empty one, would make ``lib/b/c.py`` look untracked to a reader
    that honours it, and the checkout, told only of the files that
    differ, would not bring it back: objects are read as they are, and
    every tracked file stays."""
    dest, pool = tmp_path / "co", tmp_path / "pool"
    gitbridge("--sharebase", pool, "-r", served.tip, served.repo_url, dest)
    lib = git("-C", dest, "rev-parse", "HEAD:lib/b").strip()
    empty = git("-C", dest, "hash-object", "-t", "tree", "-w",
                "/dev/null").strip()
    git("-C", dest, "replace", lib, empty)
    junk_everywhere(dest)
    (dest / "lib/b/more.o").write_text("x\n")
    tip = git_commit(git, served.work, {"top.txt": "top 2\n"}, "tip")
    gitbridge("--sharebase", pool, "-r", tip, "--purge", served.repo_url,
              dest)
    assert (dest / "lib/a.py").read_text() == "a\n"
    assert (dest / "lib/b/c.py").read_text() == "c\n"
    assert not (dest / "lib/b/more.o").exists()
    assert git("-C", dest, "-c", "core.useReplaceRefs=false", "status",
               "--porcelain", "--untracked-files=all", "--ignored") == ""


def test_a_pull_slower_than_the_bound_makes_the_checkout_compare_all(
        git, gitbridge, served, tmp_path):
    """An outside attack: a tracked file edited while the pull ran was
    missed by that run, which still said the tree was clean, for as long
    as the server made the pull last.  The comparison beside the pull is
    used only within ``COMPARISON_TRUSTED_FOR`` seconds of its start;
    past that, ``git checkout`` compares every file itself, and the edit
    is undone by the same run."""
    from gitbridge.checkout import COMPARISON_TRUSTED_FOR
    dest, pool = tmp_path / "co", tmp_path / "pool"
    with FlakyProxy(served.url) as proxy:
        url = proxy.url + served.repo_url[len(served.url):]
        gitbridge("--sharebase", pool, "-r", served.tip, url, dest)
        tip = git_commit(git, served.work, {"lib/new.py": "new\n" * 200},
                         "new")
        proxy.add(Fault("command=fetch", trickle=0.02))

        def edit():
            while not proxy.applied():
                time.sleep(0.01)
            (dest / "lib/a.py").write_text("edited during the pull\n")
            os.unlink(dest / "top.txt")
        editor = threading.Thread(target=edit)
        editor.start()
        start = time.monotonic()
        try:
            proc = gitbridge("--sharebase", pool, "-r", tip, url, dest)
        finally:
            editor.join(60)
    assert time.monotonic() - start > COMPARISON_TRUSTED_FOR
    assert "(the pull took long: the checkout compares every file " \
        "itself)" in proc.stdout
    assert (dest / "lib/a.py").read_text() == "a\n"
    assert (dest / "top.txt").read_text() == "top\n"
    assert git("-C", dest, "status", "--porcelain") == ""
