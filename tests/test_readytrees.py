"""Ready trees (``gitbridge ready-trees``, vcsperf.core.readytrees): a
pool keeps complete checkouts, and a new ``gitbridge checkout`` takes one
with a rename and brings it to the wanted commit as it does a reused
checkout.  Against a real smart-HTTP server on 127.0.0.1 (the contract
suite's small source): the hand-out and the refill, two takers of one
tree, trees changed behind the pool's back, a killed refill, stock git
in the pool, and each fallback to writing the whole tree, with its one
line."""

import hashlib
import json
import os
import subprocess
import time

import pytest

from checkout_drivers import (
    GitDriver,
    abort_line,
    git_served,  # noqa: F401 (a fixture)
)
from test_pooling import _dead_pid, _host
from vcsperf.core import readytrees
from vcsperf.harness import tools

NO_TREE = "(no ready tree in the pool; writing the whole tree)"


class Pool(GitDriver):
    """The GitDriver with the ready-trees command."""

    def refill(self, *args, count=1, revision=None, check=True):
        proc = subprocess.run(
            [tools.executable("gitbridge"), "ready-trees", "--sharebase",
             str(self.pool), "--count", str(count), "--timings", *args,
             "-r", revision or self.revisions[0], self.url],
            env=self.env, capture_output=True, text=True)
        if check and proc.returncode != 0:
            raise AssertionError("ready-trees failed:\n%s%s"
                                 % (proc.stdout, proc.stderr))
        return proc

    @property
    def ready(self):
        return self.pool / "ready" / self.store.name

    def ready_names(self):
        if not self.ready.exists():
            return []
        return sorted(os.listdir(self.ready))

    def took(self, proc):
        return self.timings(proc).get("ready_tree")

    def clean_at(self, dest, revision):
        """``dest`` is a clean checkout of ``revision`` with exactly the
        served files (untracked and ignored files count)."""
        status = self.tool("-C", dest, "status", "--porcelain",
                           "--untracked-files=all", "--ignored")
        return self.parent(dest) == revision and status == "" and \
            _files(dest) == _files(self.tree(revision))


def _files(root):
    found = {}
    for top, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in files:
            path = os.path.join(top, name)
            with open(path, "rb") as fh:
                found[os.path.relpath(path, root)] = fh.read()
    return found


@pytest.fixture
def pool(git, git_served, tmp_path):  # noqa: F811 (a fixture)
    return Pool(git, git_served.repo, git_served, tmp_path,
                work=git_served.work)


def test_a_new_checkout_takes_a_ready_tree_and_a_refill_makes_more(pool):
    first, last = pool.revisions[0], pool.revisions[-1]
    made = pool.refill(count=2, revision=first)
    assert made.stdout.count(" made, at %s)" % first[:12]) == 2
    assert len(pool.ready_names()) == 2
    facts = json.loads(made.stdout.splitlines()[-1])["ready-trees"]
    assert facts["revision"] == first and len(facts["trees"]) == 2
    assert facts["ready_bytes"] > 0
    names = set(pool.ready_names())
    taken = []
    for n in range(2):
        dest = pool.dest.parent / ("job%d" % n)
        proc = pool.checkout("-r", last, "--timings", dest=dest)
        taken.append(pool.took(proc))
        assert "(took ready tree %s, at %s, from the pool)" % (
            taken[-1], first[:12]) in proc.stdout
        assert pool.clean_at(dest, last)
        assert not (dest / ".git" / readytrees.SEAL).exists()
    assert set(taken) == names
    assert pool.ready_names() == []
    # none left: the whole tree, said so
    proc = pool.checkout("-r", last, "--timings",
                         dest=pool.dest.parent / "job2")
    assert NO_TREE in proc.stdout and pool.took(proc) is None
    assert pool.clean_at(pool.dest.parent / "job2", last)
    # a refill brings the count back; a second refreshes, at a new commit
    pool.refill(count=1, revision=first)
    refreshed = pool.refill(count=1, revision=last)
    assert " refreshed, at %s)" % last[:12] in refreshed.stdout
    proc = pool.checkout("-r", last, "--timings")
    assert pool.took(proc) and pool.clean_at(pool.dest, last)
    assert pool.store_problems() == []


def test_a_task_writes_in_its_tree_only(pool):
    """What a task does in the tree it took reaches neither the pool nor
    the next checkout."""
    pool.refill(count=2)
    pool.checkout("-r", pool.revisions[-1])
    (pool.dest / "build.o").write_text("object\n")
    (pool.dest / "docs" / "readme.txt").write_text("edited by the task\n")
    other = pool.dest.parent / "other"
    pool.checkout("-r", pool.revisions[-1], dest=other)
    assert pool.clean_at(other, pool.revisions[-1])
    # the refill sees no trace of it either
    pool.refill(count=1)
    assert len(pool.ready_names()) == 1
    assert (pool.dest / "build.o").exists()


def test_two_takers_of_one_tree(pool, tmp_path):
    """Two checkouts at once and one ready tree: exactly one takes it,
    the other writes the whole tree; both end right."""
    pool.refill(count=1)
    dests = [tmp_path / "a", tmp_path / "b"]
    jobs = [subprocess.Popen(pool.command("-r", pool.revisions[-1],
                                          "--timings", dest=dest),
                             env=pool.env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
            for dest in dests]
    results = [(job.wait(), *job.communicate()) for job in jobs]
    took = []
    for (code, out, err), dest in zip(results, dests):
        assert code == 0, err
        took.append(json.loads(out.splitlines()[-1])["checkout"]
                    .get("ready_tree"))
        assert pool.clean_at(dest, pool.revisions[-1])
    assert len([t for t in took if t]) == 1, results


def _add_file(tree):
    (tree / "src" / "planted.py").write_text("planted\n")


def _change_file(tree):
    (tree / "docs" / "readme.txt").write_text("changed behind its back\n")


def _remove_file(tree):
    (tree / "src" / "module1.py").unlink()


def _ignored_build_dir(tree):
    (tree / "obj" / "deep").mkdir(parents=True)
    (tree / "obj" / "deep" / "x.o").write_bytes(b"\0" * 100)


#: Working-tree changes: the taker purges and updates them away.
WORKING_TREE = [_add_file, _change_file, _remove_file, _ignored_build_dir]


@pytest.mark.parametrize("change", WORKING_TREE,
                         ids=lambda f: f.__name__.strip("_"))
def test_working_tree_changed_behind_the_pools_back(pool, change):
    pool.refill(count=1)
    (name,) = pool.ready_names()
    change(pool.ready / name)
    proc = pool.checkout("-r", pool.revisions[-1], "--timings")
    assert pool.took(proc) == name
    assert pool.clean_at(pool.dest, pool.revisions[-1])


def _delete_index(tree):
    (tree / ".git" / "index").unlink()


def _rewrite_index(tree, git=None):
    """skip-worktree on a file, then a change it would hide."""
    subprocess.run(["git", "-C", str(tree), "update-index",
                    "--skip-worktree", "docs/readme.txt"], check=True)
    (tree / "docs" / "readme.txt").write_text("hidden change\n")


def _fsmonitor_command(tree):
    marker = tree.parent.parent.parent.parent / "fsmonitor-ran"
    with open(tree / ".git" / "config", "a") as fh:
        fh.write("[core]\n\tfsmonitor = touch %s\n" % marker)


def _head_moved(tree):
    (tree / ".git" / "HEAD").write_text("0" * 40 + "\n")


def _alternates_elsewhere(tree):
    (tree / ".git" / "objects" / "info" / "alternates").write_text(
        "/nonexistent/objects\n")


def _fifo_config(tree):
    os.unlink(tree / ".git" / "config")
    os.mkfifo(tree / ".git" / "config")


def _symlinked_head(tree):
    os.unlink(tree / ".git" / "HEAD")
    os.symlink("/dev/zero", tree / ".git" / "HEAD")


def _seal_removed(tree):
    (tree / ".git" / readytrees.SEAL).unlink()


def _seal_garbage(tree):
    (tree / ".git" / readytrees.SEAL).write_bytes(b"\xff[not json")


def _tree_is_a_symlink(tree):
    moved = tree.parents[3] / "moved-tree"
    os.rename(tree, moved)
    os.symlink(moved, tree)


#: What the seal catches: the tree is set aside, unused.
SEALED = [_delete_index, _rewrite_index, _fsmonitor_command, _head_moved,
          _alternates_elsewhere, _fifo_config, _symlinked_head,
          _seal_removed, _seal_garbage, _tree_is_a_symlink]


@pytest.mark.parametrize("damage", SEALED,
                         ids=lambda f: f.__name__.strip("_"))
def test_a_tree_whose_seal_breaks_is_set_aside_unused(pool, damage,
                                                      tmp_path):
    pool.refill(count=1)
    (name,) = pool.ready_names()
    damage(pool.ready / name)
    start = time.monotonic()
    proc = pool.checkout("-r", pool.revisions[-1], "--timings")
    assert time.monotonic() - start < 60
    assert "(ready tree %s was changed behind the pool's back: " % name \
        in proc.stderr
    assert "; set aside for the pool to delete)" in proc.stderr
    assert NO_TREE in proc.stdout and pool.took(proc) is None
    assert pool.clean_at(pool.dest, pool.revisions[-1])
    assert not (tmp_path / "fsmonitor-ran").exists()
    assert pool.ready_names() == [".damaged-" + name]
    # the next refill deletes it and makes a sound one
    refilled = pool.refill(count=1)
    assert "(deleted .damaged-%s)" % name in refilled.stdout
    names = pool.ready_names()
    assert len(names) == 1, names
    proc = pool.checkout("-r", pool.revisions[0], "--timings",
                         dest=tmp_path / "next")
    assert pool.took(proc) == names[0]
    assert pool.clean_at(tmp_path / "next", pool.revisions[0])


def test_a_killed_refill_is_resumed_and_no_tree_is_lost(pool):
    """A refill killed while it refreshed a tree leaves it busy (no taker
    sees it); the next refill resumes it."""
    pool.refill(count=1)
    (name,) = pool.ready_names()
    busy = pool.ready / (readytrees.BUSY + name)
    os.rename(pool.ready / name, busy)
    (busy / ".git" / "index.lock").write_text("")  # git was killed too
    proc = pool.checkout("-r", pool.revisions[-1], "--timings",
                         dest=pool.dest.parent / "meanwhile")
    assert pool.took(proc) is None and NO_TREE in proc.stdout
    resumed = pool.refill(count=1, revision=pool.revisions[-1])
    assert "(ready tree %s resumed, at %s)" % (
        name, pool.revisions[-1][:12]) in resumed.stdout
    assert pool.ready_names() == [name]
    proc = pool.checkout("-r", pool.revisions[-1], "--timings")
    assert pool.took(proc) == name
    assert pool.clean_at(pool.dest, pool.revisions[-1])


def test_a_take_killed_after_its_rename_is_purged_by_the_rerun(pool):
    """The taker died between its rename and the purge: the rerun, even
    without --purge, purges what the tree held besides its files."""
    pool.refill(count=1)
    (name,) = pool.ready_names()
    _add_file(pool.ready / name)
    os.rename(pool.ready / name, pool.dest)
    proc = pool.checkout("-r", pool.revisions[-1], "--timings")
    assert "(%s is a ready tree an interrupted checkout took; purging " \
        "it)" % pool.dest in proc.stderr
    assert pool.clean_at(pool.dest, pool.revisions[-1])
    assert not (pool.dest / ".git" / readytrees.SEAL).exists()
    # from then on, a checkout of its own: reused as the request says
    (pool.dest / "build.o").write_text("kept\n")
    pool.checkout("-r", pool.revisions[0])
    assert (pool.dest / "build.o").exists()


def test_locks_left_by_dead_processes_are_taken_over_on_the_new_path(
        pool):
    """The engine's locks hold on the take and the refill: DEST's lock
    and the refill's lock, left by dead processes, are taken over, said
    as the engine says it."""
    pool.refill(count=1)
    key = hashlib.sha256(str(pool.dest).encode()).hexdigest()[:20]
    os.symlink("%s:%d" % (_host(), _dead_pid()),
               pool.pool / "checkouts" / (key + ".lock"))
    os.symlink("%s:%d" % (_host(), _dead_pid()),
               str(pool.ready) + ".lock")
    proc = pool.checkout("-r", pool.revisions[-1], "--timings")
    assert "(took over the lock on checkout %s from process " % pool.dest \
        in proc.stderr
    assert pool.took(proc) and pool.clean_at(pool.dest, pool.revisions[-1])
    refilled = pool.refill(count=1)
    assert "(took over the lock on ready trees of %s from process " % (
        pool.store.name) in refilled.stderr
    assert len(pool.ready_names()) == 1


def test_the_count_bounds_the_disk(pool):
    made = pool.refill(count=3)
    assert len(pool.ready_names()) == 3
    # new trees are cloned copy-on-write, or the refill says why not
    problem = readytrees.reflink_problem(str(pool.ready))
    if problem:
        assert made.stdout.count("(%s has no copy-on-write clones (%s); "
                                 "each ready tree is written in full)"
                                 % (pool.ready, problem)) == 1
        assert made.stdout.count(" made, at ") == 3
    else:
        assert made.stdout.count(" cloned, at ") == 2
    fewer = pool.refill(count=1)
    assert fewer.stdout.count("(deleted t-") == 2
    assert len(pool.ready_names()) == 1
    pool.refill(count=0)
    assert not pool.ready.exists()
    proc = pool.checkout("-r", pool.revisions[-1], "--timings")
    assert NO_TREE not in proc.stdout and pool.took(proc) is None


def test_stock_git_in_the_pool_breaks_no_tree(pool, tmp_path):
    """git gc --prune=now and git worktree prune in the store leave the
    ready and the handed-out trees whole; git gc in a ready tree changes
    its .git, so that tree is set aside, never handed out."""
    pool.refill(count=3)
    pool.checkout("-r", pool.revisions[-1])
    # only the checkouts' refs name the ready trees' commit now
    for ref in pool.tool("-C", pool.store, "for-each-ref", "--format",
                         "%(refname)", "refs/pool").split():
        pool.tool("-C", pool.store, "update-ref", "-d", ref)
    for args in (["gc", "--quiet", "--prune=now"], ["worktree", "prune"],
                 ["reflog", "expire", "--expire=now", "--all"],
                 ["gc", "--quiet", "--prune=now"]):
        pool.tool("-C", pool.store, *args)
    fsck = pool.tool.proc("-C", pool.dest, "fsck", "--no-progress")
    assert fsck.returncode == 0, fsck.stderr
    second = tmp_path / "second"
    proc = pool.checkout("-r", pool.revisions[0], "--timings", dest=second)
    assert pool.took(proc) and pool.clean_at(second, pool.revisions[0])
    (name,) = pool.ready_names()
    pool.tool("-C", pool.ready / name, "gc", "--quiet", "--prune=now")
    third = tmp_path / "third"
    proc = pool.checkout("-r", pool.revisions[0], "--timings", dest=third)
    assert "(ready tree %s was changed behind the pool's back: " % name \
        in proc.stderr
    assert pool.took(proc) is None
    assert pool.clean_at(third, pool.revisions[0])
    assert pool.store_problems() == []


def test_requests_a_ready_tree_cannot_serve_write_the_tree(pool, tmp_path):
    pool.refill(count=1)
    sparse = pool.checkout("-r", pool.revisions[-1], "--sparseprofile",
                           "profiles/docs.sparse", "--timings",
                           dest=tmp_path / "sparse")
    assert "(ready trees are full checkouts, not sparse ones; writing " \
        "the whole tree)" in sparse.stdout
    worktree = pool.checkout("-r", pool.revisions[-1], "--layout",
                             "worktree", "--timings",
                             dest=tmp_path / "wt")
    assert "(ready trees use the alternates layout, not worktree; " \
        "writing the whole tree)" in worktree.stdout
    noupdate = pool.checkout("-r", pool.revisions[-1], "-U", "--timings",
                             dest=tmp_path / "bare")
    assert "ready tree" not in noupdate.stdout + noupdate.stderr
    for proc in (sparse, worktree, noupdate):
        assert pool.took(proc) is None
    assert len(pool.ready_names()) == 1


def _other_filesystem():
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK) and \
            os.stat(shm).st_dev != os.stat(os.getcwd()).st_dev:
        return shm
    return None


@pytest.mark.skipif(_other_filesystem() is None,
                    reason="no writable /dev/shm on another filesystem")
def test_a_dest_on_another_filesystem_writes_the_tree(pool, tmp_path):
    pool.refill(count=1)
    dest = os.path.join(_other_filesystem(),
                        "vcsperf-ready-%d" % os.getpid())
    try:
        proc = pool.checkout("-r", pool.revisions[-1], "--timings",
                             dest=dest)
        assert "(%s is on another filesystem than the pool's ready trees; "\
            "writing the whole tree)" % dest in proc.stdout
        assert pool.took(proc) is None
        assert pool.clean_at(dest, pool.revisions[-1])
    finally:
        subprocess.run(["rm", "-rf", dest], check=True)
    assert len(pool.ready_names()) == 1


def test_an_empty_dest_directory_takes_one_and_a_full_one_never(pool):
    pool.refill(count=1)
    pool.dest.mkdir()
    proc = pool.checkout("-r", pool.revisions[-1], "--timings")
    assert pool.took(proc) and pool.clean_at(pool.dest, pool.revisions[-1])
    pool.refill(count=1)
    # an existing checkout is reused, not replaced
    proc = pool.checkout("-r", pool.revisions[0], "--timings")
    assert pool.took(proc) is None and len(pool.ready_names()) == 1


def test_bad_input(pool, tmp_path):
    for count, message in (("-1", "0 to 64, not -1"),
                           ("65", "0 to 64, not 65")):
        proc = pool.refill(count=count, check=False)
        assert abort_line(proc) == ("abort: the count of ready trees must "
                                    "be %s" % message)
    pool.configure("sharepool.ready-trees", "many")
    proc = subprocess.run([tools.executable("gitbridge"), "ready-trees",
                           "--sharebase", str(pool.pool), "-b", "main",
                           pool.url], env=pool.env, capture_output=True,
                          text=True)
    assert abort_line(proc) == ("abort: sharepool.ready-trees is not a "
                                "number: 'many'")
    proc = subprocess.run([tools.executable("gitbridge"), "ready-trees",
                           "--count", "1", "-b", "main", pool.url],
                          env=pool.env,
                          capture_output=True, text=True)
    assert abort_line(proc).startswith("abort: share base directory not "
                                       "defined")
    # a task's DEST inside the pool's ready trees is refused
    pool.configure("sharepool.ready-trees", "1")
    pool.refill()
    (name,) = pool.ready_names()
    proc = pool.checkout("-r", pool.revisions[-1], check=False,
                         dest=pool.ready / name)
    assert abort_line(proc).endswith("is or holds the share base; refusing "
                                     "to replace it")
    assert pool.ready_names() == [name]


def test_reflink_probe_answers_on_this_filesystem(tmp_path):
    """FICLONE works (btrfs, XFS) or the kernel's refusal is the reason;
    the probe leaves nothing behind."""
    problem = readytrees.reflink_problem(str(tmp_path))
    assert problem is None or problem.startswith("FICLONE: ")
    assert os.listdir(tmp_path) == []


def test_a_seal_is_never_written_through_a_planted_link(tmp_path):
    """The seal's temporary file is a new file (mkstemp: O_CREAT|O_EXCL|
    O_NOFOLLOW): a symbolic link planted under the name it had
    (``vcsperf-ready-seal.tmp``) is not followed, and nothing is left."""
    tree = tmp_path / "tree"
    (tree / ".git").mkdir(parents=True)
    (tree / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    planted = tree / ".git" / (readytrees.SEAL + ".tmp")
    planted.symlink_to(victim)
    trees = readytrees.ReadyTrees(str(tmp_path / "ready"), ".git", [])
    trees.seal(str(tree), "a" * 40)
    assert victim.read_text() == "precious\n"
    assert sorted(os.listdir(tree / ".git")) == [
        "HEAD", readytrees.SEAL, readytrees.SEAL + ".tmp"]
    planted.unlink()  # the planted link is fingerprinted: not the pool's
    trees.seal(str(tree), "a" * 40)
    assert trees.seal_problem(str(tree)) == ("a" * 40, None)
