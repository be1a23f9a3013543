"""The adversarial campaign for commit-message trailers (issue 18).

- Any message (hypothesis): what Git's hook gives it and Git stores
  (``git stripspace``, Git's own clean-up) and what the hg extension gives
  it and Mercurial stores (its changelog's own ``stripdesc``) carry the
  same ID; never two; a message that had one keeps it; giving an ID again,
  before or after storing, changes nothing.
- Time: for families of hostile messages (duplicate ID lines, blank and
  CR-only lines, trailer blocks, comment lines, one long line), 8 times
  the message costs at most 24 times the CPU time (linear: 8; quadratic,
  as 20,000 duplicate ID lines once were: 64), and at most 5 ms per KB.
- The real tools: seeded messages committed with the real git (hook
  installed) and the real hg (the whole suite on) get the same ID, then
  ``git fsck`` and ``hg verify`` pass.

Lines that start with ``#`` are left out: Git's hook reads them as
comments (Git drops them when the editor ran), Mercurial as text, by
design.
"""

import random
import re
import subprocess
import time

import pytest
from hypothesis import (
    HealthCheck,
    assume,
    given,
    seed,
    settings,
    strategies as st,
)
from mercurial.changelog import stripdesc

import campaign
from pastbytes_hostile import repeat
from test_all_extensions import HGRC
from vcsperf.core import commitid

LINE_ENDS = ["\n", "\r\n", "\r"]
PIECES = [
    "", " ", "\t", "body text", "Bug: 123", "Signed-off-by: A <a@b>",
    "  continued", "***", "a\rb", "Key: value\r", "fixup! x", "squash! y",
    "MozReview-Commit-ID: abcDEF01234", "MozReview-Commit-ID: xyz98765432 ",
    "MozReview-Commit-ID: vt000000001\v", "MozReview-Commit-ID: ff000000001\f",
    "MozReview-Commit-ID: ", "MozReview-Commit-ID: bad!",
    " MozReview-Commit-ID: indented", "MozReview-Commit-ID: tab00000001\t",
]
NEW_ID = "newID000001"


def lines_of(message):
    return re.split(r"\r\n|\r|\n", message)


def git_stored(message, cwd):
    """The message as Git stores it after the hook: ``git stripspace``
    is Git's clean-up of a message it was given (``commit -m``/``-F``)."""
    return subprocess.run(["git", "stripspace"], input=message.encode(),
                          cwd=cwd, capture_output=True,
                          check=True).stdout.decode()


def hg_stored(message):
    return stripdesc(message.encode()).decode()


@st.composite
def messages(draw):
    subject = draw(st.sampled_from(["Fix the parser", "fixup! Fix", "x",
                                    "Bug: crash", " "]))
    lines = draw(st.lists(st.one_of(
        st.sampled_from(PIECES),
        st.text(st.characters(blacklist_categories=("Cs",),
                              blacklist_characters="\n\x00"), max_size=20)),
        max_size=12))
    ends = draw(st.lists(st.sampled_from(LINE_ENDS), min_size=len(lines),
                         max_size=len(lines)))
    text = subject + "".join(e + line for e, line in zip(ends, lines))
    return text + draw(st.sampled_from(["", "\n", "\r\n", "\r", "\n\n"]))


def trailer_failures(message, cwd):
    """What goes wrong with ``message`` between Git's hook and hg (an
    empty list if nothing does)."""
    failures = []
    start = time.process_time()
    for_git = commitid.ensure_id(message, lambda: NEW_ID, comment="#")
    for_hg = commitid.ensure_id(message, lambda: NEW_ID)
    if time.process_time() - start > 0.5:
        failures.append("slow")
    git, hg = git_stored(for_git, cwd), hg_stored(for_hg)
    if commitid.find_ids(git) != commitid.find_ids(hg):
        failures.append("git %r, hg %r" % (commitid.find_ids(git),
                                           commitid.find_ids(hg)))
    if not commitid.skip_reason(message):
        if len(commitid.find_ids(hg)) != 1:
            failures.append("IDs in hg: %r" % commitid.find_ids(hg))
        if commitid.find_id(hg) != (commitid.find_id(message) or NEW_ID):
            failures.append("the message's own ID was not kept")
    for supplied, stored in ((for_git, git), (for_hg, hg)):
        for text in (supplied, stored):
            if commitid.ensure_id(text, commitid.new_id) != text:
                failures.append("a second ensure_id changed %r" % text)
    return failures


@pytest.mark.campaign
def test_git_hook_and_hg_agree_on_any_message(tally, tmp_path):
    @settings(max_examples=campaign.size(300, 5000), deadline=None,
              derandomize=not campaign.FULL,
              suppress_health_check=[HealthCheck.too_slow])
    @seed(tally.seed)
    @given(messages())
    def agree(message):
        assume(not any(line.startswith("#") for line in lines_of(message)))
        failures = trailer_failures(message, tmp_path)
        tally.case(not failures, "%r: %s" % (message, failures))
        assert not failures

    agree()
    tally.check()


#: Hostile messages by name: ``make(rng, size)`` gives about ``size``
#: characters.
FAMILIES = {
    "duplicate ID lines": lambda rng, size: "Fix\n\n" + repeat(
        lambda: "MozReview-Commit-ID: dup00000001" + rng.choice(LINE_ENDS),
        size),
    "different ID lines": lambda rng, size: "Fix\n\n" + repeat(
        lambda: "MozReview-Commit-ID: %011d\n" % rng.randrange(10 ** 11),
        size),
    "blank lines": lambda rng, size: "Fix" + repeat(
        lambda: rng.choice(LINE_ENDS) + rng.choice(["", " ", "\t"]), size),
    "CR only": lambda rng, size: "Fix" + repeat(
        lambda: "\r" + rng.choice(["a", "", "Key: v"]), size),
    "trailer block": lambda rng, size: "Fix\n\n" + repeat(
        lambda: rng.choice(["Bug: 1", "Signed-off-by: A", "  more"])
        + rng.choice(LINE_ENDS), size),
    "comment lines": lambda rng, size: "Fix\n" + repeat(
        lambda: "# comment" + rng.choice(LINE_ENDS), size),
    "one long line": lambda rng, size: "Fix " + repeat(
        lambda: rng.choice(["MozReview-Commit-ID: ", "a", " ", "\t"]), size),
}


def cpu_time(message, repeat=3):
    best = None
    for _ in range(repeat):
        start = time.process_time()
        commitid.ensure_id(message, commitid.new_id, comment="#")
        commitid.find_ids(message)
        spent = time.process_time() - start
        best = spent if best is None else min(best, spent)
    return best


@pytest.mark.campaign
def test_trailer_time_grows_linearly(tally):
    size = campaign.size(20000, 100000)
    for name, make in sorted(FAMILIES.items()):
        for _ in range(campaign.size(1, 3)):
            variant = tally.rng.randrange(2 ** 32)
            small = make(random.Random(variant), size)
            big = make(random.Random(variant), size * 8)
            short, long = cpu_time(small), cpu_time(big)
            ratio = long / max(short, 0.002)
            per_kb = long / (len(big) / 1024)
            print("%-20s variant %10d  %.4f s  %.4f s  x%.1f  %.3f ms/KB" % (
                name, variant, short, long, ratio, per_kb * 1000))
            tally.case(ratio <= 24 and per_kb <= 0.005,
                       "%s variant %d: x%.1f, %.3f ms/KB" % (
                           name, variant, ratio, per_kb * 1000))
    tally.check()


def random_message(rng):
    lines = [rng.choice(["Fix the parser", "fixup! Fix", "Bug: crash"])]
    for _ in range(rng.randint(0, 8)):
        lines.append(rng.choice(LINE_ENDS) + rng.choice(PIECES))
    return "".join(lines) + rng.choice(["", "\n", "\r\n", "\r"])


@pytest.mark.slow
@pytest.mark.campaign
def test_real_git_and_hg_agree(tally, git, hg, hgrc, gitrepo, hgrepo,
                               gitbridge, tmp_path):
    """Both keep the ID a message has, or both add one (each its own
    random one), or, for a skipped message, both leave it alone."""
    hgrc.write_text(HGRC)
    gitbridge("install-hook", cwd=gitrepo)
    sent = [random_message(tally.rng) for _ in range(campaign.size(10, 100))]
    print("%d messages committed with git and with hg" % len(sent))
    path = tmp_path / "message"
    for index, message in enumerate(sent):
        path.write_bytes(message.encode())
        name = "f%d" % index
        (gitrepo / name).write_text(name)
        (hgrepo / name).write_text(name)
        git("add", name, cwd=gitrepo)
        git("commit", "-q", "-F", path, cwd=gitrepo)
        hg("commit", "-Aq", "-l", path, cwd=hgrepo)
    in_git = git("log", "--reverse", "-z", "--format=%B",
                 cwd=gitrepo).split("\0")[:-1]
    in_hg = hg("log", "-r", "all()", "-T", "{desc}\\0{commitid}\\0",
               cwd=hgrepo).split("\0")[:-1]
    for message, git_message, hg_message, template in zip(
            sent, in_git, in_hg[::2], in_hg[1::2]):
        git_ids = commitid.find_ids(git_message)
        hg_ids = commitid.find_ids(hg_message)
        if commitid.skip_reason(message):
            ok = git_ids == hg_ids == commitid.find_ids(message)
        else:
            own = commitid.find_id(message)
            ok = len(git_ids) == len(hg_ids) == 1 and (
                own is None or git_ids == hg_ids == [own])
        tally.case(ok and template == (hg_ids[0] if hg_ids else ""),
                   "%r: git %r, hg %r" % (message, git_ids, hg_ids))
    tally.case(len(in_git) == len(in_hg) // 2 == len(sent),
               "%d messages, %d in git, %d in hg" % (
                   len(sent), len(in_git), len(in_hg) // 2))
    git("fsck", "--no-progress", cwd=gitrepo)
    hg("verify", "-q", cwd=hgrepo)
    tally.check()
