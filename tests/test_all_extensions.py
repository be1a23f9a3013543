"""History editing with every extension of the suite enabled at once, as
users run it: amend, rebase (in memory and on disk), histedit, strip, graft,
shelve, absorb and split on a draft series above real history (the pip
releases) whose store uses the ``zstd-dict`` engine.

After each workflow the repository passes ``hg verify``, holds exactly the
changesets the workflow should leave, every draft carries one commit ID
(distinct but for a graft's copy), and every backup bundle Mercurial wrote
is readable by a Mercurial without our extensions.
"""

import collections
import inspect
import json
import os
import subprocess
import sys

import pytest

from vcsperf.core.commitid import find_ids
from vcsperf.harness import tools

SUITE = ("zstdstore", "wirezstd", "bundlegen", "sharepool", "commitid",
         "pastbytes", "wirecache")

HGRC = """[ui]
interactive = false
editor = true
[extensions]
%s
rebase =
histedit =
absorb =
split =
strip =
""" % "".join("%s =\n" % name for name in SUITE)


@pytest.fixture(scope="module")
def dict_history(real_hg_repo_cached, tmp_path_factory):
    """The real history upgraded to zstd-dict, trained and recompressed,
    with every changeset public (built once for the module)."""
    base = tmp_path_factory.mktemp("dict-history")
    hgrc = base / "hgrc"
    hgrc.write_text(HGRC)
    env = tools.isolated_env(str(base), str(hgrc))
    repo = base / "repo"
    tools.hg(["clone", "-q", "-U", real_hg_repo_cached, repo], env)
    for args in (["debugupgraderepo", "-q", "--run", "--no-backup",
                  "--config", "format.revlog-compression=zstd-dict"],
                 ["zstd-train"], ["zstd-recompress"],
                 ["phase", "--public", "-r", "tip"]):
        tools.hg(args, env, cwd=repo)
    return repo


@pytest.fixture
def series(dict_history, hg, hgrc, tmp_path):
    """A working copy of the real history with three draft changesets,
    each changing its own real source file; returns (repo, files)."""
    hgrc.write_text(HGRC)
    repo = tmp_path / "work"
    hg("clone", "-q", dict_history, repo)
    assert "exp-compression-zstd-dict" in \
        (repo / ".hg" / "store" / "requires").read_text().split()
    files = sorted(f for f in hg("files", "-r", ".", cwd=repo).split()
                   if f.endswith(".py"))[:3]
    for number, name in enumerate(files, 1):
        with open(repo / name, "a") as fh:
            fh.write("# draft change %d\n" % number)
        hg("commit", "-qm", "Change %s" % name, cwd=repo)
    assert len(drafts(hg, repo)) == 3
    return repo, files


def drafts(hg, repo):
    """(node, commit ID list) of every draft changeset, in order."""
    out = hg("log", "-r", "draft()", "-T", "{node}\\0{desc}\\0", cwd=repo)
    fields = out.split("\0")[:-1]
    return [(node, find_ids(desc))
            for node, desc in zip(fields[::2], fields[1::2])]


def node(hg, repo, rev):
    return hg("log", "-r", rev, "-T", "{node}", cwd=repo)


def exists(hg, repo, node_):
    return hg.proc("log", "--hidden", "-r", node_, cwd=repo).returncode == 0


def check_result(hg, repo, count, copies=0):
    """The repository verifies, holds ``count`` drafts, each with one ID,
    only ``copies`` of them sharing an ID with another; backup bundles
    decode with a Mercurial that loads none of our extensions."""
    hg("verify", "-q", cwd=repo)
    series_ = drafts(hg, repo)
    assert len(series_) == count
    assert all(len(ids) == 1 for _, ids in series_), series_
    counts = collections.Counter(ids[0] for _, ids in series_)
    assert sum(n - 1 for n in counts.values()) == copies
    stock = dict(hg.env, HGRCPATH="")
    for name in backups(repo):
        out = tools.run([hg.binary, "debugbundle",
                         repo / ".hg" / "strip-backup" / name], stock)
        assert "changegroup" in out
    return series_


def backups(repo):
    path = repo / ".hg" / "strip-backup"
    return sorted(os.listdir(path)) if path.is_dir() else []


@pytest.mark.slow
def test_amend(hg, series):
    repo, files = series
    old_node, old_ids = drafts(hg, repo)[-1]
    with open(repo / files[2], "a") as fh:
        fh.write("# amended\n")
    hg("commit", "--amend", "-q", cwd=repo)
    new = check_result(hg, repo, 3)
    assert new[-1][1] == old_ids and new[-1][0] != old_node
    # Without evolution the old changeset is stripped, with a backup.
    assert not exists(hg, repo, old_node)
    assert [name for name in backups(repo) if name.endswith("-amend.hg")]


@pytest.mark.slow
@pytest.mark.parametrize("inmemory", ["yes", "no"])
def test_rebase(hg, series, inmemory):
    repo, files = series
    before = drafts(hg, repo)
    first, _, third = (n for n, _ in before)
    hg("rebase", "-q", "-r", third, "-d", first, "--config",
       "rebase.experimental.inmemory=%s" % inmemory, cwd=repo)
    after = check_result(hg, repo, 3)
    assert sorted(ids for _, ids in after) == sorted(ids for _, ids in before)
    assert not exists(hg, repo, third)
    moved = node(hg, repo, "commitid(%s)" % before[2][1][0])
    assert node(hg, repo, "p1(%s)" % moved) == first
    assert backups(repo)


@pytest.mark.slow
def test_histedit_reorder_and_fold(hg, series, tmp_path):
    repo, files = series
    before = drafts(hg, repo)
    first, second, third = (n for n, _ in before)
    rules = tmp_path / "rules"
    rules.write_text("pick %s\npick %s\nfold %s\n" % (third, first, second))
    hg("histedit", "-q", "--commands", rules, first, cwd=repo)
    after = check_result(hg, repo, 2)
    # The fold keeps the first changeset's ID.
    assert [ids for _, ids in after] == [before[2][1], before[0][1]]
    assert not exists(hg, repo, first)
    for number, name in enumerate(files, 1):
        assert ("# draft change %d\n" % number) in \
            hg("cat", "-r", "tip", name, cwd=repo)
    assert backups(repo)


@pytest.mark.slow
def test_strip(hg, series):
    repo, _ = series
    before = drafts(hg, repo)
    hg("strip", "-q", "-r", before[1][0], cwd=repo)
    after = check_result(hg, repo, 1)
    assert after == before[:1]
    assert len(backups(repo)) == 1
    # The backup restores what was stripped.
    hg("unbundle", "-q", repo / ".hg" / "strip-backup" / backups(repo)[0],
       cwd=repo)
    assert check_result(hg, repo, 3) == before


@pytest.mark.slow
def test_graft(hg, series):
    repo, files = series
    before = drafts(hg, repo)
    hg("update", "-q", "-r", "public()", cwd=repo)
    hg("graft", "-q", "-r", before[1][0], cwd=repo)
    after = check_result(hg, repo, 4, copies=1)
    assert after[-1][1] == before[1][1]
    assert "# draft change 2\n" in hg("cat", "-r", ".", files[1], cwd=repo)


@pytest.mark.slow
def test_shelve_and_unshelve(hg, series):
    repo, files = series
    with open(repo / files[0], "a") as fh:
        fh.write("# work in progress\n")
    hg("shelve", "-q", "-m", "wip", cwd=repo)
    assert hg("status", cwd=repo) == ""
    check_result(hg, repo, 3)
    hg("unshelve", "-q", cwd=repo)
    assert hg("status", cwd=repo) == "M %s\n" % files[0]
    assert (repo / files[0]).read_text().endswith("# work in progress\n")
    check_result(hg, repo, 3)


@pytest.mark.slow
def test_absorb(hg, series):
    repo, files = series
    before = drafts(hg, repo)
    for name in (files[0], files[2]):
        text = (repo / name).read_text()
        (repo / name).write_text(text.replace("# draft change",
                                              "# absorbed change"))
    hg("absorb", "-q", "--apply-changes", cwd=repo)
    after = check_result(hg, repo, 3)
    assert [ids for _, ids in after] == [ids for _, ids in before]
    assert "# absorbed change 1\n" in hg("cat", "-r", after[0][0], files[0],
                                         cwd=repo)
    assert hg("status", cwd=repo) == ""


@pytest.mark.slow
def test_split(hg, series):
    repo, files = series
    before = drafts(hg, repo)
    for name in files[:2]:
        with open(repo / name, "a") as fh:
            fh.write("# to split\n")
    hg("commit", "-qm", "Two files at once", cwd=repo)
    proc = subprocess.run(
        [hg.binary, "split", "-q", "-r", ".", "--config",
         "ui.interactive=true"],
        input="y\ny\nn\ny\ny\n", env=hg.env, cwd=repo, capture_output=True,
        text=True)
    assert proc.returncode == 0, proc.stderr
    after = check_result(hg, repo, 5)
    assert after[:3] == before
    assert [hg("log", "-r", n, "-T", "{files}", cwd=repo)
            for n, _ in after[3:]] == files[:2]


# Every wrapper passes on what it does not use --------------------------------

def rejected_parameters(original, wrapper):
    """The parameters of ``original`` that a call through ``wrapper``
    (whose first parameter is ``orig``) could not pass on."""
    wrap = list(inspect.signature(wrapper).parameters.values())[1:]
    kinds = {p.kind for p in wrap}
    named = {p.name for p in wrap}
    missing = []
    for p in inspect.signature(original).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            if p.kind not in kinds:
                missing.append(("*" if p.kind == p.VAR_POSITIONAL else "**")
                               + p.name)
        elif p.name not in named and p.VAR_KEYWORD not in kinds:
            missing.append(p.name)
    return missing


# Run by the venv's interpreter, so that loading the suite leaves this
# process's Mercurial alone: records every wrapfunction call while the
# whole suite loads, and prints what each of our wrappers would reject.
WRAPPER_REPORT = r"""
import inspect, json, os, sys
sys.path.insert(0, %r)
from mercurial import extensions, ui as uimod
from test_all_extensions import rejected_parameters
recorded = []
real = extensions.wrapfunction
def recording(container, name, wrapper):
    recorded.append((container, name, wrapper))
    return real(container, name, wrapper)
extensions.wrapfunction = recording
ui = uimod.ui.load()
for ext in sys.argv[1:]:
    ui.setconfig(b"extensions", ext.encode(), b"")
extensions.loadall(ui)
report = {}
for container, name, wrapper in recorded:
    if "hgext3rd" in inspect.getfile(wrapper).split(os.sep):
        original = getattr(container, name)
        while hasattr(original, "_origfunc"):
            original = original._origfunc
        owner = getattr(container, "__name__", type(container).__name__)
        report["%%s.%%s" %% (owner, name)] = rejected_parameters(original,
                                                               wrapper)
print(json.dumps(report))
""" % os.path.dirname(os.path.abspath(__file__))


def test_every_extension_is_tested_with_the_running_mercurial(hg, hgrc):
    """``hg debugextensions`` shows every extension of the suite (and the
    robustcheckout alias) as tested with this Mercurial's release, from
    the one list of ``hgext3rd._hgcompat``, so that a crash report does
    not blame them as untested."""
    hgrc.write_text(HGRC + "robustcheckout =\n")
    release = ".".join(hg("version", "-T", "{ver}").split(".")[:2])
    tested = {row["name"]: row["testedwith"] for row in
              json.loads(hg("debugextensions", "-T", "json"))}
    ours = {*SUITE, "robustcheckout"}
    assert {name: tested.get(name) for name in ours
            if release not in tested.get(name, [])} == {}


def test_every_wrapper_accepts_every_argument_of_what_it_wraps(env, tmp_path):
    """A wrapper that names the parameters of the function it wraps breaks
    when Mercurial adds one (``allow_internal`` broke amend, rebase and
    strip); checked against the installed Mercurial's own signatures, with
    the extensions whose functions ours wrap loaded too.  (Run outside the
    checkout, so that the installed modules are the ones loaded.)"""
    out = tools.run([sys.executable, "-c", WRAPPER_REPORT, *SUITE, "rebase",
                     "histedit", "absorb", "split", "strip", "convert"], env,
                    cwd=tmp_path)
    report = json.loads(out)
    assert "mercurial.bundle2.writenewbundle" in report
    assert len(report) >= 15, sorted(report)
    assert {name: missing for name, missing in report.items() if missing} \
        == {}


def test_the_check_rejects_a_wrapper_like_the_one_that_broke_amend():
    def original(ui, repo, opts, vfs=None, allow_internal=False):
        pass

    def narrow(orig, ui, repo, opts, vfs=None):
        pass

    def passing(orig, ui, repo, opts, vfs=None, *args, **kwargs):
        pass

    def method(self, cmd, **args):
        pass

    def narrow_method(orig, self, cmd):
        pass

    assert rejected_parameters(original, narrow) == ["allow_internal"]
    assert rejected_parameters(original, passing) == []
    assert rejected_parameters(method, narrow_method) == ["**args"]
