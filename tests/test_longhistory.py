"""The builder of the long histories (``vcsperf.harness.longhistory``) at
a few hundred commits, end to end: a real Git history whose messages
carry Mozilla's trailers is cycled into a Git and a Mercurial form; both
pass ``git fsck`` and ``hg verify``, keep every message (the first pass
byte for byte), give each pass its own keys, which the commit index then
finds (``gitbridge commitid-lookup``, ``hg commitid-lookup``) once each;
a longer build goes on from the shorter one's changesets."""

import json
import os
import subprocess
import sys

import pytest

from vcsperf.core.commitid import message_keys
from vcsperf.harness import longhistory, tools

#: The messages of the source history, oldest first: Mozilla's forms
#: (summary with a bug and reviewers, MozReview and Phabricator
#: trailers, a Gerrit Change-Id), one that is not UTF-8, one of blanks.
MESSAGES = [
    "Bug 1234567 - Make the hook faster; r=gps\n\n"
    "MozReview-Commit-ID: 4Aq2kO7Vx9d\n",
    "Bug 999 - Teach pushlog about obsolescence r=glob\n\n"
    "Some details.\n\n"
    "Differential Revision: https://phabricator.services.mozilla.com/D4242\n",
    "Fix the viewer's zoom (bug 1500000)\n\n"
    "Change-Id: I0123456789abcdef0123456789abcdef01234567\n",
    "Merge pull request #7 from someone/branch\n\nNo key here.\n",
    b"Latin-1 \xe9t\xe9 message\n",
    "   \n",
]


def make_source(path, env):
    subprocess.run(["git", "init", "-q", path], check=True, env=env)
    for number, message in enumerate(MESSAGES):
        with open(os.path.join(path, "f"), "w") as fh:
            fh.write("%d\n" % number)
        subprocess.run(["git", "add", "f"], cwd=path, check=True, env=env)
        data = message if isinstance(message, bytes) else message.encode()
        subprocess.run(["git", "commit", "-q", "--allow-empty-message",
                        "--cleanup=verbatim", "-F", "-"], input=data,
                       cwd=path, check=True, env=dict(
                           env, GIT_AUTHOR_DATE="%d +0000" % (1e9 + number),
                           GIT_COMMITTER_DATE="%d +0000" % (1e9 + number)))


def build(directory, source, commits, env, *options):
    out = subprocess.run(
        [sys.executable, "-m", "vcsperf.harness.longhistory", "--dir",
         directory, "--source", source, "--commits", str(commits),
         *options], env=env, check=True, stdout=subprocess.PIPE,
        text=True).stdout
    return json.loads(out[out.index("\n{") + 1:])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    scratch = str(tmp_path_factory.mktemp("longhistory"))
    env = tools.isolated_env(scratch)
    source = os.path.join(scratch, "source")
    make_source(source, env)
    directory = os.path.join(scratch, "long")
    first = build(directory, source, 100, env, "--chunk", "30")
    summary = build(directory, source, 250, env, "--chunk", "30")
    return directory, env, first, summary


def git_messages(gitdir, env):
    out = subprocess.run(["git", "-C", gitdir, "log", "--reverse", "-z",
                          "--format=%H%n%B", "main"], env=env, check=True,
                         stdout=subprocess.PIPE).stdout
    return [entry.partition(b"\n")[::2] for entry in out.split(b"\0")
            if entry]


@pytest.mark.slow
def test_the_forms_verify_and_keep_every_message(built):
    directory, env, first, summary = built
    # Five messages are usable (the blank one left out; git log gives
    # the Latin-1 one as UTF-8): 250 commits are 50 passes through them.
    assert (summary["messages"], summary["passes"]) == (5, 50)
    # The 250-commit Mercurial form went on from the 100 of the first
    # build; Git's is written again (fast-import takes five minutes a
    # million).
    assert first["hg"]["written"] == 100
    assert summary["hg"]["written"] == 150
    assert summary["hg"]["changesets"] == summary["git"]["commits"] == 250
    gitdir = os.path.join(directory, longhistory.GIT_NAME)
    hgdir = os.path.join(directory, longhistory.HG_NAME)
    subprocess.run(["git", "-C", gitdir, "fsck", "--strict"], env=env,
                   check=True, capture_output=True)
    tools.hg(["verify", "-q"], env, cwd=hgdir)

    commits = git_messages(gitdir, env)
    originals = [m.encode() for m in MESSAGES[:4]] + [
        "Latin-1 \u00e9t\u00e9 message\n".encode()]
    # The first pass is the real messages, byte for byte; hg keeps them
    # as its descriptions do (no trailing newline).
    assert [text for _, text in commits[:5]] == originals
    descriptions = tools.hg(["log", "-r", "0:4", "-T", "{desc}\\0"], env,
                            cwd=hgdir).split("\0")[:-1]
    assert descriptions == [m.decode().rstrip("\n") for m in originals]
    # Each Git commit changes one file of 16; hg says the same, with the
    # same author and date.
    assert tools.run(["git", "-C", gitdir, "ls-tree", "-r", "--name-only",
                      "main"], env).split() == [
        "src/file-%02d.txt" % n for n in range(16)]
    assert tools.hg(["log", "-r", "tip", "-T",
                     "{files} {author} {date|hgdate} {phase}"], env,
                    cwd=hgdir) == "src/file-09.txt %s %d 0 public" % (
        tools.run(["git", "-C", gitdir, "log", "-1", "--format=%an <%ae>",
                   "main"], env).strip(),
        longhistory.EPOCH + 249 * longhistory.STEP)


@pytest.mark.slow
def test_each_pass_has_its_own_keys_and_the_index_finds_them(built):
    directory, env, _, _ = built
    gitdir = os.path.join(directory, longhistory.GIT_NAME)
    hgdir = os.path.join(directory, longhistory.HG_NAME)
    commits = git_messages(gitdir, env)
    carriers = {}
    for sha, text in commits:
        for kind, key in message_keys(text.decode()):
            carriers.setdefault("%s:%s" % (kind, key), []).append(sha)
    # 50 passes, each with the six keys of the first (a bug in each of
    # three summaries, an ID, a review, a Change-Id): no key twice.
    assert len(carriers) == 6 * 50
    assert all(len(shas) == 1 for shas in carriers.values())
    assert "review:D4242" in carriers and \
        "review:D%d" % (4242 + 49 * longhistory.NUMBER_OFFSET) in carriers
    assert "bug:%d" % (999 + 3 * longhistory.NUMBER_OFFSET) in carriers
    assert "id:03q2kO7Vx9d" in carriers  # pass 3 over the first two
    # The lookups find every key, at its one commit.
    keys = sorted(carriers)
    out = subprocess.run(
        [tools.executable("gitbridge"), "commitid-lookup", "-C", gitdir,
         "--json", *keys], env=env, check=True, stdout=subprocess.PIPE,
        text=True).stdout
    assert {entry["key"]: [entry["node"].encode()]
            for entry in json.loads(out)} == carriers
    hgrc = os.path.join(directory, "hgrc")
    with open(hgrc, "w") as fh:
        fh.write("[extensions]\ncommitid =\n")
    hg_env = dict(env, HGRCPATH=hgrc)
    tools.hg(["debugupdatecaches"], hg_env, cwd=hgdir)
    out = tools.hg(["commitid-lookup", "-T", "{key} {node}\\n", *keys],
                   hg_env, cwd=hgdir)
    found = dict(line.rsplit(" ", 1) for line in out.splitlines())
    # The changeset in the place of the Git commit.
    nodes = tools.hg(["log", "-r", "0:", "-T", "{node}\\n"], hg_env,
                     cwd=hgdir).split()
    place = {sha: nodes[rev] for rev, (sha, _) in enumerate(commits)}
    assert found == {key: place[shas[0]] for key, shas in carriers.items()}


@pytest.mark.slow
def test_a_rerun_changes_nothing(built):
    directory, env, _, summary = built
    before = summary["git"], summary["hg"]
    again = build(directory, os.path.join(os.path.dirname(directory),
                                          "source"), 250, env)
    assert (again["git"], again["hg"]) == before


def test_the_passes_move_every_key_kind():
    text = (b"Bug 17 - x (bug 0042); r=a\n\nMozReview-Commit-ID: AbCdEf\n"
            b"Change-Id: Iabcdef0123456789abcdef0123456789abcdef01\n"
            b"Differential Revision: https://phab.example/D5\n")
    assert longhistory.moved(text, 0) == text
    moved = longhistory.moved(text, 63)
    assert message_keys(moved.decode()) == {
        ("bug", "630000017"), ("bug", "630000042"), ("id", "11CdEf"), ("review", "D630000005"),
        ("review", "I003fef0123456789abcdef0123456789abcdef01")}


@pytest.mark.slow
def test_the_benchmark_runs_on_both_forms(built):
    """``vcsperf bench commitindex`` as the 1,000,000-commit run calls it,
    on the small forms: every row of both tables, the Git lookups after
    a fetch of the ``--new`` commits, and neither source moved."""
    directory, env, _, _ = built
    gitdir = os.path.join(directory, longhistory.GIT_NAME)
    hgdir = os.path.join(directory, longhistory.HG_NAME)
    tips = (tools.run(["git", "-C", gitdir, "rev-parse", "main"], env),
            tools.hg(["log", "-r", "tip", "-T", "{node}"], env, cwd=hgdir))
    out = tools.run([tools.executable("vcsperf"), "bench", "commitindex",
                     "--runs", "1", "--new", "20", hgdir, "--git", gitdir],
                    env)
    hg_part, git_part = out.split("\n\n")[:2]
    assert "250 changesets, keys {'bug': 150, 'review': 100, 'id': 50} " \
        "(300)" in hg_part
    for row in ("one lookup by review with core hg (hg log -r 'desc(",
                "| hg pull of 20 changesets |", "| index bytes | | ",
                "| peak memory of the build (hg debugupdatecaches) | | "):
        assert row in hg_part
    assert "250 commits, 300 keys" in git_part
    for row in ("| one lookup by id, fresh process |",
                "| one lookup by review, fresh process |",
                "| one lookup by bug, fresh process |",
                "| 1,000 lookups in one process |",
                "| first lookup (builds the index of all but 20 commits) |",
                "| lookup after a fetch of 20 commits (updates the index) |",
                "| peak memory of the build (commitid-lookup --rebuild) | |"):
        assert row in git_part
    assert (tools.run(["git", "-C", gitdir, "rev-parse", "main"], env),
            tools.hg(["log", "-r", "tip", "-T", "{node}"], env,
                     cwd=hgdir)) == tips


def test_a_source_that_is_no_repository_is_one_abort(tmp_path):
    """A ``--source`` git cannot read ends in one ``abort:`` line and its
    hint, not a traceback."""
    proc = subprocess.run(
        [sys.executable, "-m", "vcsperf.harness.longhistory", "--dir",
         str(tmp_path / "long"), "--commits", "10", "--forms", "git",
         "--source", str(tmp_path / "nowhere")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.returncode == 255, proc.stderr
    assert proc.stderr.startswith("abort: cannot read the messages of ")
    assert "Traceback" not in proc.stderr
