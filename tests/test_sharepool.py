"""hg robustcheckout (the sharepool extension) against real ``hg serve``
servers on 127.0.0.1: the CI story, Mozilla's options and messages,
sparse profiles, the PERFHERDER_DATA line, the aborts for bad input and
Mercurial's own damage.  The failure tests it shares with gitbridge
checkout (recoveries, locks, a misbehaving proxy, concurrent checkouts)
are the contract suite, test_checkout_contract.py; kills at random
moments and flipped bytes are in the campaign
(test_campaign_checkout.py)."""

import json
import os
import random
import re
import subprocess

import pytest

import checkout_drivers
from checkout_drivers import (
    SPARSE_PROFILE,
    STALE_WLOCK,
    abort_line,
    damage_delta_bases,
    foreign_lock,
    garbage_dirstate,
    hg_commit,
    hg_served,  # noqa: F401 (a fixture)
    hg_source,  # noqa: F401 (a fixture)
    hgrc,  # noqa: F401 (a fixture)
    make_hg_source,
    module_hgserve,  # noqa: F401 (a fixture)
    network_clones,
)
from vcsperf.core import pooling
from vcsperf.harness.proxies import Fault, FlakyProxy


@pytest.fixture
def source(hg_source):  # noqa: F811 (a fixture)
    """The module's source repository; tests must not change it."""
    return hg_source


@pytest.fixture
def served(hg_served):  # noqa: F811 (a fixture)
    return hg_served


@pytest.fixture
def own_source(hg, tmp_path):
    """A source repository of the test's own, that it may change."""
    return make_hg_source(hg, tmp_path / "source")


@pytest.fixture
def own_served(own_source, hgserve, tmp_path):
    server = hgserve(own_source, "--accesslog", tmp_path / "access.log")
    server.log = tmp_path / "access.log"
    return server


def checkout(hg, url, dest, *args, pool=None, check=True):
    pool = pool or os.path.join(os.path.dirname(dest), "pool")
    proc = hg.proc("robustcheckout", "--sharebase", pool, *args, url, dest)
    if check and proc.returncode != 0:
        raise AssertionError("robustcheckout failed:\n%s%s"
                             % (proc.stdout, proc.stderr))
    return proc


def timings(proc):
    return checkout_drivers.timings(proc, "robustcheckout")


def parent(hg, dest):
    return hg("log", "-r", ".", "-T", "{node}", cwd=dest)


# The user's story ---------------------------------------------------------

def test_ci_jobs_share_one_store_and_fetch_only_what_is_missing(
        hg, own_source, own_served, tmp_path):
    """Three CI jobs on one machine: the first clones the pool store, the
    second checks out another revision with no network transfer, and after
    a push the first job's directory is reused, purged and pulled."""
    source, served = own_source, own_served
    root, middle, tip = source.nodes
    first = checkout(hg, served.url, tmp_path / "job1", "-r", middle[:12],
                     "--timings", "-v")
    facts = timings(first)
    assert facts["cloned"] and facts["node"] == middle
    assert facts["result"] == "ok"
    assert set(facts["steps"]) == {"clone", "update", "verify", "disk"}
    assert parent(hg, tmp_path / "job1") == middle
    assert len(network_clones(served.log)) == 1
    assert "(disk: pooled store" in first.stdout

    second = checkout(hg, served.url, tmp_path / "job2", "-b", "default")
    assert "(sharing from existing pooled repository %s)" % root \
        in second.stdout
    assert parent(hg, tmp_path / "job2") == tip
    assert len(network_clones(served.log)) == 1

    pushed = hg_commit(hg, source, {"src/new.py": "new\n"}, "release 3")
    (tmp_path / "job1" / "build-output.o").write_text("stale\n")
    # the pull takes DEST's lock before the store's, as Mercurial requires
    third = checkout(hg, served.url, tmp_path / "job1", "-r", pushed,
                     "--purge", "--timings", "--config",
                     "devel.all-warnings=true")
    assert "devel-warn" not in third.stderr, third.stderr
    assert "(pulling to obtain %s)" % pushed in third.stdout
    assert timings(third)["pulled"]
    assert "purge" in timings(third)["steps"]
    assert not (tmp_path / "job1" / "build-output.o").exists()
    assert parent(hg, tmp_path / "job1") == pushed
    assert hg("status", "-mardui", cwd=tmp_path / "job1") == ""
    assert len(network_clones(served.log)) == 2

    assert os.listdir(tmp_path / "pool") == [root]
    for job in ("job1", "job2"):
        shared = (tmp_path / job / ".hg" / "sharedpath").read_text()
        assert shared == str(tmp_path / "pool" / root / ".hg")
    hg("verify", "-q", cwd=tmp_path / "pool" / root)


def test_help_lists_behaviours_and_settings(hg):
    page = " ".join(hg("help", "sharepool").split())
    for text in ("share.pool", "revision 0", "stream clone", "clone bundles",
                 "abandoned transaction", "--purge", "--timings",
                 "sharepool.network-attempts", "sharepool.retry-backoff",
                 "sharepool.retry-jitter-min", "sharepool.lock-timeout",
                 "sharepool.network-deadline", "network-deadline = 3600",
                 "private-cache = true", "foreign-lock-grace = 600",
                 "robustcheckout.retryjittermin", "PERFHERDER_DATA",
                 "hg status"):
        assert text in page, text
    options = hg("help", "robustcheckout")
    for option in ("--upstream", "--revision", "--branch", "--purge",
                   "--sharebase", "--networkattempts", "--sparseprofile",
                   "--noupdate", "--timings", "--networkdeadline"):
        assert option in options, option


def test_sparse_profile_and_noupdate(hg, source, served, tmp_path):
    sparse = checkout(hg, served.url, tmp_path / "sparse", "-b", "default",
                      "--sparseprofile", SPARSE_PROFILE)
    assert "(setting sparse config to profile %s)" % SPARSE_PROFILE \
        in sparse.stdout
    assert sorted(os.listdir(tmp_path / "sparse")) == [".hg", "docs"]
    again = checkout(hg, served.url, tmp_path / "sparse", "-r",
                     source.nodes[0], "--sparseprofile", SPARSE_PROFILE)
    assert "already set" in again.stdout
    # the dirstate tracks the profile's files only, as it should
    assert "(working directory state" not in again.stderr
    assert parent(hg, tmp_path / "sparse") == source.nodes[0]

    bare = checkout(hg, served.url, tmp_path / "bare", "-U", "-b", "default",
                    "-q")
    # -q hides Mercurial's chatter, not the lines robustcheckout writes
    assert bare.stdout.startswith("ensuring ")
    assert "(skipping update since `-U` was passed)" in bare.stdout
    assert os.listdir(tmp_path / "bare") == [".hg"]
    refused = checkout(hg, served.url, tmp_path / "bare", "-b", "default",
                       "--sparseprofile", SPARSE_PROFILE, check=False)
    assert abort_line(refused) == ("abort: cannot enable sparse profile on "
                                   "existing non-sparse checkout")


def test_switching_sparse_profile_with_purge(hg, own_source, own_served,
                                             tmp_path):
    """Another profile replaces the first one in a working directory (in
    Mercurial's dirstate change, so no crash), and --purge also removes
    what lies outside the profile."""
    source, served = own_source, own_served
    tip = hg_commit(hg, source,
                       {"profiles/src.sparse": "[include]\nsrc/\n"},
                       "second profile")
    dest = tmp_path / "co"
    checkout(hg, served.url, dest, "-r", tip, "--sparseprofile",
             SPARSE_PROFILE)
    for stray in ("docs/stray.o", "src/stray.o", "elsewhere/stray.o"):
        (dest / stray).parent.mkdir(exist_ok=True)
        (dest / stray).write_text("build output\n")
    proc = checkout(hg, served.url, dest, "-r", tip, "--purge",
                    "--sparseprofile", "profiles/src.sparse", "--config",
                    "devel.all-warnings=true")
    assert "(replacing existing sparse config with profile " \
        "profiles/src.sparse)" in proc.stdout
    assert "files added, " in proc.stdout
    assert "devel-warn" not in proc.stderr, proc.stderr
    assert sorted(os.listdir(dest)) == [".hg", "src"]
    assert not (dest / "src" / "stray.o").exists()
    assert hg("status", "--all", cwd=dest).split()[::2] == ["C"] * 8


def test_share_is_loaded_and_perfherder_line(hg, source, served, tmp_path):
    """Enabled alone, the extension loads share (users of a checkout run
    `hg share` commands there), and prints the PERFHERDER_DATA line that
    Treeherder ingests when TASKCLUSTER_INSTANCE_TYPE is set."""
    alone = tmp_path / "hgrc"
    alone.write_text("[extensions]\nrobustcheckout =\n")
    env = dict(hg.env, HGRCPATH=str(alone),
               TASKCLUSTER_INSTANCE_TYPE="c5.4xlarge")
    proc = subprocess.run(
        [hg.binary, "robustcheckout", "--sharebase", str(tmp_path / "pool"),
         "-r", source.nodes[1], served.url, str(tmp_path / "co")],
        env=env, capture_output=True, text=True, check=True)
    assert proc.stderr.startswith("(using Mercurial ")
    (line,) = [line for line in proc.stdout.splitlines()
               if line.startswith("PERFHERDER_DATA: ")]
    data = json.loads(line.split(": ", 1)[1])
    assert data["framework"] == {"name": "vcs"}
    assert [suite["name"] for suite in data["suites"]] == [
        "clone", "update", "overall", "overall_clone",
        "overall_clone_fullcheckout"]
    assert {suite["extraOptions"][0] for suite in data["suites"]} == {
        "c5.4xlarge"}
    subprocess.run([hg.binary, "share", "-U", str(tmp_path / "co"),
                    str(tmp_path / "again")], env=env, check=True,
                   capture_output=True)
    # under Mozilla's name the cache is private to this machine: a lock
    # left by a killed task's old container is taken over at once
    foreign_lock(tmp_path / "co" / ".hg" / "wlock")
    again = subprocess.run(
        [hg.binary, "robustcheckout", "--sharebase", str(tmp_path / "pool"),
         "-r", source.nodes[2], served.url, str(tmp_path / "co")],
        env=env, capture_output=True, text=True, check=True)
    assert STALE_WLOCK in again.stderr and "(waiting" not in again.stderr
    # enabled under both names, the command is defined once
    alone.write_text("[extensions]\nrobustcheckout =\nsharepool =\n")
    both = subprocess.run([hg.binary, "help", "robustcheckout"], env=env,
                          capture_output=True, text=True, check=True)
    assert both.stderr == ""


# Bad input -------------------------------------------------------------------

DEADLINE_REFUSED = (r"abort: the network deadline must be a positive "
                    r"number of seconds, at most a year$")


@pytest.mark.parametrize("args, expected", [
    # robustcheckout's line, as it is (see
    # test_robustcheckout_unknown_revision_prints_mozillas_abort)
    (["-r", "123456789abc"], r"abort: unknown revision '123456789abc'$"),
    (["-b", "no-such-branch"], r"abort: unknown revision 'no-such-branch'$"),
    (["-r", "12345"], r"abort: --revision must be a SHA-1 fragment 12-40 "
                      r"characters long$"),
    ([], r"abort: must specify one of --revision or --branch$"),
    (["-r", "123456789abc", "-b", "default"],
     r"abort: cannot specify both --revision and --branch$"),
    (["-b", "default", "--sparseprofile", "missing.sparse"],
     r"abort: sparse profile missing\.sparse does not exist at revision "
     r"[0-9a-f]{40}$"),
    (["-b", "default", "--networkdeadline", "-5"],
     DEADLINE_REFUSED),
    (["-b", "default", "--config", "sharepool.network-deadline=0"],
     DEADLINE_REFUSED),
    # issue 27, an outside tester: a deadline past a time_t's range
    # crashed the watchdog thread, leaving the step without a deadline
    (["-b", "default", "--config", "sharepool.network-deadline=inf"],
     DEADLINE_REFUSED),
    (["-b", "default", "--networkdeadline", "99999999999999999999"],
     DEADLINE_REFUSED),
])
def test_bad_input_aborts_with_one_line(hg, served, tmp_path, args,
                                        expected):
    """robustcheckout's messages, and its exit code: 255, not the 10 of
    Mercurial's usage errors."""
    proc = checkout(hg, served.url, tmp_path / "co", *args, check=False)
    assert re.match(expected, abort_line(proc)), proc.stderr
    assert proc.returncode == 255


@pytest.mark.parametrize("args", [
    [], ["-r", "123456789abc", "-b", "default"], ["-r", "default"]])
def test_request_rules_print_robustcheckouts_stderr_exactly(
        hg, served, tmp_path, args):
    """Upstream's test-revision-branch.t compares the whole of stderr: a
    hint line after the abort (which the Git side once had) fails it."""
    proc = checkout(hg, served.url, tmp_path / "co", *args, check=False)
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("abort: ")


def test_ambiguous_short_hash_aborts(hg, own_source, own_served, tmp_path):
    """A 12-digit prefix that is also a bookmark pointing elsewhere names
    two revisions: robustcheckout refuses to guess, whether the store has
    the revision yet or not."""
    source, served = own_source, own_served
    # the nodes carry the commit time; hg refuses a bookmark named by
    # digits alone, so the prefix is taken from a node whose first 12
    # characters hold a letter (all three all-digit: about 1 in 10**7)
    named, other = next((node, source.nodes[i - 1])
                        for i, node in enumerate(source.nodes)
                        if not node[:12].isdigit())
    hg("bookmark", "-r", other, named[:12], cwd=source)
    for attempt in ("empty pool", "warm pool"):
        proc = checkout(hg, served.url, tmp_path / "co", "-r", named[:12],
                        check=False)
        assert abort_line(proc) == ("abort: --revision argument is "
                                    "ambiguous"), attempt
        assert proc.returncode == 255
        checkout(hg, served.url, tmp_path / "co", "-r", named)
    # a branch whose name looks like a node is no node
    hg("branch", "-q", "abcdef0123456", cwd=source)
    hg_commit(hg, source, {"b": "on a branch\n"}, "branch")
    proc = checkout(hg, served.url, tmp_path / "co", "-r", "abcdef0123456",
                    check=False)
    assert abort_line(proc) == "abort: --revision argument is ambiguous"
    assert "(must be the first 12+ characters of a SHA-1 fragment)" \
        in proc.stderr


def test_no_pool_configured(hg, served, tmp_path):
    proc = hg.proc("robustcheckout", "-b", "default", served.url,
                   tmp_path / "co")
    assert abort_line(proc) == ("abort: share base directory not defined; "
                                "refusing to operate")
    assert "share.pool" in proc.stderr


@pytest.mark.parametrize("purge", [True, False])
def test_dirstate_entry_renamed_by_a_flipped_byte_is_rebuilt(
        hg, source, served, tmp_path, purge):
    """issue 18's campaign: a byte flipped in a file name in DEST's
    dirstate still parses, and the file, unchanged between the two
    revisions, was no longer tracked: purge deleted it, the update took it
    for unchanged, and the checkout finished clean without it (without
    --purge, the file was left untracked).  Now the entries that disagree
    with the parent's manifest are rebuilt before purge and update."""
    dest = tmp_path / "co"
    flags = ["--purge"] if purge else []
    checkout(hg, served.url, dest, "-r", source.nodes[0], *flags)
    dirstate = dest / ".hg" / "dirstate"
    data = dirstate.read_bytes()
    name = b"src/module0.py"  # the same in every revision
    assert data.count(name) == 1  # dirstate-v1: entries hold the names
    dirstate.write_bytes(data.replace(name, b"src/module0.px"))
    proc = checkout(hg, served.url, dest, "-r", source.nodes[2], *flags)
    assert ("(working directory state disagrees with its parent's files: "
            "1 untracked, 1 tracked but not in it; rebuilding those "
            "entries)") in proc.stderr
    assert parent(hg, dest) == source.nodes[2]
    assert hg("status", "-mardui", cwd=dest) == ""
    assert hg("files", cwd=dest) == hg("files", "-r", source.nodes[2],
                                       cwd=source)
    assert (dest / "src/module0.py").read_text() == "x = 0\n"
    again = checkout(hg, served.url, dest, "-r", source.nodes[2], *flags)
    assert "disagrees" not in again.stderr


def call_counter(tmp_path, name, wrapped, when="True"):
    """hg options loading an extension that counts the calls of
    ``wrapped`` (``module.Class.method``, from mercurial) for which
    ``when`` (over ``args``) holds, and appends each command's count as a
    line to the file ``tmp_path / name``."""
    module, owner, function = wrapped.rsplit(".", 2)
    code = tmp_path / ("%s.py" % name)
    code.write_text(
        "import atexit\n"
        "from mercurial import extensions, %s\n"
        "calls = []\n"
        "def counted(orig, *args, **kwargs):\n"
        "    if %s:\n"
        "        calls.append(1)\n"
        "    return orig(*args, **kwargs)\n"
        "def uisetup(ui):\n"
        "    extensions.wrapfunction(%s.%s, %r, counted)\n"
        "    path = ui.config(b'callcount', b'file')\n"
        "    atexit.register(lambda: open(path, 'a').write('%%d\\n' %% "
        "len(calls)))\n" % (module, when, module, owner, function))
    return ["--config", "extensions.%s=%s" % (name, code),
            "--config", "callcount.file=%s" % (tmp_path / name)]


def test_reuse_with_purge_walks_the_tree_once(hg, own_source, own_served,
                                             tmp_path):
    """A new checkout walks only the empty directory, and reusing one with
    --purge takes one status of the whole tree:
    purge removes the unknown and ignored files it lists (and the
    directories they leave empty), the update starts from it instead of
    walking again, and the verification looks again only at the files the
    update wrote, restored or removed -- which it still checks: a file an
    update hook changed afterwards is found, and DEST checked out anew."""
    source, served = own_source, own_served
    dest = tmp_path / "co"
    (tmp_path / "hgignore").write_text("syntax: glob\n*.pyc\n")
    # the statuses of the whole working directory
    counted = ["--config", "ui.ignore=%s" % (tmp_path / "hgignore"),
               *call_counter(tmp_path, "walks", "dirstate.dirstate.status",
                             "args[1].always()")]
    # a new checkout: the update's status of the empty directory, and no
    # other (the tree the update wrote is checked against its dirstate)
    checkout(hg, served.url, dest, "-r", source.nodes[0], *counted)
    assert (tmp_path / "walks").read_text() == "1\n"
    (tmp_path / "walks").unlink()
    for name in ("build/obj/a.o", "src/cache.pyc"):
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).write_text("build output\n")
    (dest / "src/module0.py").write_text("edited\n")  # same in nodes[2]
    (dest / "docs/readme.txt").unlink()
    proc = checkout(hg, served.url, dest, "-r", source.nodes[2], "--purge",
                    "--verbose", *counted)
    # 2 files, then build/obj, build and docs (emptied by the deleted
    # file), as hg purge counts them
    assert "(purged 5 files)" in proc.stdout
    assert (tmp_path / "walks").read_text() == "1\n"
    assert "(verified: working directory is %s and clean)" % (
        source.nodes[2][:12]) in proc.stdout
    assert sorted(os.listdir(dest)) == [".hg", "docs", "profiles", "src"]
    assert (dest / "src/module0.py").read_text() == "x = 0\n"
    assert parent(hg, dest) == source.nodes[2]
    assert hg("status", "-mardui", *counted[:2], cwd=dest) == ""

    once = "test -e %s || { touch %s; echo changed > src/module1.py; }" % (
        tmp_path / "hooked", tmp_path / "hooked")
    proc = checkout(hg, served.url, dest, "-r", source.nodes[1], "--purge",
                    "--config", "hooks.update=%s" % once)
    assert ("(working directory not clean after update: 1 modified; "
            "deleting destination)") in proc.stderr
    assert parent(hg, dest) == source.nodes[1]
    assert hg("status", "-mardui", cwd=dest) == ""
    assert (dest / "src/module1.py").read_text() == "x = 1\n"


def test_a_new_checkout_looks_at_each_directory_once(hg, tmp_path):
    """Issue 30 item 2: writing a new checkout, core's update audits each
    file's path twice and looks at every directory above it each time for
    a link and a ``.hg`` (40 files three directories deep: 240 checks); in
    a checkout this run created empty, the path is audited once, and a
    directory's ``.hg`` looked for when it is first met."""
    source = tmp_path / "src"
    hg("init", source)
    hg_commit(hg, source, {"a/b/c/f%d.txt" % n: "%d\n" % n
                           for n in range(40)}, "deep")
    # the file system checks of the path auditor: an lstat, and a look
    # for .hg, of each directory above a path
    count = tmp_path / "checks"
    counted = [*call_counter(tmp_path, "checks",
                             "pathutil.pathauditor._checkfs_exists"),
               "--config", "worker.enabled=false"]
    checkout(hg, str(source), tmp_path / "co", "-b", "default", *counted)
    # fewer than one a file (the run's other paths, such as .hgignore,
    # are audited too)
    assert int(count.read_text()) < 40
    count.unlink()
    assert hg("status", "-mardu", cwd=tmp_path / "co") == ""
    hg("update", "-q", "null", "--config", "worker.enabled=false",
       cwd=tmp_path / "co")
    hg("update", "-q", "tip", *counted[:4], "--config",
       "worker.enabled=false", cwd=tmp_path / "co")
    assert int(count.read_text()) >= 240  # core's own update, as before


#: An extension adding ``hg craft NAME=DATA...``: a changeset holding
#: exactly those files, paths unchecked (``NAME@=TARGET`` is a symbolic
#: link), as a hostile server's history may hold them.
CRAFT = """
from mercurial import context, registrar

cmdtable = {}
command = registrar.command(cmdtable)

@command(b'craft', [], b'hg craft NAME=DATA...')
def craft(ui, repo, *specs):
    files = {}
    for spec in specs:
        name, data = spec.split(b'=', 1)
        files[name.rstrip(b'@')] = (data, name.endswith(b'@'))

    def filectx(repo, memctx, path):
        data, link = files[path]
        return context.memfilectx(repo, memctx, path, data, islink=link)

    with repo.wlock(), repo.lock():
        node = context.memctx(repo, (repo[b'.'].node(), None), b'crafted',
                              sorted(files), filectx, user=b'test').commit()
    ui.write(repo[node].hex() + b'\\n')
"""


@pytest.mark.parametrize("crafted, expected", [
    # which abort depends on which worker comes first: the link, then the
    # file refused; or the file's directory, then the link refused
    (["link@=OUTSIDE", "link/planted=owned"],
     r"abort: (path 'link/planted' traverses symbolic link 'link'"
     r"|Directory not empty: '.*/co/link')"),
    (["sub/.hg/hgrc=[hooks]\n"],
     r"abort: path 'sub/\.hg/hgrc' is inside nested repo 'sub'"),
    (["link@=OUTSIDE", "linked/kept=kept"], None),
    # a path Mercurial's directory index refuses: core's update, and
    # the store kept (it was taken for damage and cloned again and again)
    (["link@=OUTSIDE", "link//planted=owned"],
     r"abort: (path 'link//planted' traverses symbolic link 'link'"
     r"|Directory not empty: '.*/co/link')"),
], ids=["link-and-file-below", "nested-hg", "link-beside", "double-slash"])
def test_a_new_checkout_of_a_crafted_revision_writes_only_inside(
        hg, hgserve, tmp_path, crafted, expected):
    """A new checkout skips the update's per-file checks only where they
    cannot fail (above): a served revision holding a symbolic link ``link``
    to a directory outside and a file ``link/planted`` (a path both a file
    and a directory, which no commit makes), or a file below a ``.hg``,
    aborts as core's update does, with 600 other files so that update
    workers write them side by side, and nothing is written outside DEST;
    a link beside a directory is checked out as core does."""
    outside = tmp_path / "outside"
    outside.mkdir()
    source = tmp_path / "src"
    hg("init", source)
    hg_commit(hg, source, {"d%d/f%d.txt" % (n % 30, n): "%d\n" % n
                           for n in range(600)}, "many")
    (tmp_path / "craft.py").write_text(CRAFT)
    node = hg("--config", "extensions.craft=%s" % (tmp_path / "craft.py"),
              "craft", *[spec.replace("OUTSIDE", str(outside))
                         for spec in crafted], cwd=source).strip()
    server = hgserve(source)
    dest = tmp_path / "co"
    proc = checkout(hg, server.url, dest, "-r", node, check=expected is None)
    assert list(outside.iterdir()) == []
    if expected is None:
        assert os.readlink(dest / "link") == str(outside)
        assert (dest / "linked/kept").read_text() == "kept"
        assert hg("status", "-mardu", cwd=dest) == ""
    else:
        # (a worker's abort first, when update workers wrote the files)
        assert proc.returncode == 255
        assert re.fullmatch(expected, proc.stderr.splitlines()[-1]), \
            proc.stderr
        assert "deleting shared store" not in proc.stderr
        assert not (dest / "sub/.hg").exists()


#: An extension that, as the update is about to write ``swap.before``,
#: swaps its directory (holding the files written before it) for a
#: symbolic link to ``swap.outside``, as another process could while a
#: checkout is written.
SWAPPER = """
import os
from mercurial import context, extensions

def write(orig, self, *args, **kwargs):
    ui = self._repo.ui
    if self._path == ui.config(b'swap', b'before'):
        directory = self._repo.wjoin(os.path.dirname(self._path))
        os.rename(directory, directory + b'.moved')
        os.symlink(ui.config(b'swap', b'outside'), directory)
    return orig(self, *args, **kwargs)

def uisetup(ui):
    extensions.wrapfunction(context.workingfilectx, 'write', write)
"""


def test_a_directory_swapped_for_a_link_during_a_new_checkout_is_not_followed(
        hg, tmp_path):
    """Outside tester (HIGH, on the first version of the new checkout's
    checks, which looked at each directory once): another process swapping
    a directory of DEST for a link to a directory outside while the
    checkout is written had the rest of the files written outside, and the
    run said it succeeded.  Each write looks for a link above it again, as
    core's does: the run aborts with core's line, nothing is written
    outside."""
    source = tmp_path / "src"
    hg("init", source)
    hg_commit(hg, source, {"d/f%03d.txt" % n: "%d\n" % n for n in range(50)},
              "files")
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "swap.py").write_text(SWAPPER)
    proc = checkout(hg, str(source), tmp_path / "co", "-b", "default",
                    "--config", "extensions.swap=%s" % (tmp_path / "swap.py"),
                    "--config", "swap.before=d/f006.txt",
                    "--config", "swap.outside=%s" % outside,
                    "--config", "worker.enabled=false", check=False)
    assert proc.returncode == 255, proc.stdout + proc.stderr
    assert proc.stderr.splitlines()[-1] == \
        "abort: path 'd/f006.txt' traverses symbolic link 'd'", proc.stderr
    assert list(outside.iterdir()) == []


def test_backoff_grows_and_is_jittered():
    attempts = pooling.NetworkAttempts(5, rng=random.Random(1))
    for failures in range(1, 5):
        delay = attempts.delay(failures)
        base = (2 ** failures - 1) * 1.5
        assert base + 1.0 <= delay <= base + 5.0


# Real history -----------------------------------------------------------------

@pytest.mark.slow
def test_real_history_checkouts_match_the_repository(hg, real_hg_repo,
                                                     hgserve, tmp_path):
    server = hgserve(real_hg_repo)
    nodes = hg("log", "-T", "{node}\n", cwd=real_hg_repo).split()
    for node in (nodes[-1], nodes[len(nodes) // 2], nodes[0]):
        checkout(hg, server.url, tmp_path / "co", "-r", node[:12], "--purge")
        expected = hg("files", "-r", node, cwd=real_hg_repo)
        assert hg("files", cwd=tmp_path / "co") == expected
        some = expected.split()[len(expected.split()) // 3]
        assert (tmp_path / "co" / some).read_bytes() == hg(
            "cat", "-r", node, some, cwd=real_hg_repo).encode()
        assert parent(hg, tmp_path / "co") == node


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["filelog index", "dirstate"])
def test_real_history_recovers_from_a_damaged_index_or_dirstate(
        hg, real_hg_repo, hgserve, tmp_path, damage):
    """issue 18: a damaged filelog index in the pool (ValueError from
    Mercurial's C index; the update runs in worker processes) or a garbage
    dirstate in DEST crashed every rerun, the first leaving DEST on the
    old revision with modified files.  Now the rerun repairs and
    finishes, and the run after it finds nothing to repair."""
    server = hgserve(real_hg_repo)
    nodes = hg("log", "-T", "{node}\n", cwd=real_hg_repo).split()[::-1]
    dest, store = tmp_path / "co", tmp_path / "pool" / nodes[0]
    checkout(hg, server.url, dest, "-r", nodes[10])
    if damage == "dirstate":
        garbage_dirstate(dest)
        expected = "(working directory state is unreadable: "
    else:
        # pip/__init__.py holds the version: it changes in every release
        damage_delta_bases(store / ".hg/store/data/pip/____init____.py.i")
        expected = ("(repo corruption: corrupted revlog, revision base "
                    "above revision")
    rerun = checkout(hg, server.url, dest, "-r", nodes[-1], check=False)
    assert rerun.returncode == 0, rerun.stderr
    assert expected in rerun.stderr
    assert hg("id", "--debug", "-i", cwd=dest).strip() == nodes[-1]
    assert hg("status", cwd=dest) == ""
    hg("verify", "-q", cwd=store)
    again = checkout(hg, server.url, dest, "-r", nodes[-1])
    assert "(repo corruption" not in again.stderr
    assert "Traceback" not in again.stderr


# The network step deadline ------------------------------------------------

@pytest.mark.slow  # 20 s: a megabyte of history, served and proxied
def test_a_pull_interrupted_at_its_deadline_rolls_back(hg, hgserve, tmp_path):
    """issue 27: the deadline interrupts Mercurial's HTTP client, which
    runs in this process, while a pull's transaction is open (a megabyte
    of history arrived, its last bytes trickle): the transaction rolls
    back, the store passes hg verify and keeps no journal, and a rerun
    against the healthy server pulls."""
    source = tmp_path / "source"
    hg("init", source)
    first = hg_commit(hg, source, {"readme.txt": "first\n"}, "first")
    rng = random.Random(27)
    for n in range(16):  # incompressible: the stream arrives as it goes
        (source / ("blob%d.bin" % n)).write_bytes(rng.randbytes(65536))
    tip = hg_commit(hg, source, {"readme.txt": "tip\n"}, "a megabyte")
    server = hgserve(source)
    pool, dest = tmp_path / "pool", tmp_path / "co"
    store = pool / first
    hg("clone", "-q", "-U", "-r", first, source, store)
    with FlakyProxy(server.url) as proxy:
        proxy.add(Fault("cmd=getbundle", cut=-2000, trickle=0.5, times=None))
        # a bound for the test only: before the deadline, the pull took
        # as long as the server trickled (17 minutes)
        proc = subprocess.run(
            [hg.binary, "robustcheckout", "--sharebase", pool,
             "--networkdeadline", "2", "--networkattempts", "1", "-r", tip,
             proxy.url, dest],
            env=hg.env, capture_output=True, text=True, timeout=60)
    assert abort_line(proc) == ("abort: reached maximum number of network "
                                "attempts; giving up"), proc.stderr
    assert ("pull exceeded the network deadline of 2 seconds "
            "(sharepool.network-deadline); interrupted") in proc.stderr
    assert "transaction abort!" in proc.stderr
    assert "rollback completed" in proc.stderr
    assert not (store / ".hg" / "store" / "journal").exists()
    assert not os.path.lexists(store / ".hg" / "store" / "lock")
    hg("verify", "-q", cwd=store)
    assert hg("log", "-T", "{node}\n", cwd=store).split() == [first]
    again = checkout(hg, server.url, dest, "-r", tip)
    assert "(abandoned transaction found" not in again.stderr
    assert parent(hg, dest) == tip
    hg("verify", "-q", cwd=store)


def test_a_garbled_lookup_answer_is_a_network_failure(hg, served, tmp_path):
    """Found by the campaign (a server that lies): a lookup answer whose
    node is not hex ended robustcheckout in a binascii.Error traceback.
    It is a bad response now, retried like any network failure."""
    with FlakyProxy(served.url) as proxy:
        # byte 5 is in the node of "1 <node>\n"
        proxy.add(Fault("cmd=lookup", flip=[5]))
        proc = checkout(hg, proxy.url, tmp_path / "co", "-b", "default")
    assert len(proxy.applied()) == 1
    assert ("bad response from server: malformed answer to lookup: "
            "Non-hexadecimal digit found") in proc.stderr
    assert "(retrying after network failure on attempt 1 of 3)" \
        in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_destination_that_is_the_source_or_a_store_is_refused(
        hg, served, tmp_path):
    """Issue 27, an outside tester: DEST is no share, so robustcheckout
    removed it -- when DEST was the local source repository, its history
    and uncommitted work went with it; when DEST was a pooled store, the
    store every share uses was removed outside the pool's lock.  Both are
    refused before anything is touched."""
    source = tmp_path / "src"
    hg("init", source)
    hg_commit(hg, source, {"readme.txt": "one\n"}, "one")
    (source / "wip.txt").write_text("uncommitted\n")
    for dest in (source, source / "sub"):
        proc = subprocess.run(
            [hg.binary, "robustcheckout", "--sharebase", tmp_path / "pool",
             "-b", "default", source, dest], env=hg.env,
            capture_output=True, text=True)
        assert abort_line(proc).endswith(
            "is or holds the source; refusing to replace it"), proc.stderr
        assert proc.returncode == 255
    assert (source / "wip.txt").read_text() == "uncommitted\n"
    hg("verify", "-q", cwd=source)
    pool = tmp_path / "pool"
    checkout(hg, served.url, tmp_path / "co", "-b", "default")
    (store,) = [path for path in pool.iterdir() if path.is_dir()]
    proc = checkout(hg, served.url, store, "-b", "default", pool=pool,
                    check=False)
    assert abort_line(proc).endswith(
        "is or holds the share base; refusing to replace it"), proc.stderr
    hg("verify", "-q", cwd=store)


#: Mozilla's robustcheckout (version-control-tools), where
#: contrib/robustcheckout_suite.py is pointed at it.
MOZILLA_ROBUSTCHECKOUT = "/tmp/vct/hgext/robustcheckout"
ALL_EXTENSIONS = ("zstdstore", "wirezstd", "bundlegen", "sharepool",
                  "commitid", "pastbytes", "wirecache")


@pytest.mark.parametrize("revision", [("-r", "0123456789ab"),
                                      ("-b", "nosuch")],
                         ids=["node", "branch"])
def test_robustcheckout_unknown_revision_prints_mozillas_abort(
        hg, hgserve, tmp_path, revision):
    """Finding (drop-in): for a revision the server does not have,
    Mozilla's robustcheckout ends with ``abort: unknown revision
    '0123456789ab'`` (exit 255); ours, with every extension enabled,
    prints ``abort: 0123456789ab not found on URL: unknown revision
    '0123456789ab'`` and a hint line, so a CI script that matches
    Mozilla's line (to tell "not pushed yet" from a network failure and
    retry) no longer sees it."""
    src = tmp_path / "src"
    hg("init", src)
    (src / "f").write_text("1\n")
    hg("-R", src, "commit", "-q", "-A", "-m", "one", "-u", "t")
    server = hgserve(src)
    config = [arg for name in ALL_EXTENSIONS
              for arg in ("--config", "extensions.%s=" % name)]
    ours = hg.proc(*config, "robustcheckout", "--sharebase",
                   tmp_path / "pool", *revision, server.url, tmp_path / "co")
    expected = "abort: unknown revision '%s'" % revision[1]
    if os.path.isdir(MOZILLA_ROBUSTCHECKOUT):
        theirs = hg.proc("--config", "extensions.robustcheckout=%s"
                         % MOZILLA_ROBUSTCHECKOUT, "robustcheckout",
                         "--sharebase", tmp_path / "pool-moz", *revision,
                         server.url, tmp_path / "co-moz")
        assert theirs.returncode == 255
        assert theirs.stderr.splitlines()[-1] == expected
    assert ours.returncode == 255
    assert [line for line in ours.stderr.splitlines()
            if not line.startswith("(using Mercurial")] == [expected]
