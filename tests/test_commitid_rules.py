"""The commit-ID rules of vcsperf.core.commitid: generation, parsing,
placement, skip rules (examples and hypothesis properties) and mapping."""

import os
import re
import subprocess
import sys

from hypothesis import given, settings, strategies as st

from vcsperf.core import commitid
from vcsperf.core.commitid import (
    Commit,
    ensure_id,
    find_id,
    find_ids,
    map_series,
)

EXAMPLES = int(os.environ.get("VCSPERF_EXAMPLES", "300"))


def fixed(commit_id="abcDEF01234"):
    return lambda: commit_id


def line(commit_id="abcDEF01234"):
    return "MozReview-Commit-ID: %s" % commit_id


def decode(commit_id):
    number = 0
    for digit in commit_id:
        number = number * 62 + commitid.ALPHABET.index(digit)
    return number


# Generation ---------------------------------------------------------------

def test_new_id_layout():
    now = commitid.EPOCH + 123456789
    ids = {commitid.new_id(now) for _ in range(200)}
    assert len(ids) == 200
    for commit_id in ids:
        assert re.fullmatch("[0-9A-Za-z]{11}", commit_id)
        value = decode(commit_id)
        assert value & 0xFFFFFFFF == 123456789
    # The random half really varies over its whole width.
    high = [decode(i) >> 32 for i in ids]
    assert max(high) > 2 ** 31 and min(high) < 2 ** 31


def test_new_id_uses_the_current_time():
    value = decode(commitid.new_id())
    assert abs((value & 0xFFFFFFFF) + commitid.EPOCH - __import__(
        "time").time()) < 60


def test_derived_id_is_reproducible_and_spread():
    assert commitid.derived_id(b"seed") == commitid.derived_id(b"seed")
    ids = {commitid.derived_id(b"seed %d" % i) for i in range(500)}
    assert len(ids) == 500
    assert all(re.fullmatch("[0-9A-Za-z]{11}", i) for i in ids)


def test_module_imports_neither_mercurial_nor_dulwich():
    code = ("import sys, vcsperf.core.commitid; "
            "print(sorted(m for m in sys.modules "
            "if m.split('.')[0] in ('mercurial', 'dulwich', 'hgext')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "[]"


# Placement examples ---------------------------------------------------------

def test_new_paragraph_after_subject():
    assert ensure_id("Fix the parser", fixed()) == \
        "Fix the parser\n\n" + line()


def test_trailing_blank_lines_dropped_final_newline_kept():
    assert ensure_id("Fix it\n\nbody\n\n  \n\t\n", fixed()) == \
        "Fix it\n\nbody\n\n" + line() + "\n"


def test_joins_trailer_block():
    message = "Fix it\n\nbody text\n\nSigned-off-by: A <a@b>\nBug: 12\n"
    assert ensure_id(message, fixed()) == message + line() + "\n"


def test_trailer_continuation_lines():
    message = "Fix it\n\nCo-authored-by: A\n  and more\nReviewed-by: B"
    assert ensure_id(message, fixed()) == message + "\n" + line()


def test_subject_that_looks_like_a_trailer_is_no_trailer_block():
    assert ensure_id("Bug: crash on start", fixed()) == \
        "Bug: crash on start\n\n" + line()


def test_prose_paragraph_with_colon_is_no_trailer_block():
    message = "Fix it\n\nSee also: the docs, and more prose here\nnext line"
    assert ensure_id(message, fixed()) == message + "\n\n" + line()


def test_crlf_message_gets_crlf_lines():
    assert ensure_id("Fix it\r\n\r\nbody\r\n\r\n", fixed()) == \
        "Fix it\r\n\r\nbody\r\n\r\n" + line() + "\r\n"


def test_message_with_an_id_is_unchanged():
    message = "Fix it\n\n%s\nSigned-off-by: A\n\n" % line("x1")
    assert ensure_id(message, fixed()) == message


def test_fold_keeps_the_first_id():
    folded = "First\n\n%s\n***\nSecond\n\n%s" % (line("first"),
                                                 line("second"))
    result = ensure_id(folded, fixed("unused"))
    assert find_ids(result) == ["first"]
    # As core folds the messages without IDs, the ID paragraph at the end.
    assert result == "First\n***\nSecond\n\n" + line("first")


def test_fold_of_trailer_blocks():
    folded = ("A\n\nBug: 1\n%s\n\n\nB\n\nBug: 2\n%s\n" %
              (line("aaa"), line("bbb")))
    assert ensure_id(folded, fixed()) == \
        "A\n\nBug: 1\n\n\nB\n\nBug: 2\n%s\n" % line("aaa")


def test_skip_rules():
    for message, reason in [("", "empty"), (" \n\t\n", "empty"),
                            ("fixup! Fix it", "autosquash"),
                            ("squash! Fix it\n\nmore", "autosquash"),
                            ("amend! Fix it", "autosquash")]:
        assert commitid.skip_reason(message) == reason
        assert ensure_id(message, fixed()) == message
    assert commitid.skip_reason("Merge", parents=2) == "merge"
    assert ensure_id("Merge", fixed(), parents=2) == "Merge"
    # Only at the start of the first line, and only these words.
    assert ensure_id("Add fixup! support", fixed()) != "Add fixup! support"
    assert ensure_id("fixup!no space", fixed()) != "fixup!no space"


def test_git_comments_and_scissors():
    message = ("Fix it\n\n# Please enter the commit message.\n#\n"
               "# ------------------------ >8 ------------------------\n"
               "diff --git a/x b/x\n+MozReview-Commit-ID: notthisone\n")
    result = ensure_id(message, fixed(), comment="#")
    assert result == ("Fix it\n\n%s\n# Please enter the commit message.\n#\n"
                      "# ------------------------ >8 ---------------------"
                      "---\ndiff --git a/x b/x\n+MozReview-Commit-ID: "
                      "notthisone\n" % line())
    assert commitid.skip_reason("# only a comment\n", comment="#") == \
        "empty"
    assert commitid.skip_reason("; fixup! x\nfixup! y", comment=";") == \
        "autosquash"


def test_parsing_takes_the_first_well_formed_line():
    message = ("x\nMozReview-Commit-ID:  spaced\n MozReview-Commit-ID: in\n"
               "MozReview-Commit-ID: bad!\nMozReview-Commit-ID: good1 \n"
               "MozReview-Commit-ID: good2")
    assert find_id(message) == "good1"
    assert find_ids(message) == ["good1", "good2"]
    assert find_id("MozReview-Commit-ID: crlf\r\nnext") == "crlf"
    assert find_id("no id") is None


# Placement properties -------------------------------------------------------

trailers = st.builds(
    "{}: {}".format,
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9-]{0,12}", fullmatch=True),
    st.from_regex(r"\S[^\n]{0,20}", fullmatch=True))
message_lines = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",),
                          blacklist_characters="\n"), max_size=30),
    st.sampled_from(["", " ", "\t", "\r", "  \r", "***", "fixup! x",
                     line("prior"), "MozReview-Commit-ID: ", "# comment"]),
    trailers)


@st.composite
def messages(draw):
    lines = draw(st.lists(message_lines, max_size=12))
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    text = eol.join(lines)
    if draw(st.booleans()):
        text += eol * draw(st.integers(1, 3))
    return text


def lines_of(message):
    """The lines of a message: "\r\n", "\r" and "\n" end lines, for Git's
    hook and Mercurial alike."""
    return re.split(r"\r\n|\r|\n", message)


def ends_a_line(message):
    return message.endswith(("\r", "\n"))


def check_one_id(message, result, comment=None):
    if commitid.skip_reason(message, comment=comment):
        assert result == message
        return
    assert len(find_ids(result)) == 1
    assert find_id(result) == (find_id(message) or "newID000001")
    if len(find_ids(message)) == 1:
        assert result == message
    else:
        # The last line of content is the ID line; the end is as it was.
        assert ends_a_line(result) == ends_a_line(message)
        content = [x for x in lines_of(result) if x.strip(" \t\f\v")
                   and not (comment and x.startswith(comment))]
        assert content[-1] == line(find_id(result))
        # Nothing but blank lines and other ID lines went away.
        kept = lines_of(result)
        for old in lines_of(message):
            if old.strip(" \t\f\v") and not find_id(old):
                assert old in kept


@settings(max_examples=EXAMPLES, deadline=None)
@given(messages())
def test_adding_gives_exactly_one_findable_id(message):
    check_one_id(message, ensure_id(message, fixed("newID000001")))


@settings(max_examples=EXAMPLES, deadline=None)
@given(messages())
def test_adding_twice_is_a_no_op(message):
    once = ensure_id(message, commitid.new_id)
    assert ensure_id(once, commitid.new_id) == once


@settings(max_examples=EXAMPLES, deadline=None)
@given(messages(), st.sampled_from(["#", ";"]))
def test_git_comments_never_hold_the_id(message, comment):
    result = ensure_id(message, fixed("newID000001"), comment=comment)
    check_one_id(message, result, comment)
    assert ensure_id(result, commitid.new_id, comment=comment) == result


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(messages(), min_size=2, max_size=4))
def test_fold_of_identified_messages_keeps_the_first_id(parts):
    identified = [ensure_id(p, commitid.new_id) for p in parts]
    identified = [p for p in identified if find_id(p)]
    folded = "\n***\n".join(identified)
    result = ensure_id(folded, fixed("unused00000"))
    if identified and not commitid.skip_reason(folded):
        assert find_ids(result) == [find_id(identified[0])]


# Mapping --------------------------------------------------------------------

A, B, C, D = (Commit("a%d" % i, "id%d" % i) for i in range(4))


def how(mapping):
    return [(m.new.node, m.old.node if m.old else None, m.how)
            for m in mapping.matches]


def test_same_series_maps_by_node():
    mapping = map_series([A, B], [A, B])
    assert how(mapping) == [("a0", "a0", "node"), ("a1", "a1", "node")]
    assert not mapping.unmatched_old and not mapping.conflicts


def test_reorder_maps_by_id():
    new = [Commit("n1", "id1"), Commit("n0", "id0")]
    assert how(map_series([A, B], new)) == [
        ("n1", "a1", "commit-id"), ("n0", "a0", "commit-id")]


def test_drop_is_reported():
    mapping = map_series([A, B, C], [Commit("n0", "id0"),
                                     Commit("n2", "id2")])
    assert how(mapping) == [("n0", "a0", "commit-id"),
                            ("n2", "a2", "commit-id")]
    assert mapping.unmatched_old == [B]


def test_fold_keeps_the_first_and_reports_the_folded():
    # A fold's result kept A's ID, and obsolescence says it replaced both.
    folded = Commit("f", "id0", predecessors={"a0", "a1"})
    mapping = map_series([A, B, C], [folded, Commit("n2", "id2")])
    assert how(mapping) == [("f", "a0", "obsolescence"),
                            ("n2", "a2", "commit-id")]
    assert mapping.unmatched_old == [B]
    assert mapping.successors(B) == [folded]


def test_fold_without_obsolescence_data():
    mapping = map_series([A, B], [Commit("f", "id0")])
    assert how(mapping) == [("f", "a0", "commit-id")]
    assert mapping.unmatched_old == [B]


def test_split_gives_the_old_commit_to_the_part_with_its_id():
    # The part with the ID comes second: it still wins over the first.
    parts = [Commit("s1", "new", predecessors={"a0"}),
             Commit("s2", "id0", predecessors={"a0"})]
    mapping = map_series([A], parts)
    assert how(mapping) == [("s1", None, None), ("s2", "a0", "obsolescence")]
    [conflict] = mapping.conflicts
    assert (conflict.new.node, conflict.old.node, conflict.taken_by.node) \
        == ("s1", "a0", "s2")


def test_split_parts_sharing_the_id_are_never_both_attached():
    parts = [Commit("s1", "id0"), Commit("s2", "id0")]
    mapping = map_series([A], parts)
    assert how(mapping) == [("s1", "a0", "commit-id"), ("s2", None, None)]
    assert [(c.new.node, c.how) for c in mapping.conflicts] == \
        [("s2", "commit-id")]
    assert mapping.duplicate_ids == {"id0": ["s1", "s2"]}


def test_duplicate_ids_in_the_old_series():
    old = [Commit("o1", "dup"), Commit("o2", "dup")]
    mapping = map_series(old, [Commit("n1", "dup"), Commit("n2", "dup")])
    assert how(mapping) == [("n1", "o1", "commit-id"),
                            ("n2", "o2", "commit-id")]
    assert mapping.duplicate_ids == {"dup": ["o1", "o2", "n1", "n2"]}


def test_node_beats_id_and_a_copy_conflicts():
    # A graft left A in place and copied it with its ID.
    mapping = map_series([A], [A, Commit("graft", "id0")])
    assert how(mapping) == [("a0", "a0", "node"), ("graft", None, None)]
    assert mapping.conflicts[0].taken_by == A


def test_positional_fallback_is_explicit_and_only_for_commits_without_id():
    old = [A, B, C]
    new = [Commit("n0", None), Commit("n1", "fresh"), Commit("n2", None)]
    assert how(map_series(old, new)) == [
        ("n0", None, None), ("n1", None, None), ("n2", None, None)]
    assert how(map_series(old, new, positional=True)) == [
        ("n0", "a0", "position"), ("n1", None, None),
        ("n2", "a2", "position")]


def test_positional_never_takes_a_claimed_commit():
    old = [A, B]
    new = [Commit("n1", "id1"), Commit("n0", None)]
    mapping = map_series(old, new, positional=True)
    assert how(mapping) == [("n1", "a1", "commit-id"), ("n0", None, None)]
    assert mapping.conflicts[0].how == "position"


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["i1", "i2", "i3", None]),
                          st.sets(st.sampled_from(["o0", "o1", "o2"]))),
                max_size=6),
       st.booleans())
def test_no_old_commit_ever_has_two_new_commits(spec, positional):
    old = [Commit("o0", "i1"), Commit("o1", "i2"), Commit("o2", "i2")]
    new = [Commit("n%d" % i, cid, preds) for i, (cid, preds) in
           enumerate(spec)]
    mapping = map_series(old, new, positional)
    owners = [m.old.node for m in mapping.matches if m.old]
    assert len(owners) == len(set(owners))
    assert {c.node for c in mapping.unmatched_old} == \
        {"o0", "o1", "o2"} - set(owners)
    for conflict in mapping.conflicts:
        assert conflict.taken_by != conflict.new
        assert mapping.matches[new.index(conflict.new)].old is None
