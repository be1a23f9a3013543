"""Commit IDs on Git with the real git: the commit-msg hook and its
installer, the pre-commit framework entry, gitbridge commitid-add, and
mapping across Git and Mercurial by ID."""

import json
import os
import pathlib
import re
import shutil
import stat
import subprocess
import sys
import sysconfig

import pytest

from vcsperf.core.commitid import find_id, find_ids
from vcsperf.harness import tools

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture
def hooked(git, gitrepo, gitbridge):
    """A Git repository with the hook installed and one commit."""
    gitbridge("install-hook", cwd=gitrepo)
    commit(git, gitrepo, "base", "Base")
    return gitrepo


def commit(git, repo, name, message, *options):
    (repo / name).write_text(name + "\n")
    git("add", name, cwd=repo)
    git("commit", "-q", "-m", message, *options, cwd=repo)


def message(git, repo, rev="HEAD"):
    return git("log", "-1", "--format=%B", rev, cwd=repo)


def branch_ids(git, repo, revs):
    out = git("log", "--reverse", "-z", "--format=%B", revs, cwd=repo)
    return [find_ids(m) for m in out.split("\0")[:-1]]


def test_story_git_hook(git, gitrepo, gitbridge):
    """Install the hook; every commit gets an ID; a rebase keeps them."""
    out = gitbridge("install-hook", cwd=gitrepo).stdout
    hook = gitrepo / ".git" / "hooks" / "commit-msg"
    assert out == "installed %s\n" % hook
    assert os.stat(hook).st_mode & stat.S_IXUSR
    commit(git, gitrepo, "base", "Base")
    git("checkout", "-q", "-b", "topic", cwd=gitrepo)
    commit(git, gitrepo, "one", "Add one\n\nSigned-off-by: A <a@b>")
    commit(git, gitrepo, "two", "Add two")
    before = branch_ids(git, gitrepo, "main..topic")
    assert [len(i) for i in before] == [1, 1]
    assert message(git, gitrepo, "HEAD~1") == (
        "Add one\n\nSigned-off-by: A <a@b>\nMozReview-Commit-ID: %s\n\n"
        % before[0][0])
    git("checkout", "-q", "main", cwd=gitrepo)
    commit(git, gitrepo, "other", "Upstream moved")
    git("rebase", "-q", "main", "topic", cwd=gitrepo)
    assert branch_ids(git, gitrepo, "main..topic") == before
    # The same series, mapped by ID.
    old = git("rev-list", "--reverse", "main..topic@{1}", cwd=gitrepo)
    assert len(old.split()) == 2
    mapping = json.loads(gitbridge(
        "commitid-map", "--old", gitrepo, "main~1..topic@{1}", "--new",
        gitrepo, "main..topic", "--json").stdout)
    assert [m["how"] for m in mapping["matches"]] == ["commit-id"] * 2
    assert [m["old"] for m in mapping["matches"]] == old.split()


def test_amend_cherry_pick_and_skips(git, hooked):
    repo = hooked
    commit(git, repo, "one", "Add one")
    first = find_id(message(git, repo))
    (repo / "one").write_text("changed\n")
    git("commit", "-q", "-a", "--amend", "--no-edit", cwd=repo)
    assert find_ids(message(git, repo)) == [first]
    git("checkout", "-q", "-b", "side", "HEAD~1", cwd=repo)
    commit(git, repo, "fix", "fixup! Add one")
    assert message(git, repo) == "fixup! Add one\n\n"
    git("cherry-pick", "main", cwd=repo)
    assert find_ids(message(git, repo)) == [first]
    git("merge", "-q", "--no-ff", "main", "-m", "Merge main", cwd=repo)
    assert message(git, repo) == "Merge main\n\n"
    # A merge concluded by hand after a conflict is skipped too.
    (repo / "one").write_text("conflict\n")
    git("commit", "-q", "-a", "-m", "Conflicting", cwd=repo)
    git("checkout", "-q", "main", cwd=repo)
    (repo / "one").write_text("other\n")
    git("commit", "-q", "-a", "-m", "Other", cwd=repo)
    assert git.proc("merge", "side", cwd=repo).returncode != 0
    (repo / "one").write_text("resolved\n")
    git("commit", "-q", "-a", "--no-edit", cwd=repo)
    assert find_ids(message(git, repo)) == []


def test_editor_comments_and_scissors(git, hooked):
    repo = hooked
    (repo / "one").write_text("one\n")
    git("add", "one", cwd=repo)
    git("-c", "core.editor=sed -i 1s/^/Edited/", "commit", "-q", "-v",
        cwd=repo)
    assert message(git, repo) == "Edited\n\nMozReview-Commit-ID: %s\n\n" % \
        find_id(message(git, repo))
    (repo / "two").write_text("two\n")
    git("add", "two", cwd=repo)
    git("-c", "core.commentChar=;", "-c", "core.editor=sed -i 1s/^/Semi/",
        "commit", "-q", "-v", cwd=repo)
    assert message(git, repo).startswith("Semi\n\nMozReview-Commit-ID: ")


def test_rebase_interactive_squash_and_reword(git, gitbridge, hooked):
    repo = hooked
    for name in ("one", "two", "three"):
        commit(git, repo, name, "Add %s" % name)
    one, two, three = branch_ids(git, repo, "HEAD~3..HEAD")
    # Git runs no commit-msg hook for squash: the message has both IDs...
    git("-c", "sequence.editor=sed -i 2s/^pick/squash/", "-c",
        "core.editor=true", "rebase", "-q", "-i", "HEAD~3", cwd=repo)
    assert branch_ids(git, repo, "HEAD~2..HEAD") == [one + two, three]
    # ... until commitid-add keeps the first.
    out = gitbridge("commitid-add", "--base", "HEAD~2", cwd=repo).stdout
    assert out.startswith("added commit IDs to 1 commits (2 rewritten)")
    assert branch_ids(git, repo, "HEAD~2..HEAD") == [one, three]
    # reword runs the hook: a message left without its line gets a new ID
    # (Git does not tell a hook which commit it rewrites).
    git("-c", "sequence.editor=sed -i 1s/^pick/reword/", "-c",
        "core.editor=sed -i /MozReview/d", "rebase", "-q", "-i", "HEAD~1",
        cwd=repo)
    [[new]] = branch_ids(git, repo, "HEAD~1..HEAD")
    assert new not in (one[0], two[0], three[0])


# Behaves as Gerrit's commit-msg hook does: a Change-Id trailer placed by
# git interpret-trailers (so it joins the trailer block), none when the
# message has one, and a failure said on stdout for an empty message.
GERRIT_LIKE_HOOK = """\
#!/bin/sh
if ! git stripspace --strip-comments < "$1" | grep -q . ; then
    echo "file is empty: $1"
    exit 1
fi
if git interpret-trailers --parse < "$1" | grep -q '^Change-Id: ' ; then
    exit 0
fi
id=$({ git var GIT_COMMITTER_IDENT; cat "$1"; } | git hash-object --stdin)
git interpret-trailers --in-place --trailer "Change-Id: I$id" "$1"
"""


def write_hook(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


def trailers(git, repo, rev="HEAD"):
    """The message's trailer block as git interpret-trailers parses it."""
    path = repo / "parsed-message"
    path.write_text(message(git, repo, rev))
    return git("interpret-trailers", "--parse", path, cwd=repo).splitlines()


def test_install_hook_chains_a_gerrit_style_hook(git, gitrepo, gitbridge):
    hooks = gitrepo / ".git" / "hooks"
    hook, chained = hooks / "commit-msg", hooks / "commit-msg.chained"
    write_hook(hook, GERRIT_LIKE_HOOK)
    out = gitbridge("install-hook", cwd=gitrepo).stdout
    assert out == "chained hook: %s (runs first)\ninstalled %s\n" % (
        chained, hook)
    assert chained.read_text() == GERRIT_LIKE_HOOK
    commit(git, gitrepo, "base", "Base")
    git("commit", "-q", "--amend", "-s", "-m", "Add base\n\nWhy it is.",
        cwd=gitrepo)
    # One trailer block ends the message, holding both IDs.
    text = message(git, gitrepo)
    subject, body, block = text.rstrip("\n").split("\n\n")
    assert (subject, body) == ("Add base", "Why it is.")
    assert block.splitlines() == trailers(git, gitrepo)
    [sign, change, ours] = block.splitlines()
    assert sign == "Signed-off-by: vcsperf test <test@vcsperf.invalid>"
    assert re.fullmatch("Change-Id: I[0-9a-f]{40}", change)
    assert ours == "MozReview-Commit-ID: %s" % find_id(text)
    # Amending keeps both; so does an editor with git commit -v.
    (gitrepo / "base").write_text("changed\n")
    git("commit", "-q", "-a", "--amend", "--no-edit", cwd=gitrepo)
    assert trailers(git, gitrepo) == [sign, change, ours]
    (gitrepo / "two").write_text("two\n")
    git("add", "two", cwd=gitrepo)
    git("-c", "core.editor=sed -i 1s/^/Edited/", "commit", "-q", "-v",
        cwd=gitrepo)
    text = message(git, gitrepo)
    assert text.startswith("Edited\n\nChange-Id: I")
    assert [line.split(":")[0] for line in trailers(git, gitrepo)] == [
        "Change-Id", "MozReview-Commit-ID"]
    # Installing again changes nothing.
    before = hook.read_bytes()
    assert gitbridge("install-hook", cwd=gitrepo).stdout == out
    assert (hook.read_bytes(), chained.read_text()) == (before,
                                                        GERRIT_LIKE_HOOK)
    # The chained hook failing aborts the commit with its message.
    count = git("rev-list", "--count", "HEAD", cwd=gitrepo)
    proc = git.proc("commit", "--allow-empty", "--allow-empty-message",
                    "-m", "", cwd=gitrepo)
    assert proc.returncode == 1
    assert "file is empty: .git/COMMIT_EDITMSG" in proc.stdout + proc.stderr
    assert git("rev-list", "--count", "HEAD", cwd=gitrepo) == count


def test_hook_reinstalled_over_ours_and_uninstall(git, gitrepo, gitbridge):
    """Gerrit's installer run again over our hook: installing ours again
    chains it as before.  Another hook over ours is refused while a
    different one is chained.  Uninstalling puts the chained one back."""
    hooks = gitrepo / ".git" / "hooks"
    hook, chained = hooks / "commit-msg", hooks / "commit-msg.chained"
    write_hook(hook, GERRIT_LIKE_HOOK)
    gitbridge("install-hook", cwd=gitrepo)
    ours = hook.read_text()
    write_hook(hook, GERRIT_LIKE_HOOK)
    gitbridge("install-hook", cwd=gitrepo)
    assert (hook.read_text(), chained.read_text()) == (ours,
                                                       GERRIT_LIKE_HOOK)
    write_hook(hook, "#!/bin/sh\necho another\n")
    proc = gitbridge("install-hook", cwd=gitrepo, check=False)
    assert proc.returncode == 255
    assert proc.stderr == (
        "abort: %s is not gitbridge's hook, and %s is another one\n"
        "(keep the hook to run as commit-msg.chained, remove the other, "
        "then run gitbridge install-hook again)\n" % (hook, chained))
    assert hook.read_text() == "#!/bin/sh\necho another\n"
    assert chained.read_text() == GERRIT_LIKE_HOOK
    proc = gitbridge("uninstall-hook", cwd=gitrepo, check=False)
    assert proc.returncode == 255
    assert proc.stderr.startswith("abort: %s is not gitbridge's hook\n"
                                  % hook)
    write_hook(hook, ours)
    out = gitbridge("uninstall-hook", cwd=gitrepo).stdout
    assert out == "removed gitbridge's hook; the chained hook is back at " \
        "%s\n" % hook
    assert hook.read_text() == GERRIT_LIKE_HOOK and not chained.exists()
    commit(git, gitrepo, "a", "After uninstall")
    assert find_ids(message(git, gitrepo)) == []
    assert trailers(git, gitrepo)[0].startswith("Change-Id: I")
    # Scripts written when a foreign hook needed --force still work.
    gitbridge("install-hook", "--force", cwd=gitrepo)
    assert chained.read_text() == GERRIT_LIKE_HOOK


def test_install_hook_respects_hooks_path(git, gitrepo, gitbridge):
    git("config", "core.hooksPath", "my-hooks", cwd=gitrepo)
    hook = gitrepo / "my-hooks" / "commit-msg"
    write_hook(hook, GERRIT_LIKE_HOOK)
    gitbridge("install-hook", cwd=gitrepo)
    assert (gitrepo / "my-hooks" / "commit-msg.chained").exists()
    assert not (gitrepo / ".git" / "hooks" / "commit-msg").exists()
    commit(git, gitrepo, "a", "With hooksPath")
    assert [line.split(":")[0] for line in trailers(git, gitrepo)] == [
        "Change-Id", "MozReview-Commit-ID"]
    gitbridge("uninstall-hook", cwd=gitrepo)
    hook.unlink()
    proc = gitbridge("uninstall-hook", cwd=gitrepo, check=False)
    assert proc.stderr == "abort: no commit-msg hook in %s\n" % hook.parent


def _venv(path, with_gitbridge=True):
    """A virtualenv at ``path`` whose Python imports this installation's
    gitbridge (through a .pth file) or, without ``with_gitbridge``, has
    none."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", path],
                   check=True)
    python = path / "bin" / "python"
    if with_gitbridge:
        site = subprocess.run(
            [python, "-c", "import sysconfig; "
             "print(sysconfig.get_paths()['purelib'])"], check=True,
            capture_output=True, text=True).stdout.strip()
        pathlib.Path(site, "vcsperf-tests.pth").write_text(
            sysconfig.get_paths()["purelib"] + "\n")
    return python


def test_hook_outlives_its_virtualenv(git, gitrepo, env, tmp_path):
    """The hook names the virtualenv's Python and nothing inside it: a
    rebuilt virtualenv keeps it working; a moved one, or one rebuilt
    without gitbridge, makes it say how to fix it (or use gitbridge from
    PATH)."""
    env["PATH"] = os.pathsep.join(
        d for d in env["PATH"].split(os.pathsep)
        if not os.path.exists(os.path.join(d, "gitbridge")))
    venv = tmp_path / "venv"
    python = _venv(venv)
    subprocess.run([python, "-m", "gitbridge.cli", "install-hook"],
                   cwd=gitrepo, env=env, check=True, capture_output=True)
    commit(git, gitrepo, "a", "First")
    assert find_id(message(git, gitrepo))
    shutil.rmtree(venv)
    _venv(venv)
    commit(git, gitrepo, "b", "Rebuilt")
    assert find_id(message(git, gitrepo))

    def refused(name):
        (gitrepo / name).write_text(name)
        git("add", name, cwd=gitrepo)
        proc = git.proc("commit", "-q", "-m", name, cwd=gitrepo)
        assert proc.returncode == 1
        assert git("log", "-1", "--format=%s", cwd=gitrepo) != name + "\n"
        return proc.stderr

    shutil.rmtree(venv)
    _venv(venv, with_gitbridge=False)
    assert refused("c") == (
        "commit-msg hook: %s cannot import gitbridge (was its virtualenv "
        "moved or rebuilt?)\n(run `gitbridge install-hook` again with the "
        "gitbridge you use now)\n" % python)
    # A gitbridge on PATH (its virtualenv activated) stands in.
    path = env["PATH"]
    env["PATH"] = os.pathsep.join([
        os.path.dirname(tools.executable("gitbridge")), path])
    git("commit", "-q", "-m", "From PATH", cwd=gitrepo)
    assert find_id(message(git, gitrepo))
    env["PATH"] = path
    shutil.rmtree(venv)
    _venv(tmp_path / "moved")
    assert "%s is gone (was its virtualenv moved" % python in refused("d")
    subprocess.run([tmp_path / "moved" / "bin" / "python", "-m",
                    "gitbridge.cli", "install-hook"], cwd=gitrepo, env=env,
                   check=True, capture_output=True)
    git("commit", "-q", "-m", "Moved", cwd=gitrepo)
    assert find_id(message(git, gitrepo))


def test_deterministic_ids(git, gitrepo, gitbridge, tmp_path, env):
    env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = "1700000000 +0000"
    other = tmp_path / "other"
    git("init", "-q", other)
    for repo in (gitrepo, other):
        git("config", "commitid.deterministic", "true", cwd=repo)
        gitbridge("install-hook", cwd=repo)
        commit(git, repo, "a", "Same")
        commit(git, repo, "b", "Same")
    assert branch_ids(git, gitrepo, "HEAD") == branch_ids(git, other, "HEAD")
    assert len({i[0] for i in branch_ids(git, gitrepo, "HEAD")}) == 2


@pytest.mark.parametrize("word", ["always", "on"])
def test_deterministic_takes_mercurials_words(git, gitrepo, gitbridge,
                                              tmp_path, env, word):
    """Issue 28: the hook took ``always`` for false, and ``commitid-add``
    ended in a traceback on any word but true and false (it read git
    config through dulwich); both read ``commitid.deterministic`` in
    Mercurial's words now, as the hg extension does."""
    env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = "1700000000 +0000"
    other = tmp_path / "other"
    git("init", "-q", other)
    for repo in (gitrepo, other):
        git("config", "commitid.deterministic", word, cwd=repo)
        gitbridge("install-hook", cwd=repo)
        commit(git, repo, "a", "Same")
        gitbridge("uninstall-hook", cwd=repo)
        commit(git, repo, "b", "Without the hook")
        gitbridge("commitid-add", "--base", "HEAD~1", cwd=repo)
    ids = branch_ids(git, gitrepo, "HEAD")
    assert ids == branch_ids(git, other, "HEAD")
    assert len({i[0] for i in ids}) == 2


def test_pre_commit_framework_entry(git, gitrepo, env):
    """The manifest passes pre-commit's own validation, and its entry, run
    as pre-commit runs a commit-msg hook, adds the ID."""
    manifest = ROOT / ".pre-commit-hooks.yaml"
    subprocess.run([tools.executable("pre-commit"), "validate-manifest",
                    str(manifest)],
                   env=env, check=True, capture_output=True)
    import yaml
    [hook] = yaml.safe_load(manifest.read_text())
    assert hook["stages"] == ["commit-msg"] and hook["language"] == "python"
    path = gitrepo / ".git" / "COMMIT_EDITMSG"
    path.write_text("Subject\n")
    program, *args = hook["entry"].split()
    subprocess.run([tools.executable(program), *args, ".git/COMMIT_EDITMSG"],
                   cwd=gitrepo, env=env, check=True)
    assert find_ids(path.read_text()) and \
        path.read_text().startswith("Subject\n\nMozReview-Commit-ID: ")


def test_commitid_add_on_a_branch(git, gitrepo, gitbridge):
    commit(git, gitrepo, "base", "Base")
    git("checkout", "-q", "-b", "topic", cwd=gitrepo)
    commit(git, gitrepo, "one", "Add one")
    commit(git, gitrepo, "two", "Add two\n\nMozReview-Commit-ID: kept1234567")
    git("checkout", "-q", "-b", "side", "HEAD~1", cwd=gitrepo)
    commit(git, gitrepo, "side", "Side work")
    git("checkout", "-q", "topic", cwd=gitrepo)
    git("merge", "-q", "--no-ff", "side", "-m", "Merge side", cwd=gitrepo)
    commit(git, gitrepo, "three", "fixup! Add one")
    trees = git("log", "--format=%T %an %ad", "main..topic", cwd=gitrepo)
    old_tip = git("rev-parse", "topic", cwd=gitrepo).strip()

    proc = gitbridge("commitid-add", cwd=gitrepo, check=False)
    assert proc.returncode == 255
    assert proc.stderr.startswith("abort: refs/heads/topic has no upstream")
    out = gitbridge("commitid-add", "--base", "main", cwd=gitrepo).stdout
    assert out.startswith("added commit IDs to 2 commits (5 rewritten): ")
    assert git("log", "--format=%T %an %ad", "main..topic",
               cwd=gitrepo) == trees
    messages = {m.split("\n")[0]: find_ids(m) for m in git(
        "log", "-z", "--format=%B", "main..topic", cwd=gitrepo).split("\0")
        if m}
    assert messages["Add two"] == ["kept1234567"]
    assert len(messages["Add one"]) == len(messages["Side work"]) == 1
    assert messages["Merge side"] == messages["fixup! Add one"] == []
    assert git("rev-parse", "topic@{1}", cwd=gitrepo).strip() == old_tip
    assert git("status", "--porcelain", cwd=gitrepo) == ""
    git("fsck", "--no-progress", cwd=gitrepo)
    # Upstream found from the branch's configuration; nothing left to do.
    git("update-ref", "refs/remotes/origin/main", "main", cwd=gitrepo)
    git("config", "branch.topic.remote", "origin", cwd=gitrepo)
    git("config", "branch.topic.merge", "refs/heads/main", cwd=gitrepo)
    proc = gitbridge("commitid-add", cwd=gitrepo, check=False)
    assert (proc.returncode, proc.stdout) == (1, "no commit needs a "
                                                 "commit ID\n")


def test_git_series_converted_to_hg_maps_by_id(git, hg, hooked, gitbridge,
                                               tmp_path):
    """The same changes in Git and, after hg convert, in Mercurial: every
    commit maps to its counterpart by ID."""
    for name in ("one", "two", "three"):
        commit(git, hooked, name, "Add %s" % name)
    converted = tmp_path / "converted"
    hg("--config", "extensions.convert=", "convert", "-q", hooked,
       converted)
    out = gitbridge("commitid-map", "--old", hooked, "main", "--new",
                    converted, "all()").stdout.splitlines()
    git_nodes = git("rev-list", "--reverse", "main", cwd=hooked).split()
    assert [line.split() for line in out] == [
        [hg_node[:12], git_node[:12], "commit-id"] for hg_node, git_node in
        zip(hg("log", "-r", "all()", "-T", "{node}\\n",
               cwd=converted).split(), git_nodes)]


# Messages on which Git's hook and Mercurial once disagreed (issue 18):
# Mercurial stores a lone "\r" as "\n" and strips white space at the ends
# of lines, so it saw an ID line where the hook saw none and added one.
LINE_RULE_CASES = [("fix\rMozReview-Commit-ID: cr000000001", "cr000000001"),
                   ("fix\r\rMozReview-Commit-ID: cr000000002\r",
                    "cr000000002"),
                   ("fix\n\nMozReview-Commit-ID: vt000000003\v",
                    "vt000000003")]


def hg_suite(hgrc):
    """Every extension of the suite on, as users run them."""
    from test_all_extensions import HGRC
    hgrc.write_text(HGRC)


@pytest.mark.slow
def test_git_hook_and_hg_agree_on_what_a_line_is(git, hg, hgrc, hgrepo,
                                                 hooked):
    hg_suite(hgrc)
    for index, (text, commit_id) in enumerate(LINE_RULE_CASES):
        commit(git, hooked, "f%d" % index, text)
        assert find_ids(message(git, hooked)) == [commit_id]
        (hgrepo / ("f%d" % index)).write_text("x\n")
        hg("commit", "-Aqm", text, cwd=hgrepo)
        stored = hg("log", "-r", ".", "-T", "{desc}", cwd=hgrepo)
        assert find_ids(stored) == [commit_id]
        assert hg("log", "-r", ".", "-T", "{commitid}", cwd=hgrepo) == \
            commit_id


def test_many_duplicate_id_lines_take_linear_time(git, hg, hgrc, hgrepo,
                                                  hooked, env, tmp_path):
    """100,000 copies of one ID line (20,000 once took 4.6 s: quadratic)
    become one, through the hook and through hg commit, in a few seconds
    at most."""
    text = "Fix it\n\n" + "MozReview-Commit-ID: dup00000001\n" * 100000
    path = hooked / ".git" / "COMMIT_EDITMSG"
    path.write_text(text)
    subprocess.run([tools.executable("gitbridge"), "commit-msg", str(path)],
                   cwd=hooked, env=env, check=True, timeout=60)
    assert path.read_text() == "Fix it\n\nMozReview-Commit-ID: dup00000001\n"
    hg_suite(hgrc)
    (tmp_path / "message").write_text(text)
    (hgrepo / "a").write_text("a\n")
    subprocess.run([hg.binary, "commit", "-Aq", "-l", tmp_path / "message"],
                   cwd=hgrepo, env=hg.env, check=True, timeout=60)
    assert hg("log", "-r", ".", "-T", "{desc}", cwd=hgrepo) == \
        "Fix it\n\nMozReview-Commit-ID: dup00000001"
