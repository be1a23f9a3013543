"""Commit IDs on Git with the real git: the commit-msg hook and its
installer, the pre-commit framework entry, gitbridge commitid-add, and
mapping across Git and Mercurial by ID."""

import json
import os
import pathlib
import stat
import subprocess

import pytest

from vcsperf import tools
from vcsperf.commitids import find_id, find_ids

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


def test_install_hook_respects_hooks_path_and_foreign_hooks(
        git, gitrepo, gitbridge):
    git("config", "core.hooksPath", "my-hooks", cwd=gitrepo)
    gitbridge("install-hook", cwd=gitrepo)
    hook = gitrepo / "my-hooks" / "commit-msg"
    assert hook.exists()
    assert not (gitrepo / ".git" / "hooks" / "commit-msg").exists()
    commit(git, gitrepo, "a", "With hooksPath")
    assert find_id(message(git, gitrepo))
    # Reinstalling over our own hook is fine; a foreign one is kept.
    gitbridge("install-hook", cwd=gitrepo)
    hook.write_text("#!/bin/sh\necho foreign\n")
    proc = gitbridge("install-hook", cwd=gitrepo, check=False)
    assert proc.returncode == 255
    assert proc.stderr == (
        "abort: %s exists and is not gitbridge's hook\n(use --force to "
        "replace it (it is kept as commit-msg.orig))\n" % hook)
    assert hook.read_text() == "#!/bin/sh\necho foreign\n"
    gitbridge("install-hook", "--force", cwd=gitrepo)
    assert (gitrepo / "my-hooks" / "commit-msg.orig").read_text() == \
        "#!/bin/sh\necho foreign\n"
    hook.write_text("#!/bin/sh\necho another\n")
    proc = gitbridge("install-hook", "--force", cwd=gitrepo, check=False)
    assert "commit-msg.orig exists too" in proc.stderr
    assert hook.read_text() == "#!/bin/sh\necho another\n"


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
