"""gitbridge checkout's cone-mode sparse checkouts (``--sparse-dirs``) and
blobless pools (``--filter blob:none``), against a real smart-HTTP Git
server on 127.0.0.1: the transitions of a reused checkout, the blobs
landing in the pool, stock git acting on the pool, and the campaign
(hostile directory names, a directory the commit lacks, an origin that
stops serving blobs while a checkout needs them)."""

import os
import re
import subprocess

import pytest

from checkout_drivers import (
    GITCONFIG,
    abort_line,
    git_commit,
    git_served,  # noqa: F401 (a fixture)
    timings,
)
from vcsperf.harness import tools
from vcsperf.harness.proxies import Fault, FlakyProxy


@pytest.fixture
def served(git, git_served, home):  # noqa: F811 (a fixture)
    """The small source, served as GitHub serves (filters, objects by
    id), with a third directory for the cone to leave out; gitbridge's
    retries are quick."""
    (home / ".gitconfig").write_text(GITCONFIG)
    for name in ("uploadpack.allowFilter", "uploadpack.allowAnySHA1InWant"):
        git("-C", git_served.repo, "config", name, "true")
    git_served.commits.append(git_commit(
        git, git_served.work, {"tools/build/run.sh": "make\n",
                               "tools/lint.sh": "lint\n",
                               "tools/deep/.gitignore": "*.o\n"}, "tools"))
    return git_served


def files(dest):
    """DEST's files but its ``.git`` (a directory, or a worktree's file)."""
    return sorted(os.path.relpath(os.path.join(top, name), dest)
                  for top, dirs, names in os.walk(dest)
                  if not os.path.relpath(top, dest).startswith(".git")
                  for name in names if name != ".git")


def missing(git, store, commit):
    out = git("-C", store, "rev-list", "--objects", "--missing=print",
              "--no-walk", commit)
    return [line[1:] for line in out.splitlines() if line.startswith("?")]


def test_cone_in_a_blobless_pool_and_every_transition(git, gitbridge,
                                                      served, tmp_path):
    pool, dest = tmp_path / "pool", tmp_path / "co"
    first, tip = served.commits[0], served.commits[-1]
    store = pool / (first + ".git")

    def checkout(*args, where=dest, rev=tip):
        return gitbridge("checkout", "--sharebase", pool, "-r", rev,
                         "--timings", *args, served.repo_url, where)

    # cold, blobless, cone: only the cone's blobs come, into the pool
    proc = checkout("--filter", "blob:none", "--sparse-dirs", "src, docs/",
                    rev=served.commits[-2])
    assert "(setting sparse directories docs, src)" in proc.stdout
    assert files(dest) == ["docs/readme.txt"] + [
        "src/module%d.py" % i for i in range(8)]
    assert timings(proc, "checkout")["steps"]["fetch_blobs"] > 0
    assert git("-C", store, "config", "extensions.partialClone").strip()
    assert missing(git, store, served.commits[-2]) == [
        git("-C", served.repo, "rev-parse",
            "%s:profiles/docs.sparse" % served.commits[-2]).strip()]
    # nothing fetched landed in the checkout; stock git's gc and fsck in
    # it take what the pool lacks as promised, and fetch nothing
    assert "count: 0\n" in git("-C", dest, "count-objects", "-v")
    assert "in-pack: 0\n" in git("-C", dest, "count-objects", "-v")
    git("-C", dest, "gc", "-q")
    assert "missing" not in git("-C", dest, "fsck", "--no-progress")
    assert "in-pack: 0\n" in git("-C", dest, "count-objects", "-v")

    # reused one commit behind, purged, a directory more: its blobs only
    (dest / "src" / "junk.o").write_text("build output\n")
    proc = checkout("--purge", "--sparse-dirs", "tools/build,src,docs")
    assert "(changing sparse directories from docs, src to docs, src, " \
        "tools/build)" in proc.stdout
    # and the .gitignore git reads from the index outside the cone
    assert "(fetching 3 blobs the checkout needs" in proc.stdout
    assert not (dest / "tools" / "deep").exists()
    assert "tools/build/run.sh" in files(dest)
    assert "tools/lint.sh" in files(dest)  # beside a parent of the cone
    assert "src/junk.o" not in files(dest)
    assert git("-C", dest, "status", "--porcelain", "--ignored") == ""
    assert git("-C", dest, "sparse-checkout", "list").split() == [
        "docs", "src", "tools/build"]
    # outside the cone, at the top and beside it: removed whole by --purge
    for junk in ("obj-build/dir/x.o", "tools/other/y.o", "docs/z.o"):
        (dest / junk).parent.mkdir(parents=True, exist_ok=True)
        (dest / junk).write_text("build output\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("not ours\n")
    (dest / "tools" / "build").rename(tmp_path / "build-moved")
    (dest / "tools" / "build").symlink_to(outside)
    proc = checkout("--purge", "--sparse-dirs", "docs,src,tools/build")
    assert "(sparse directories docs, src, tools/build already set)" \
        in proc.stdout
    assert "fetch_blobs" not in timings(proc, "checkout")["steps"]
    assert (outside / "keep.txt").read_text() == "not ours\n"
    assert not (dest / "obj-build").exists()
    assert not (dest / "tools" / "other").exists()
    assert "docs/z.o" not in files(dest)
    assert "tools/build/run.sh" in files(dest)
    assert git("-C", dest, "status", "--porcelain", "--ignored") == ""

    # another cone, then the full tree, then narrowed again
    proc = checkout("--sparse-dirs", "docs")
    assert "(changing sparse directories from docs, src, tools/build to " \
        "docs)" in proc.stdout
    assert files(dest) == ["docs/readme.txt"]
    proc = checkout("--purge")
    assert "(widening the sparse checkout of docs to the full tree)" \
        in proc.stdout
    assert "update" in timings(proc, "checkout")["steps"]
    assert len(files(dest)) == 13 and missing(git, store, tip) == []
    assert git("-C", dest, "config", "--get", "core.sparseCheckout",
               check=False).strip() in ("", "false")
    assert git("-C", dest, "status", "--porcelain", "--ignored") == ""
    proc = checkout("--sparse-dirs", "profiles")
    assert "(narrowing the full checkout to sparse directories profiles)" \
        in proc.stdout
    assert files(dest) == ["profiles/docs.sparse"]

    # stock git acting on the pool: a blob it lacks is fetched into it,
    # gc and fsck work; the next checkout still does
    pushed = git_commit(git, served.work, {"docs/readme.txt": "new\n"},
                        "docs again")
    git("-C", store, "fetch", "-q", "--filter=blob:none",
        git("-C", store, "config", "extensions.partialClone").strip(),
        "+refs/heads/*:refs/stock/*")
    readme = "%s:docs/readme.txt" % pushed
    assert git("-C", store, "cat-file", "-p", readme) == "new\n"
    git("-C", store, "gc", "-q")
    git("-C", store, "fsck", "--no-progress")
    proc = checkout("--sparse-dirs", "docs", rev=pushed)
    assert "fetching" not in proc.stdout
    assert (dest / "docs" / "readme.txt").read_text() == "new\n"

    # a sparse profile checkout is never made full (robustcheckout's rule)
    checkout("--sparseprofile", "profiles/docs.sparse", rev=pushed)
    refused = gitbridge("checkout", "--sharebase", pool, "-r", pushed,
                        served.repo_url, dest, check=False)
    assert abort_line(refused) == ("abort: cannot use non-sparse checkout "
                                   "on existing sparse checkout")
    # ready trees are full: a cone request writes its own tree
    gitbridge("ready-trees", "--sharebase", pool, "--count", "1", "-r",
              pushed, served.repo_url)
    proc = checkout("--sparse-dirs", "docs", where=tmp_path / "new",
                    rev=pushed)
    assert "(ready trees are full checkouts, not sparse ones; writing the " \
        "whole tree)" in proc.stdout
    assert files(tmp_path / "new") == ["docs/readme.txt"]


def test_cone_in_a_worktree_of_a_blobless_store(git, gitbridge, served,
                                                tmp_path):
    pool = tmp_path / "pool"
    for where in ("one", "two"):
        gitbridge("checkout", "--sharebase", pool, "--layout", "worktree",
                  "--filter", "blob:none", "--sparse-dirs", "docs", "-b",
                  "main", served.repo_url, tmp_path / where)
        assert files(tmp_path / where) == ["docs/readme.txt"]
    git("-C", tmp_path / "one", "status", "--porcelain")
    git("-C", pool / (served.commits[0] + ".git"), "fsck", "--no-progress")


HOSTILE_DIRS = [
    ("../x", "abort: sparse directory '../x' has an empty, '.', '..' or "
             "'.git' component"),
    ("/etc", "abort: sparse directory '/etc' is absolute"),
    ("src/../../x", "abort: sparse directory 'src/../../x' has an empty, "
                    "'.', '..' or '.git' component"),
    ("src,.git/hooks", "abort: sparse directory '.git/hooks' has an empty, "
                       "'.', '..' or '.git' component"),
    ("a\nb", "abort: sparse directory 'a\\nb' holds a control character or "
             "a leading double quote"),
    ("src,,docs", "abort: sparse directory '' is empty"),
    ("x" * 2000, "abort: sparse directory '%s' is longer than 1024 bytes"
                 % ("x" * 2000)),
    (",".join("d%d" % n for n in range(600)),
     "abort: --sparse-dirs names more than 512 directories"),
]


def test_hostile_and_missing_directories_abort_before_any_write(
        git, gitbridge, served, tmp_path, env):
    pool, dest = tmp_path / "pool", tmp_path / "co"
    for dirs, expected in HOSTILE_DIRS:
        proc = gitbridge("checkout", "--sharebase", pool, "-b", "main",
                         "--sparse-dirs", dirs, served.repo_url, dest,
                         check=False)
        assert proc.returncode == 255 and abort_line(proc) == expected
        assert not pool.exists() and not dest.exists()
    gitbridge_binary = tools.executable("gitbridge")
    for args, config, expected in [
            (["--sparse-dirs", "src", "--sparseprofile", "p"], {},
             "abort: cannot use both --sparseprofile and --sparse-dirs"),
            ([], {"GIT_CONFIG_COUNT": "1",
                  "GIT_CONFIG_KEY_0": "sharepool.filter",
                  "GIT_CONFIG_VALUE_0": "tree:0"},
             "abort: unknown filter 'tree:0'")]:
        proc = subprocess.run(
            [gitbridge_binary, "checkout", "--sharebase", str(pool), "-b",
             "main", *args, served.repo_url, str(dest)],
            env=dict(env, **config), capture_output=True, text=True)
        assert abort_line(proc) == expected and not dest.exists()
    # a directory the commit lacks, or a file: one line, nothing written
    tip = served.commits[-1]
    for name, what in (("nope", "not in the tree"),
                       ("tools/lint.sh", "a file, not a directory")):
        proc = gitbridge("checkout", "--sharebase", pool, "-r", tip,
                         "--filter", "blob:none", "--sparse-dirs",
                         "src," + name, served.repo_url, dest, check=False)
        assert abort_line(proc) == ("abort: sparse directory %s is %s at "
                                    "revision %s" % (name, what, tip))
        assert files(dest) == []


def test_origin_failing_while_a_blobless_checkout_needs_blobs(
        git, gitbridge, served, tmp_path):
    """The origin answers for refs but not for the blobs a reused sparse
    checkout now needs: one abort with a hint, the checkout left as it
    was, no half tree, and the next run finishes it."""
    pool, dest = tmp_path / "pool", tmp_path / "co"
    tip = served.commits[-1]
    gitbridge("checkout", "--sharebase", pool, "-r", tip, "--filter",
              "blob:none", "--sparse-dirs", "docs", served.repo_url, dest)
    tools_blob = git("-C", served.repo, "rev-parse",
                     "%s:tools/lint.sh" % tip).strip()
    with FlakyProxy(served.url) as proxy:
        proxy.add(Fault(tools_blob, status=404, times=None))
        url = proxy.url + "project.git"
        proc = gitbridge("checkout", "--sharebase", pool, "-r", tip,
                         "--networkattempts", "2", "--sparse-dirs", "tools",
                         url, dest, check=False)
    assert proc.returncode == 255
    assert re.match(r"abort: reached maximum number of network attempts; "
                    r"giving up \(2 attempts; last failure: .*404",
                    abort_line(proc)), proc.stderr
    assert proc.stderr.rstrip().splitlines()[-1] == (
        "(raise --networkattempts, or check the server)")
    assert "updated to" not in proc.stdout
    assert files(dest) == ["docs/readme.txt"]
    assert git("-C", dest, "status", "--porcelain") == ""
    gitbridge("checkout", "--sharebase", pool, "-r", tip, "--sparse-dirs",
              "tools", served.repo_url, dest)
    assert files(dest) == ["tools/build/run.sh", "tools/deep/.gitignore",
                           "tools/lint.sh"]
