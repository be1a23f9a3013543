"""The commit index of vcsperf.core.commitindex and the key rules of
vcsperf.core.commitid: examples and hypothesis properties."""

import os
import shutil
import tempfile

import pytest
from hypothesis import given, settings, strategies as st

from vcsperf.core import commitindex
from vcsperf.core.commitid import message_keys
from vcsperf.core.commitkeys import BUG, ID, REVIEW, KeyRules, parse_key

EXAMPLES = int(os.environ.get("VCSPERF_EXAMPLES", "100"))
NAME = "commitindex"

kinds = st.sampled_from([ID, REVIEW, BUG])
keys = st.text(alphabet="0123456789ABCDEFabcdefDI", min_size=1, max_size=6)
triples = st.lists(st.tuples(kinds, keys, st.integers(0, 2 ** 32 - 1)),
                   max_size=60)


def expected(items):
    found = {}
    for kind, key, rev in items:
        found.setdefault((kind, key), set()).add(rev)
    return found


def check_answers(directory, items, absent=()):
    with commitindex.Index(directory, NAME) as index:
        index.verify()
        for (kind, key), revs in expected(items).items():
            assert index.lookup(kind, key) == sorted(revs)
        for kind, key in absent:
            if (kind, key) not in expected(items):
                assert index.lookup(kind, key) == []


@pytest.fixture
def directory():
    path = tempfile.mkdtemp(prefix="commitindex-")
    yield path
    shutil.rmtree(path)


@settings(max_examples=EXAMPLES, deadline=None)
@given(items=triples, absent=st.lists(st.tuples(kinds, keys), max_size=10))
def test_every_inserted_pair_is_found_and_nothing_else(items, absent):
    directory = tempfile.mkdtemp(prefix="commitindex-")
    try:
        commitindex.write(directory, NAME, items, b"covers", b"rules")
        check_answers(directory, items, absent)
    finally:
        shutil.rmtree(directory)


@settings(max_examples=EXAMPLES, deadline=None)
@given(batches=st.lists(triples, min_size=1, max_size=6),
       tail_limit=st.integers(0, 80),
       absent=st.lists(st.tuples(kinds, keys), max_size=10))
def test_appends_then_compaction_answer_as_one_build(batches, tail_limit,
                                                     absent):
    directory = tempfile.mkdtemp(prefix="commitindex-")
    try:
        commitindex.write(directory, NAME, batches[0], b"0", b"rules",
                          tail_limit=tail_limit)
        for number, batch in enumerate(batches[1:], 1):
            with commitindex.Index(directory, NAME) as index:
                commitindex.write(directory, NAME, batch, b"%d" % number,
                                  b"rules", base=index,
                                  tail_limit=tail_limit)
        every = [item for batch in batches for item in batch]
        check_answers(directory, every, absent)
        with commitindex.Index(directory, NAME) as index:
            assert index.covers == b"%d" % (len(batches) - 1)
            assert index.docket.tail[1] <= max(tail_limit, 0) or \
                index.docket.tail[1] == 0
        # Only the files the docket names are left.
        assert len(os.listdir(directory)) == 3
    finally:
        shutil.rmtree(directory)


def build(directory, tail=True):
    items = [(ID, "k%d" % i, i) for i in range(50)]
    commitindex.write(directory, NAME, items, b"covers", b"rules")
    if tail:
        with commitindex.Index(directory, NAME) as index:
            commitindex.write(directory, NAME, [(BUG, "7", 60)], b"covers",
                              b"rules", base=index)
    return items


def data_files(directory):
    """The table's path, then the tail's."""
    return sorted((os.path.join(directory, f) for f in os.listdir(directory)
                   if f != NAME), key=lambda path: not path.endswith(".table"))


@settings(max_examples=EXAMPLES, deadline=None)
@given(which=st.integers(0, 2), cut=st.integers(1, 10 ** 6))
def test_a_truncated_file_is_detected(which, cut):
    directory = tempfile.mkdtemp(prefix="commitindex-")
    try:
        build(directory)
        path = ([os.path.join(directory, NAME)] + data_files(directory))[which]
        size = os.path.getsize(path)
        with open(path, "r+b") as fh:
            fh.truncate(size - 1 - cut % size)
        with pytest.raises(commitindex.CorruptIndex):
            commitindex.Index(directory, NAME).verify()
    finally:
        shutil.rmtree(directory)


@settings(max_examples=EXAMPLES, deadline=None)
@given(which=st.integers(0, 2), where=st.integers(0, 10 ** 6),
       flip=st.integers(1, 255))
def test_a_corrupted_file_is_detected(which, where, flip):
    """A changed byte in the docket or a header fails at open, one in the
    table's entries fails ``verify``; a tail entry that changed can only
    add a wrong candidate or lose one, which the adapters' check of each
    candidate's message and their rebuild on ``verify`` cover."""
    directory = tempfile.mkdtemp(prefix="commitindex-")
    try:
        build(directory)
        docket, table, tail = ([os.path.join(directory, NAME)]
                               + data_files(directory))
        path = [docket, table, tail][which]
        size = os.path.getsize(path)
        header = commitindex._HEADER_SIZE
        if path == tail:
            where %= header
        else:
            where %= size
        with open(path, "r+b") as fh:
            fh.seek(where)
            byte = fh.read(1)[0]
            fh.seek(where)
            fh.write(bytes([byte ^ flip]))
        with pytest.raises(commitindex.CorruptIndex):
            commitindex.Index(directory, NAME).verify()
    finally:
        shutil.rmtree(directory)


def test_a_missing_index_and_a_foreign_file(directory):
    with pytest.raises(FileNotFoundError):
        commitindex.Index(directory, NAME)
    with open(os.path.join(directory, NAME), "wb") as fh:
        fh.write(b"not an index at all, but long enough to be one" * 3)
    with pytest.raises(commitindex.CorruptIndex):
        commitindex.Index(directory, NAME)


def test_a_crc_valid_docket_with_a_uid_that_is_no_name(directory):
    """A docket whose checksum holds but whose uid is no hex (non-UTF-8
    bytes, a path) is damaged, not a traceback nor a path to open."""
    build(directory)
    docket = commitindex.read_docket(directory, NAME)
    for uid in (b"\xff\xfe" * 4, b"../../x", b"ab\ncd"):
        damaged = commitindex.Docket((uid, docket.table[1]), docket.tail,
                                     docket.nodes, 0, b"rules", b"covers")
        with open(os.path.join(directory, NAME), "wb") as fh:
            fh.write(damaged.pack())
        with pytest.raises(commitindex.CorruptIndex):
            commitindex.Index(directory, NAME)


def replace_with(path, what):
    os.unlink(path)
    if what == "directory":
        os.mkdir(path)
    elif what == "fifo":
        os.mkfifo(path)
    else:
        os.symlink(what, path)


@pytest.mark.parametrize("what", ["directory", "fifo", "/dev/zero",
                                  "/dev/null", "table"])
@pytest.mark.parametrize("which", [0, 1, 2])
def test_special_files_are_never_followed_or_read(directory, which, what):
    """The docket or a data file replaced by a directory, a FIFO or a
    symbolic link (to /dev/zero, to another index file) is damage:
    opening raises ``CorruptIndex`` at once (no endless read, no wait
    for a FIFO's writer), and a new index written over it replaces the
    link itself, never what it points to."""
    build(directory)
    paths = [os.path.join(directory, NAME)] + data_files(directory)
    target = paths[1] if what == "table" else what
    if target == paths[which]:
        target = paths[2]
    replace_with(paths[which], target)
    with pytest.raises(commitindex.CorruptIndex):
        commitindex.Index(directory, NAME).verify()
    if what != "directory":
        items = [(ID, "new", 1)]
        commitindex.write(directory, NAME, items, b"covers", b"rules")
        check_answers(directory, items)
        assert not [f for f in os.listdir(directory)
                    if os.path.islink(os.path.join(directory, f))]


def test_a_data_file_of_another_index_is_not_read_as_its_own(directory,
                                                             tmp_path):
    build(directory)
    other = tmp_path / "other"
    commitindex.write(os.fspath(other), NAME, [(ID, "k1", 7)], b"", b"")
    [theirs] = [other / f for f in os.listdir(other) if f.endswith(".table")]
    shutil.copyfile(theirs, data_files(directory)[0])
    with pytest.raises(commitindex.CorruptIndex):
        commitindex.Index(directory, NAME)


def test_an_append_never_writes_through_a_link(directory, tmp_path):
    """A tail replaced by a link between the open and the append: the
    append refuses, the file outside is untouched."""
    build(directory)
    outside = tmp_path / "outside"
    outside.write_bytes(b"keep")
    tail = data_files(directory)[1]
    with commitindex.Index(directory, NAME) as index:
        os.unlink(tail)
        os.symlink(outside, tail)
        with pytest.raises(commitindex.CorruptIndex):
            commitindex.write(directory, NAME, [(ID, "x", 70)], b"covers",
                              b"rules", base=index)
    assert outside.read_bytes() == b"keep"


def test_nodes_are_appended_and_read_back(directory):
    commitindex.write(directory, NAME, [(ID, "a", 0)], b"", b"",
                      nodes=[b"\1" * 20], node_width=20)
    with commitindex.Index(directory, NAME) as index:
        commitindex.write(directory, NAME, [(ID, "a", 1)], b"", b"",
                          base=index, nodes=[b"\2" * 20], node_width=20)
    with commitindex.Index(directory, NAME) as index:
        assert [index.node(rev) for rev in index.lookup(ID, "a")] == \
            [b"\1" * 20, b"\2" * 20]
        assert index.node_count() == 2


def test_a_reader_keeps_its_version_while_a_writer_compacts(directory):
    build(directory, tail=False)
    reader = commitindex.Index(directory, NAME)
    with commitindex.Index(directory, NAME) as index:
        commitindex.write(directory, NAME, [(ID, "k1", 99)], b"", b"",
                          base=index, tail_limit=0)
    assert reader.lookup(ID, "k1") == [1]
    reader.close()
    with commitindex.Index(directory, NAME) as index:
        assert index.lookup(ID, "k1") == [1, 99]


def test_compaction_merges_into_the_table_without_reading_it_whole(
        directory):
    """Compaction (every ``tail_limit`` entries, so often on a long
    history) merges the tail and the new entries into the sorted table:
    the same entries as sorting all of them, duplicates in table, tail
    and batch once, entries before the first and past the last."""
    items = [(ID, "k%d" % i, i) for i in range(0, 400, 2)]
    commitindex.write(directory, NAME, items, b"", b"")
    tail = [(ID, "k2", 2), (BUG, "7", 401), (ID, "k3", 3)]
    with commitindex.Index(directory, NAME) as index:
        commitindex.write(directory, NAME, tail, b"", b"", base=index)
    with commitindex.Index(directory, NAME) as index:
        assert index.docket.tail[1] == 3
    batch = [(ID, "k3", 3), (ID, "k4", 4), (ID, "k401", 402),
             (REVIEW, "D1", 403), (ID, "k401", 402)]
    with commitindex.Index(directory, NAME) as index:
        commitindex.write(directory, NAME, batch, b"", b"", base=index,
                          tail_limit=0)
    every = items + tail + batch
    with commitindex.Index(directory, NAME) as index:
        index.verify()
        assert index.docket.tail[1] == 0
        data = index.table.data()
        assert data == b"".join(sorted(set(commitindex._pack(every))))
        assert index.table.count == len(set(every))
    check_answers(directory, every)
    # An entry below every other and one above: both ends of the merge.
    first, last = commitindex.ENTRY.pack(b"\0" * 8, 1), \
        commitindex.ENTRY.pack(b"\xff" * 8, 2)
    assert commitindex._merged(data, [first, last]) == first + data + last
    assert commitindex._merged(data, []) == data


# The key rules ---------------------------------------------------------------

MESSAGE = """Bug 1234567 - frob the widget (bug 0042); r=glob

Body mentions bug 999 which is not the summary.

MozReview-Commit-ID: 4Aq2kO7Vx9d
Differential Revision: https://phabricator.services.mozilla.com/D12345
Change-Id: I0123456789abcdef0123456789abcdef01234567
X-Other-ID: abc
"""


def test_message_keys():
    assert message_keys(MESSAGE) == {
        (BUG, "1234567"), (BUG, "42"), (ID, "4Aq2kO7Vx9d"),
        (REVIEW, "D12345"),
        (REVIEW, "I0123456789abcdef0123456789abcdef01234567")}
    assert (ID, "abc") in message_keys(MESSAGE, KeyRules(["X-Other-ID"]))
    assert KeyRules(["X-Other-ID"]).fingerprint != KeyRules().fingerprint
    # Not a trailer line, not a word, not a summary: no key.
    assert message_keys("Debug 12 fixes\n\nsee Differential Revision: "
                        "https://x/D1\nMozReview-Commit-ID: a b\n") == set()
    assert message_keys("summary\r\nDifferential Revision: D7\r\n") == \
        {(REVIEW, "D7")}


@pytest.mark.parametrize("text, key", [
    ("D123", (REVIEW, "D123")), ("bug 5", (BUG, "5")), ("Bug12", (BUG, "12")),
    ("bug:007", (BUG, "7")), ("bug 0", (BUG, "0")),
    ("bug " + "9" * 18, (BUG, "9" * 18)),
    ("4Aq2kO7Vx9d", (ID, "4Aq2kO7Vx9d")), ("id:D1", (ID, "D1")),
    ("I" + "ab" * 20, (REVIEW, "I" + "ab" * 20)),
    # Not a review: a letter after the digits, none, an upper-case or
    # short Change-Id.
    ("D12x", (ID, "D12x")), ("D", (ID, "D")),
    ("I" + "AB" * 20, (ID, "I" + "AB" * 20)),
    ("I" + "ab" * 19, (ID, "I" + "ab" * 19))])
def test_parse_key(text, key):
    assert parse_key(text) == key


@pytest.mark.parametrize("text", [
    # Digits of other scripts (str.isdigit takes them): no bug 111, no
    # review, no commit ID.
    "bug \u0661\u0661\u0661", "bug:\u0661", "D\u0663", "bug \u00b2",
    # More digits than a bug number has (int() of 4,301 raised).
    "bug " + "1" * 19, "bug:" + "1" * 4301,
    # What no message carries: a line end (the wire's key separator),
    # white space, other characters, nothing, an overlong key.
    "id:a\nb", "a\nbug:1", "a b", "review:abc", "review:D1\n", "", "id:",
    "x" * 257])
def test_parse_key_refuses_what_is_no_key(text):
    with pytest.raises(ValueError) as raised:
        parse_key(text)
    assert len(str(raised.value)) < 120


def test_bug_numbers_have_at_most_18_digits():
    """A summary "Bug" and 4,301 digits made int() raise for every later
    commit, pull and lookup (issue 27): a longer run is no bug key."""
    for digits in (19, 4301, 100000):
        assert message_keys("Bug %s - x\n" % ("7" * digits)) == set()
    assert message_keys("Bug %s - x\n" % ("7" * 18)) == {(BUG, "7" * 18)}
    assert message_keys("Bug 0042 and bug %s\n" % ("0" * 4400)) == \
        {(BUG, "42")}
    # Non-ASCII digits are no bug number in a message either.
    assert message_keys("Bug \u0661\u0661\u0661\n") == set()


@settings(max_examples=EXAMPLES, deadline=None)
@given(summary=st.text(alphabet="abc -", max_size=20),
       bug=st.integers(0, 10 ** 9), revision=st.integers(0, 10 ** 9),
       commit_id=st.text(alphabet="0123456789ABCxyz", min_size=1,
                         max_size=12),
       eol=st.sampled_from(["\n", "\r\n", "\r"]))
def test_keys_written_as_trailers_are_found(summary, bug, revision,
                                            commit_id, eol):
    message = eol.join([
        "%s Bug %d" % (summary, bug), "", "MozReview-Commit-ID: " + commit_id,
        "Differential Revision: https://phab.example/D%d" % revision, ""])
    assert {(BUG, str(bug)), (ID, commit_id), (REVIEW, "D%d" % revision)} \
        <= message_keys(message)
