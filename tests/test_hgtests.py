"""contrib/hgtests.py's classification of a test's changed output.

The inputs are shaped like run-tests' ``.t`` files and ``.err`` outputs;
the runs themselves are the documented command (COMPATIBILITY.md) and the
CI step (``--quick``).
"""

import importlib.util
import pathlib

import pytest

spec = importlib.util.spec_from_file_location(
    "hgtests", pathlib.Path(__file__).parent.parent / "contrib/hgtests.py")
hgtests = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hgtests)

EXPECTED = b"""\
  $ hg init repo
  $ cat repo/.hg/requires
  dotencode
  fncache
  revlog-compression-zstd
  store
  $ hg log -r . -T '{node|short}\\n'
  1ea73414a91b
  $ hg clone --stream http://localhost:$HGPORT clone
  streaming all changes
  6 files to transfer, 606 bytes of data
  added 2 changesets with 2 changes to 2 files
  $ hg commit -m 'second'
  $ hg log -v -r .
  description:
  second
  
  
""".splitlines()


def changed(*pairs):
    """EXPECTED with each (old, new) line pair replaced."""
    lines = list(EXPECTED)
    for old, new in pairs:
        at = lines.index(old)
        lines[at:at + 1] = new
    return lines


def test_hashes_sizes_and_requirement_names_are_expected():
    ours = changed(
        (b"  revlog-compression-zstd", []),
        (b"  dotencode", [b"  dotencode", b"  exp-compression-zstd-dict"]),
        (b"  1ea73414a91b", [b"  5f0c0e9b2a8d"]),
        (b"  6 files to transfer, 606 bytes of data",
         [b"  6 files to transfer, 598 bytes of data"]))
    kind, why = hgtests.classify("test-x.t", EXPECTED, ours)
    assert kind == "expected"
    assert why == ["hashes, sizes or engine names"]


def test_commit_id_lines_and_their_blank_line_are_expected():
    ours = changed((b"  second", [b"  second", b"  ",
                                  b"  MozReview-Commit-ID: 4Aq2kO7Vx9d"]))
    assert hgtests.classify("test-x.t", EXPECTED, ours, ids=True) == (
        "expected", ["descriptions end in a commit ID paragraph"])


def test_the_id_paragraph_an_editor_script_prints_is_expected():
    expected = EXPECTED + [b"  EDITOR: a2", b"  EDITOR: ", b"  EDITOR: HG: --"]
    ours = EXPECTED + [b"  EDITOR: a2", b"  EDITOR: ",
                       b"  EDITOR: MozReview-Commit-ID: 5NYyXvN7DKH",
                       b"  EDITOR: ", b"  EDITOR: HG: --"]
    assert hgtests.classify("test-x.t", expected, ours, ids=True) == (
        "expected", ["descriptions end in a commit ID paragraph"])


GRAPH = [b"  $ hg log -G -T '{desc} {phase}'", b"  @  C secret", b"  |",
         b"  o  B draft", b"  |", b"  o  A public", b"   "]


def test_the_id_paragraph_in_a_graph_is_expected():
    # What a template prints after {desc} follows the ID line, and the
    # ID's blank line is the edge under the node.
    ours = [b"  $ hg log -G -T '{desc} {phase}'", b"  @  C", b"  |",
            b"  |  MozReview-Commit-ID: AuHSYk57cZw secret", b"  o  B",
            b"  |", b"  |  MozReview-Commit-ID: G8UC5kw2Rm8 draft",
            b"  o  A", b"   ", b"     MozReview-Commit-ID: 4igS2xNr7sC public"]
    assert hgtests.classify("test-x.t", GRAPH, ours, ids=True) == (
        "expected", ["descriptions end in a commit ID paragraph"])
    # Where more of the node follows, it takes the edge's line and columns.
    patch = [b"  | x  1 112478962961 B", b"  |/   diff --git a/B b/B",
             b"  |    new file mode 100644", b"  o  0 426bada5c675 A", b"   "]
    ours_patch = [b"  | x  1 38413fe6b2d9 B", b"  |/",
                  b"  |    MozReview-Commit-ID: G8UC5kw2Rm8",
                  b"  |    diff --git a/B b/B", b"  |    new file mode 100644",
                  b"  o  0 44ba5bff8ff3 A", b"   ",
                  b"     MozReview-Commit-ID: 4igS2xNr7sC"]
    assert hgtests.without_id_paragraphs(ours_patch) == [
        b"  | x  1 38413fe6b2d9 B", b"  |/   diff --git a/B b/B",
        b"  |    new file mode 100644", b"  o  0 44ba5bff8ff3 A", b"   "]
    assert hgtests.classify("test-x.t", patch, ours_patch,
                            ids=True)[0] == "expected"
    # Taller nodes may lay the edges out differently.
    merge = [b"  $ hg tglog", b"  | o  2: 531f80391e4a 'c'",
             b"  o /  1: 6f252845ea45 'a'", b"  |/",
             b"  o  0: d20a80d4def3 'base'", b"   "]
    ours_merge = [b"  $ hg tglog", b"  | o  2: 322de5257eff 'c", b"  | |",
                  b"  | |  MozReview-Commit-ID: G8UC5kw2Rm8'",
                  b"  o |  1: b06e980a84b7 'a", b"  | |",
                  b"  | |  MozReview-Commit-ID: AuHSYk57cZw'", b"  |/",
                  b"  o  0: 9d6075a9b08b 'base", b"   ",
                  b"     MozReview-Commit-ID: 4igS2xNr7sC'"]
    assert hgtests.classify("test-x.t", merge, ours_merge,
                            ids=True)[0] == "expected"
    # A changed phase is still seen.
    ours[6] = b"  |  MozReview-Commit-ID: G8UC5kw2Rm8 public"
    assert hgtests.classify("test-x.t", GRAPH, ours, ids=True) == (
        "unexplained", ["added line: o  B public"])


@pytest.mark.parametrize("pair, reason", [
    ((b"  $ hg commit -m 'second'",
      [b"  $ hg commit -m 'second'", b"  Traceback (most recent call last):",
       b"  TypeError: f() got an unexpected keyword argument 'x'"]),
     "new line: Traceback (most recent call last):"),
    ((b"  streaming all changes",
      [b"  abort: stream ended unexpectedly", b"  [255]"]),
     "new line: abort: stream ended unexpectedly"),
    ((b"  added 2 changesets with 2 changes to 2 files",
      [b"  added 1 changesets with 1 changes to 1 files"]),
     "changeset count: 2 -> 1"),
])
def test_errors_and_lost_changesets_are_defects(pair, reason):
    kind, why = hgtests.classify("test-x.t", EXPECTED, changed(pair))
    assert kind == "defect"
    assert reason in why


def test_a_lost_exit_code_is_a_defect():
    expected = EXPECTED + [b"  $ hg commit -m nothing", b"  nothing changed",
                           b"  [1]"]
    kind, why = hgtests.classify("test-x.t", expected, EXPECTED + [
        b"  $ hg commit -m nothing", b"  nothing changed"])
    assert (kind, why) == ("defect", ["exit code: [1]"])


def test_a_stale_hash_explains_only_what_follows_it():
    # In the commitid pass a hash the test wrote down no longer exists.
    expected = EXPECTED + [b"  $ hg qnew p", b"  $ hg strip -q 1ea73414a91b",
                           b"  $ hg log -r tip -T '{rev}\\n'", b"  0"]
    ours = EXPECTED + [b"  $ hg qnew p", b"  $ hg strip -q 1ea73414a91b",
                       b"  abort: unknown revision '1ea73414a91b'",
                       b"  [10]", b"  $ hg log -r tip -T '{rev}\\n'", b"  1"]
    assert hgtests.classify("test-x.t", expected, ours, ids=True) == (
        "expected", ["names a changeset by the hash it had before commit IDs "
                     "changed it; the rest follows"])
    # Without commit IDs hashes do not change: it is a defect.
    assert hgtests.classify("test-x.t", expected, ours)[0] == "defect"
    # A difference before it is not explained by it.
    ours[len(EXPECTED) + 1:len(EXPECTED) + 1] = [
        b"  hg: unknown command 'qnew'", b"  [10]"]
    assert hgtests.classify("test-x.t", expected, ours, ids=True)[0] == \
        "defect"


def test_a_revset_matching_the_id_line_explains_what_follows():
    expected = EXPECTED + [b"  $ hg rebase -r 'desc(D)' -d 0",
                           b"  rebasing 3:5fddd98957c8 \"D\""]
    ours = EXPECTED + [b"  $ hg rebase -r 'desc(D)' -d 0",
                       b"  rebasing 1:42ccdea3bb16 \"B\"",
                       b"  rebasing 3:5fddd98957c8 \"D\""]
    assert hgtests.classify("test-x.t", expected, ours, ids=True) == (
        "expected", ["the revset desc(D) also matches the commit ID line; "
                     "the rest follows"])
    assert hgtests.classify("test-x.t", expected, ours)[0] == "unexplained"


def test_any_other_change_needs_a_reader():
    ours = changed((b"  streaming all changes", [b"  searching for changes"]))
    assert hgtests.classify("test-x.t", EXPECTED, ours) == (
        "unexplained", ["added line: searching for changes"])


def test_an_expected_pattern_line_matches_the_changed_line():
    expected = EXPECTED + [
        b'  "GET /?cmd=batch" x-hgproto-1:0.1 comp=$USUAL$ * (glob)',
        b"  bundle requirements: generaldelta, revlog-compression-zstd,"
        b" revlogv1 (no-rust zstd !)"]
    ours = EXPECTED + [
        b'  "GET /?cmd=batch" x-hgproto-1:0.1 comp=wirezstd,$USUAL$ pull',
        b"  bundle requirements: exp-compression-zstd-dict, generaldelta,"
        b" revlogv1"]
    assert hgtests.classify("test-x.t", expected, ours) == ("expected", [
        "hashes, sizes or engine names",
        "lines naming our extensions, files or IDs"])


def test_a_test_that_leaves_our_extensions_out_is_expected_to_differ():
    expected = EXPECTED + [b"  $ HGRCPATH=$TESTTMP/tmp.hgrc hg add -v a",
                           b"  adding a", b"  $ hg log -r . -T '{rev}\\n'",
                           b"  1"]
    ours = EXPECTED + [
        b"  $ HGRCPATH=$TESTTMP/tmp.hgrc hg add -v a",
        b"  abort: repository requires features unknown to this Mercurial:"
        b" exp-compression-zstd-dict", b"  [255]",
        b"  $ hg log -r . -T '{rev}\\n'", b"  0"]
    kind, why = hgtests.classify("test-x.t", expected, ours)
    assert kind == "expected" and "own HGRCPATH" in why[0]
    # Anywhere else the same abort is a defect.
    ours[len(EXPECTED)] = b"  $ hg add -v a"
    assert hgtests.classify("test-x.t", expected, ours)[0] == "defect"
