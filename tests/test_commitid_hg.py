"""The commitid extension with the real hg: every way of making or
rewriting a changeset leaves exactly one commit ID, and rewrites keep it."""

import json
import subprocess

import pytest

from vcsperf.core.commitid import Commit, find_id, find_ids, map_series

EXTENSIONS = """[ui]
editor = true
[extensions]
commitid =
rebase =
histedit =
absorb =
split =
uncommit =
[experimental]
evolution = all
"""


@pytest.fixture
def repo(hg, hgrc, hgrepo):
    """A repository with the extension and three draft changesets, each
    changing its own file (so they reorder and fold cleanly)."""
    hgrc.write_text(EXTENSIONS)
    (hgrepo / "base").write_text("base\n")
    hg("commit", "-Aqm", "base", cwd=hgrepo)
    hg("phase", "--public", "-r", ".", cwd=hgrepo)
    for name in ("one", "two", "three"):
        (hgrepo / name).write_text("%s\n" % name)
        hg("commit", "-Aqm", "Add %s" % name, cwd=hgrepo)
    return hgrepo


def descs(hg, repo, revs="draft()"):
    out = hg("log", "-r", revs, "-T", "{desc}\\0", cwd=repo)
    return out.split("\0")[:-1]


def desc(hg, repo, rev="."):
    [only] = descs(hg, repo, rev)
    return only


def the_id(hg, repo, rev="."):
    """The one ID of a changeset (fails on none or several)."""
    [commit_id] = find_ids(desc(hg, repo, rev))
    return commit_id


def ids(hg, repo, revs="draft()"):
    """One ID per changeset, in revision order."""
    result = []
    for message in descs(hg, repo, revs):
        [commit_id] = find_ids(message)
        result.append(commit_id)
    return result


def editor(*sed):
    """An editor command that edits the message file with sed."""
    return "ui.editor=sed -i " + " ".join("-e '%s'" % s for s in sed)


def with_input(hg, args, text, cwd):
    proc = subprocess.run([hg.binary, *args], input=text, env=hg.env,
                          cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


# Creating changesets ----------------------------------------------------------

@pytest.mark.slow
def test_story_review_survives_rewriting(hg, repo):
    """A developer's series gets IDs at commit time; after amending,
    reordering and folding, the new series maps onto the reviewed one."""
    reviewed = [Commit(node, find_id(message)) for node, message in zip(
        hg("log", "-r", "draft()", "-T", "{node}\\n", cwd=repo).split(),
        descs(hg, repo))]
    assert all(c.commit_id for c in reviewed)
    hg("update", "-q", "-r", "desc('Add two')", cwd=repo)
    (repo / "two").write_text("two, fixed\n")
    hg("commit", "--amend", "-qm", "Add two, fixed", cwd=repo)
    hg("rebase", "-q", "-s", "orphan()", "-d", ".", cwd=repo)
    first, second, third = hg("log", "-r", "draft()", "-T", "{node}\\n",
                              cwd=repo).split()
    rules = "pick %s\npick %s\nfold %s\n" % (third[:12], first[:12],
                                             second[:12])
    hg("update", "-q", "-r", third, cwd=repo)
    (repo.parent / "rules").write_text(rules)
    hg("histedit", "-q", "--commands", repo.parent / "rules",
       "-r", first, cwd=repo)
    series = hg("log", "-r", "draft()", "-T", "{node}\\n", cwd=repo).split()
    successors = {c.node: hg("log", "--hidden", "-r", "successors(%s)"
                             % c.node, "-T", "{node}\\n", cwd=repo).split()
                  for c in reviewed}
    pushed = [Commit(node, the_id(hg, repo, node), predecessors=[
        old for old, new in successors.items() if node in new])
        for node in series]
    mapping = map_series(reviewed, pushed)
    old = {c.node: i for i, c in enumerate(reviewed)}
    assert [(old[m.old.node], m.how) for m in mapping.matches] == \
        [(2, "obsolescence"), (0, "obsolescence")]
    assert [old[c.node] for c in mapping.unmatched_old] == [1]
    assert mapping.successors(reviewed[1]) == [pushed[1]]
    assert not mapping.conflicts and not mapping.duplicate_ids
    # Without obsolescence data the IDs alone say the same.
    mapping = map_series(reviewed, [p._replace(predecessors=frozenset())
                                    for p in pushed])
    assert [(old[m.old.node], m.how) for m in mapping.matches] == \
        [(2, "commit-id"), (0, "commit-id")]


def test_commit_places_the_line(hg, repo):
    (repo / "one").write_text("changed\n")
    hg("commit", "-qm", "Fix it\n\nDetails.\n\nBug: 17\nReviewed-by: me",
       cwd=repo)
    message = desc(hg, repo)
    commit_id = the_id(hg, repo)
    assert message == ("Fix it\n\nDetails.\n\nBug: 17\nReviewed-by: me\n"
                       "MozReview-Commit-ID: %s" % commit_id)
    assert hg("log", "-r", ".", "-T", "{commitid}", cwd=repo) == commit_id
    assert len(commit_id) == 11
    assert hg("log", "-r", "commitid(%s)" % commit_id, "-T", "{rev}",
              cwd=repo) == hg("log", "-r", ".", "-T", "{rev}", cwd=repo)
    assert len(ids(hg, repo)) == 4 and len(set(ids(hg, repo))) == 4


@pytest.mark.slow
def test_commit_with_editor_and_existing_id(hg, repo):
    (repo / "one").write_text("changed\n")
    hg("commit", "-q", "--config", editor("1s/.*/Edited subject/"),
       cwd=repo)
    assert desc(hg, repo).startswith("Edited subject\n\nMozReview-Commit-ID")
    (repo / "one").write_text("again\n")
    hg("commit", "-qm", "Mine\n\nMozReview-Commit-ID: chosenByMe1",
       cwd=repo)
    assert desc(hg, repo) == "Mine\n\nMozReview-Commit-ID: chosenByMe1"


@pytest.mark.slow
def test_skipped_changesets(hg, repo):
    (repo / "one").write_text("fix\n")
    hg("commit", "-qm", "fixup! Add one", cwd=repo)
    assert find_ids(desc(hg, repo)) == []
    hg("update", "-q", "-r", "desc('Add two')", cwd=repo)
    (repo / "side").write_text("side\n")
    hg("commit", "-Aqm", "side", cwd=repo)
    hg("merge", "-q", "-r", "desc('fixup')", cwd=repo)
    hg("commit", "-qm", "Merge", cwd=repo)
    assert desc(hg, repo) == "Merge"


@pytest.mark.slow
def test_amend_with_the_same_message_changes_nothing(hg, repo):
    """As in core: ``commit --amend -m`` with the changeset's message and
    no change is "nothing changed", exit 1, though the message given
    lacks the ID line (Mercurial's test-commit-amend.t)."""
    node = hg("log", "-r", ".", "-T", "{node}", cwd=repo)
    subject = desc(hg, repo).split("\n")[0]
    proc = hg.proc("commit", "--amend", "-m", subject, cwd=repo)
    assert (proc.returncode, proc.stdout) == (1, "nothing changed\n")
    assert hg("log", "-r", ".", "-T", "{node}", cwd=repo) == node
    assert hg("log", "--hidden", "-r", "all()", "-T", "x", cwd=repo) == \
        hg("log", "-r", "all()", "-T", "x", cwd=repo)


@pytest.mark.slow
def test_amend_keeps_the_id(hg, repo):
    before = the_id(hg, repo)
    (repo / "three").write_text("amended\n")
    hg("commit", "--amend", "-q", cwd=repo)
    assert the_id(hg, repo) == before
    hg("commit", "--amend", "-qm", "New message, no ID", cwd=repo)
    assert desc(hg, repo) == "New message, no ID\n\nMozReview-Commit-ID: %s" \
        % before
    hg("commit", "--amend", "-q", "--config",
       editor("/MozReview/d", "1s/.*/Edited away/"), "-e", cwd=repo)
    assert desc(hg, repo).startswith("Edited away\n")
    assert the_id(hg, repo) == before
    assert len(hg("log", "--hidden", "-r", "commitid(%s)" % before, "-T",
                  "x", cwd=repo)) == 4


# Rewriting ------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("inmemory", ["no", "yes"])
def test_rebase_keeps_ids(hg, repo, inmemory):
    before = ids(hg, repo)
    hg("update", "-q", "-r", "0", cwd=repo)
    (repo / "new-base").write_text("x\n")
    hg("commit", "-Aqm", "New base", cwd=repo)
    new_base = the_id(hg, repo)
    hg("rebase", "-q", "--config", "rebase.experimental.inmemory=%s"
       % inmemory, "-s", "desc('Add one')", "-d", ".", cwd=repo)
    assert ids(hg, repo) == [new_base] + before


@pytest.mark.slow
def test_rebase_collapse_keeps_the_first_id(hg, repo):
    before = ids(hg, repo)
    hg("rebase", "-q", "--collapse", "-s", "desc('Add one')", "-d", "0",
       "--config", "ui.editor=true", cwd=repo)
    assert ids(hg, repo) == before[:1]


@pytest.mark.slow
def test_graft_keeps_the_id_and_mapping_reports_the_copy(hg, repo):
    source = hg("log", "-r", "desc('Add two')", "-T", "{node}", cwd=repo)
    hg("update", "-q", "-r", "0", cwd=repo)
    hg("graft", "-q", "-r", source, cwd=repo)
    assert the_id(hg, repo) == the_id(hg, repo, source)
    copy = hg("log", "-r", ".", "-T", "{node}", cwd=repo)
    old = [Commit(source, the_id(hg, repo, source))]
    mapping = map_series(old, [Commit(source, old[0].commit_id),
                               Commit(copy, the_id(hg, repo))])
    assert [m.how for m in mapping.matches] == ["node", None]
    assert mapping.conflicts[0].new.node == copy
    assert mapping.duplicate_ids == {old[0].commit_id: [source, copy]}


@pytest.mark.slow
def test_histedit_pick_edit_fold_roll_mess(hg, repo):
    for name in ("four", "five"):
        (repo / name).write_text("%s\n" % name)
        hg("commit", "-Aqm", "Add %s" % name, cwd=repo)
    one, two, three, four, five = ids(hg, repo)
    nodes = hg("log", "-r", "draft()", "-T", "{node|short}\\n",
               cwd=repo).split()
    rules = ("pick {0}\nedit {1}\nmess {2}\nfold {3}\nroll {4}\n"
             .format(*nodes))
    (repo.parent / "rules").write_text(rules)
    proc = hg.proc("histedit", "--commands", repo.parent / "rules",
                   cwd=repo)
    assert proc.returncode != 0  # stopped for "edit"
    assert "hg histedit --continue" in proc.stderr
    (repo / "two").write_text("two, edited\n")
    # The editor deletes every ID line, for mess and again for fold.
    hg("histedit", "--continue", "-q", "--config",
       editor("/MozReview/d", "1s/$/ (edited)/"), cwd=repo)
    messages = descs(hg, repo)
    assert [find_ids(m) for m in messages] == [[one], [two], [three]]
    assert hg("cat", "-r", "desc('Add two')", "two", cwd=repo) == \
        "two, edited\n"
    assert messages[2].startswith("Add three (edited) (edited)\n")
    # fold kept the four's message beside; roll dropped five's.
    assert "Add four" in messages[2] and "Add five" not in messages[2]
    assert hg("files", "-r", "tip", cwd=repo).split() == \
        ["base", "five", "four", "one", "three", "two"]


@pytest.mark.slow
def test_absorb_keeps_ids(hg, repo):
    before = ids(hg, repo)
    (repo / "one").write_text("one, absorbed\n")
    (repo / "three").write_text("three, absorbed\n")
    hg("absorb", "-q", "--apply-changes", cwd=repo)
    assert ids(hg, repo) == before
    assert hg("cat", "-r", "desc('Add one')", "one", cwd=repo) == \
        "one, absorbed\n"


@pytest.mark.slow
def test_split_gives_the_first_part_the_id(hg, repo):
    (repo / "extra").write_text("extra\n")
    hg("commit", "-Aqm", "Add four and extra", cwd=repo)
    original = the_id(hg, repo)
    (repo / "four").write_text("four\n")
    hg("add", "-q", "four", cwd=repo)
    hg("commit", "--amend", "-q", cwd=repo)
    # First part: only 'extra'; then the rest.
    with_input(hg, ["split", "-q", "-r", ".", "--config",
                    "ui.interactive=true", "--config", "ui.editor=true"],
               "y\ny\nn\ny\ny\n", cwd=repo)
    first, second = ids(hg, repo, "desc('Add four and extra')")
    assert first == original and second != original
    assert hg("log", "-r", "commitid(%s)" % first, "-T", "{files}",
              cwd=repo) == "extra"


@pytest.mark.slow
def test_uncommit_keeps_the_id(hg, repo):
    (repo / "four").write_text("four\n")
    (repo / "five").write_text("five\n")
    hg("commit", "-Aqm", "Add four and five", cwd=repo)
    before = the_id(hg, repo)
    hg("uncommit", "-q", "five", cwd=repo)
    assert the_id(hg, repo) == before
    assert hg("status", cwd=repo) == "A five\n"


@pytest.mark.slow
def test_shelve_and_unshelve(hg, repo):
    (repo / "one").write_text("shelved change\n")
    (repo / "three").write_text("other change\n")
    hg("shelve", "-q", "-m", "wip", cwd=repo)
    # The shelved changeset itself carries one ID, like any changeset.
    assert len(find_ids(hg("log", "--hidden", "-r", "max(all())", "-T",
                           "{desc}", cwd=repo))) == 1
    hg("commit", "-q", "--config", "ui.allowemptycommit=yes", "-m",
       "Between", cwd=repo)
    hg("unshelve", "-q", cwd=repo)
    hg("commit", "-qm", "After unshelve", cwd=repo)
    assert find_ids(desc(hg, repo)) != []
    assert len(set(ids(hg, repo))) == 5


@pytest.mark.slow
def test_import_keeps_or_adds_ids(hg, repo, tmp_path):
    patch = tmp_path / "one.patch"
    hg("export", "-r", "desc('Add two')", "-o", patch, cwd=repo)
    exported_id = the_id(hg, repo, "desc('Add two')")
    hg("update", "-q", "-r", "0", cwd=repo)
    hg("import", "-q", patch, cwd=repo)
    assert the_id(hg, repo) == exported_id
    # A patch from a repository without IDs: import gives one, --exact
    # keeps the patch's own node.
    plain = tmp_path / "plain"
    hg("init", plain)
    (plain / "f").write_text("f\n")
    hg("commit", "-Aqm", "Plain", "--config", "extensions.commitid=!",
       cwd=plain)
    hg("export", "-r", ".", "-o", tmp_path / "plain.patch", cwd=plain)
    node = hg("log", "-r", ".", "-T", "{node}", cwd=plain)
    hg("init", tmp_path / "exact")
    hg("import", "-q", "--exact", tmp_path / "plain.patch",
       cwd=tmp_path / "exact")
    assert hg("log", "-r", "tip", "-T", "{node} {desc}",
              cwd=tmp_path / "exact") == node + " Plain"
    hg("import", "-q", "--bypass", tmp_path / "plain.patch", cwd=repo)
    assert len(find_ids(desc(hg, repo, "tip"))) == 1


def test_convert_reproduces_messages(hg, repo, tmp_path):
    plain = tmp_path / "plain"
    hg("init", plain)
    (plain / "f").write_text("f\n")
    hg("commit", "-Aqm", "Plain", "--config", "extensions.commitid=!",
       cwd=plain)
    hg("--config", "extensions.convert=", "convert", "-q", plain,
       tmp_path / "converted")
    assert desc(hg, tmp_path / "converted", "tip") == "Plain"


# The bulk command -----------------------------------------------------------

def without_extension(hg, repo, count):
    for i in range(count):
        (repo / ("f%d" % i)).write_text("%d\n" % i)
        hg("commit", "-Aqm", "Change %d" % i, "--config",
           "extensions.commitid=!", cwd=repo)


@pytest.mark.slow
@pytest.mark.parametrize("evolution", ["all", "false"])
def test_commitid_add(hg, hgrc, hgrepo, evolution):
    hgrc.write_text(EXTENSIONS.replace("evolution = all",
                                       "evolution = %s" % evolution))
    without_extension(hg, hgrepo, 6)
    hg("phase", "--public", "-r", "1", cwd=hgrepo)
    hg("phase", "--force", "--secret", "-r", "5", cwd=hgrepo)
    hg("bookmark", "-r", "4", "feature", cwd=hgrepo)
    hg("update", "-q", "-r", "3", cwd=hgrepo)
    (hgrepo / "f0").write_text("dirty\n")
    manifests = hg("log", "-r", "all()", "-T", "{manifest}\\n", cwd=hgrepo)

    out = hg("commitid-add", cwd=hgrepo)
    assert "added commit IDs to 4 changesets (4 rewritten)" in out
    assert ("saved backup bundle" in out) == (evolution == "false")
    assert hg("log", "-r", "all()", "-T", "{manifest}\\n", cwd=hgrepo) == \
        manifests
    assert descs(hg, hgrepo, "public()") == ["Change 0", "Change 1"]
    assert len(set(ids(hg, hgrepo, "not public()"))) == 4
    assert hg("log", "-r", "secret()", "-T", "{desc|firstline}",
              cwd=hgrepo) == "Change 5"
    assert hg("log", "-r", "feature", "-T", "{desc|firstline}",
              cwd=hgrepo) == "Change 4"
    assert hg("log", "-r", ".", "-T", "{desc|firstline}", cwd=hgrepo) == \
        "Change 3"
    assert hg("status", cwd=hgrepo) == "M f0\n"
    hidden = hg("log", "--hidden", "-r", "obsolete()", "-T", "x",
                cwd=hgrepo)
    assert len(hidden) == (4 if evolution == "all" else 0)
    hg("verify", "-q", cwd=hgrepo)
    proc = hg.proc("commitid-add", cwd=hgrepo)
    assert proc.returncode == 1
    assert proc.stdout == "no changeset needs a commit ID\n"


def test_commitid_add_refuses_public_changesets(hg, hgrc, hgrepo):
    hgrc.write_text(EXTENSIONS)
    without_extension(hg, hgrepo, 2)
    hg("phase", "--public", "-r", "0", cwd=hgrepo)
    proc = hg.proc("commitid-add", "-r", "0", cwd=hgrepo)
    assert proc.returncode != 0
    assert "abort: cannot commitid-add public changesets" in proc.stderr


def test_deterministic_ids(hg, hgrc, hgrepo, tmp_path):
    hgrc.write_text(EXTENSIONS + "[commitid]\ndeterministic = yes\n")
    other = tmp_path / "other"
    hg("init", other)
    for repo in (hgrepo, other):
        for i in range(3):
            (repo / "f").write_text("%d\n" % i)
            hg("commit", "-Aqm", "Change %d" % i, "-d", "0 0", cwd=repo)
    assert ids(hg, hgrepo) == ids(hg, other)
    assert len(set(ids(hg, hgrepo))) == 3


@pytest.mark.slow
def test_real_history_folded_amended_and_mapped(hg, hgrc, real_hg_repo,
                                                gitbridge):
    """The last eight pip releases as a draft series: IDs added in one
    rewrite, then two folds and an amend; the result maps back."""
    repo = real_hg_repo
    hgrc.write_text(EXTENSIONS)
    hg("phase", "--force", "--draft", "-r", "tip~7::tip", cwd=repo)
    assert "added commit IDs to 8 changesets (8 rewritten)" in \
        hg("commitid-add", cwd=repo)
    old = hg("log", "-r", "draft()", "-T", "{node}\\n", cwd=repo).split()
    old_ids = ids(hg, repo)
    hg("update", "-q", "-r", "tip", cwd=repo)
    actions = ["pick", "fold", "pick", "pick", "roll", "pick", "pick",
               "pick"]
    (repo.parent / "rules").write_text("".join(
        "%s %s\n" % (action, node) for action, node in zip(actions, old)))
    hg("histedit", "-q", "--commands", repo.parent / "rules", old[0],
       cwd=repo)
    hg("commit", "--amend", "-q", "-m", "Last release, reworded", cwd=repo)
    assert ids(hg, repo) == [old_ids[i] for i in (0, 2, 3, 5, 6, 7)]

    mapping = json.loads(gitbridge(
        "commitid-map", "--old", repo, " or ".join(old), "--new", repo,
        "draft()", "--json").stdout)
    assert [(m["old"], m["how"]) for m in mapping["matches"]] == [
        (old[i], "obsolescence") for i in (0, 2, 3, 5, 6, 7)]
    assert mapping["unmatched_old"] == [old[1], old[4]]
    assert not mapping["conflicts"] and not mapping["duplicate_ids"]
    hg("verify", "-q", cwd=repo)
