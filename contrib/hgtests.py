#!/usr/bin/env python3
"""Run Mercurial's own test suite with every vcsperf extension enabled.

    python contrib/hgtests.py [--jobs 2] [--quick] [--json FILE] [TEST ...]

The tests come from the sdist of the installed Mercurial, downloaded once
from PyPI (its sha256 checked against the digest PyPI publishes) into
``$VCSPERF_CACHE/hg-sdist``.  ``tests/run-tests.py`` runs them against the
installed ``hg`` in three passes:

``baseline``
  without our extensions, to tell failures of this environment (no Rust,
  no network) from differences our extensions cause;
``suite``
  with ``zstdstore`` (engine forced on: ``format.revlog-compression=
  zstd-dict``, so every repository a test makes uses it), ``wirezstd``,
  ``bundlegen``, ``sharepool``, ``pastbytes`` and ``wirecache`` (its
  cache on: every ``hg serve`` of a test answers from it) enabled together through
  ``--extra-config-opt``;
``commitid``
  the same plus ``commitid``, on the history-editing tests only.

Every test that fails in a pass of ours is classified by comparing its
output (the ``.err`` file run-tests leaves) with the baseline's output (the
``.t`` file, or the baseline's ``.err`` where the baseline failed too):

``defect``
  a new ``Traceback``, a new ``abort:`` line, a changed exit code, a
  changed count of changesets, or a test that no longer finishes;
``expected``
  every changed line is explained once hashes, byte counts and sizes,
  compression requirement names and engine names are masked, and lines
  naming our extensions, their files or commit IDs are set aside (the
  per-test explanations in ``EXPLAINED`` cover the rest);
``unexplained``
  anything else: read the ``.err`` file, then fix the defect or explain
  the difference in ``EXPLAINED``.

One table is printed to stdout (Markdown: test, baseline, ours, class, why).  The
exit status is 1 when any test is a defect or unexplained.  The outputs of
each pass (``.err`` files, ``report.json``, ``run-tests.log``) stay in
``$VCSPERF_CACHE/hgtests-<version>/<pass>/``.
"""

import argparse
import collections
import difflib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request

from mercurial import util

from vcsperf.harness import history

#: Chosen by area from the 7.2.4 sdist: the tests of each command and
#: protocol the issue names, less the slowest where a faster one covers the
#: same command, and only tests that pass in the baseline on a machine
#: without Rust or network, except ``test-upgrade-repo.t`` (its
#: ``dirstate-v2`` lines need Rust) and ``test-clonebundles-autogen.t``
#: (background bundle generation prints in a racy order), which the
#: comparison with the baseline's own output still covers.
AREAS = {
    "commit": ["test-commit.t", "test-commit-amend.t", "test-amend.t",
               "test-unamend.t", "test-uncommit.t"],
    "rebase": ["test-rebase-inmemory.t", "test-rebase-abort.t",
               "test-rebase-collapse.t", "test-rebase-conflicts.t",
               "test-rebase-obsolete.t", "test-rebase-transaction.t",
               "test-rebase-backup.t", "test-rebase-dest.t"],
    "histedit": ["test-histedit-arguments.t", "test-histedit-edit.t",
                 "test-histedit-fold.t", "test-histedit-obsolete.t",
                 "test-histedit-drop.t", "test-histedit-no-backup.t"],
    "strip": ["test-strip.t", "test-repair-strip.t", "test-strip-cross.t"],
    "graft": ["test-graft.t", "test-graft-interrupted.t"],
    "shelve": ["test-shelve.t"],
    "absorb": ["test-absorb.t", "test-absorb-strip.t",
               "test-absorb-phase.t"],
    "split": ["test-split.t"],
    "bundle": ["test-bundle.t", "test-bundle-type.t", "test-bundle-r.t",
               "test-bundle-phases.t", "test-debugbundle.t",
               "test-unbundlehash.t", "test-bundle2-exchange.t"],
    "clone": ["test-clone.t", "test-clone-r.t", "test-clone-stream.t",
              "test-clone-stream-format.t",
              "test-clone-stream-revlog-split.t",
              "test-clone-pull-corruption.t"],
    "pull": ["test-pull-r.t", "test-pull-http.t", "test-pull-bundle.t",
             "test-pull-pull-corruption.t", "test-pull-update.t"],
    "push": ["test-push.t", "test-push-http.t", "test-ssh.t",
             "test-ssh-clone-r.t", "test-http.t", "test-http-clone-r.t",
             "test-http-bundle1.t"],
    "serve": ["test-serve.t", "test-static-http.t", "test-http-branchmap.t"],
    "share": ["test-share.t", "test-share-safe.t", "test-share-bookmarks.t"],
    "clonebundles": ["test-clonebundles.t", "test-clonebundles-autogen.t"],
    "verify": ["test-verify.t"],
    "upgrade": ["test-upgrade-repo.t"],
    "censor": ["test-censor.t", "test-censor2.t"],
    "wire protocol": ["test-wireproto.t", "test-ssh-proto.t",
                      "test-http-protocol.t", "test-getbundle.t",
                      "test-ssh-batch.t"],
    "store": ["test-hardlinks.t", "test-fncache.t", "test-inherit-mode.t",
              "test-revlog.t"],
}
DEFAULT_TESTS = [t for tests in AREAS.values() for t in tests]

#: The commitid pass: every area whose commands rewrite changesets.
HISTORY_AREAS = ("commit", "rebase", "histedit", "strip", "graft", "shelve",
                 "absorb", "split")

#: ``--quick``: the fastest tests of the main areas (amend and rebase
#: backups, histedit, absorb, unbundle, censor, pull over HTTP, clone over
#: SSH, stream clone, getbundle): under 5 minutes for the three passes with
#: -j2 on a busy 2-core machine (the CI step).
QUICK_TESTS = ["test-rebase-backup.t", "test-histedit-no-backup.t",
               "test-histedit-drop.t", "test-absorb-strip.t",
               "test-unbundlehash.t", "test-censor2.t", "test-pull-http.t",
               "test-ssh-clone-r.t", "test-clone-stream-revlog-split.t",
               "test-getbundle.t", "test-debugbundle.t"]

SUITE = ["extensions.zstdstore=", "extensions.wirezstd=",
         "extensions.bundlegen=", "extensions.sharepool=",
         "extensions.pastbytes=", "extensions.wirecache=",
         "format.revlog-compression=zstd-dict"]
PASSES = {
    "baseline": [],
    "suite": SUITE,
    # Derived IDs: a changeset made again is the same changeset, as the
    # tests expect of core (random IDs would make each one new).
    "commitid": SUITE + ["extensions.commitid=", "commitid.deterministic=yes"],
}

#: Per-test explanations of changed lines the general rules do not cover:
#: test -> [(regex, why)], the regex searched in "<command>\n<line>", where
#: <command> is the ``  $ `` line the changed line follows.
INLINE = (rb"\n  (\.hg/store/data/\S+\.d|.*\bdata/\S+\.d\b.*|"
          rb"linking: \d+/\d+ files.*|linked \d+ files.*)$",
          "smaller chunks keep a revlog inline: one .d file fewer")
EXPLAINED = {
    "test-graft.t": [
        (rb"hg pdiff .*\n(?!.*(Traceback|abort: )|  \[\d+\]$)",
         "the two patches it compares each carry the ID paragraph"),
        (rb"\n  transplant_source=",
         "an extra naming a changeset by its binary hash")],
    "test-clone.t": [INLINE],
    "test-hardlinks.t": [INLINE],
    "test-http-protocol.t": [
        (rb"\n  s>     batch branchmap .* unbundlehash",
         "the capabilities list wirezstd, and the stream requirements "
         "exp-compression-zstd-dict"),
        (rb"grep '\^compression=zstd,zlib\$'.*\n  \[1\]$",
         "the capability names wirezstd first, and the test greps for "
         "exactly zstd,zlib")],
    "test-bundle.t": [
        (rb"\n  00[0-9a-f]{2}:( [0-9a-f]{2})+ +\|.*\|$",
         "hexdump of a stream bundle, which names the requirements")],
}

# A changeset's hash, short or full (a backup bundle adds 8 hex digits);
# also what names a changeset in a command, which commit IDs change.
HASH = re.compile(rb"\b[0-9a-f]{12}([0-9a-f]{28})?(-[0-9a-f]{8})?\b")
# What an expected difference may change: masked on both sides.
MASKS = [
    (re.compile(rb"%2C"), b","),
    (re.compile(rb"%3D"), b"="),
    (HASH, b"<hash>"),
    # The changelog's share of a bundle: commit IDs make changesets longer.
    (re.compile(rb"^(\s+)\d+ \(changelog\)$"), rb"\1<size> (changelog)"),
    # absorb's short hashes: seven hex digits, with a letter and a digit,
    # or where absorb prints them, first on the line.
    (re.compile(rb"\b(?=[a-f]*[0-9])(?=[0-9]*[a-f])[0-9a-f]{7}\b"),
     b"<hash>"),
    (re.compile(rb"^(\s*)[0-9a-f]{7} "), rb"\1<hash> "),
    # Engines a capability or bundle spec lists: ours drop or add some.
    (re.compile(rb"\b(comp|compression|cg\.delta-compression)="
                rb"[\w,$]+"), rb"\1=<engines>"),
    (re.compile(rb"\b(exp-compression-zstd-dict|revlog-compression-zstd|"
                rb"zstd-dict|wirezstd|zstd|zlib)\b"), b"<engine>"),
    (re.compile(rb"\b\d+(\.\d+)? ?([KMG]i?B|bytes?)\b"), b"<size>"),
    (re.compile(rb"\b(read|write|readline|readavailable|size|length|"
                rb"bytecount)([(=: ]+)\d+"), rb"\1\2<size>"),
    (re.compile(rb"-> \d+"), b"-> <size>"),
    # Obsolescence markers' effect flags: a rewrite that also gives the
    # changeset its commit ID changes its description too.
    (re.compile(rb"'ef1': '\d+'"), b"'ef1': <flags>"),
]
# What each mask stands for, when an expected glob line is matched.
TOKENS = {b"<hash>": rb"([0-9a-f]{7}|[0-9a-f]{12}([0-9a-f]{28})?"
                     rb"(-[0-9a-f]{8})?)",
          b"<engines>": rb"[\w,$]+",
          b"<engine>": rb"[\w-]+",
          b"<size>": rb"\d+(\.\d+)?( ?([KMG]i?B|bytes?))?"}
# Messages of our extensions, and what they add to other lines.
OWN_MESSAGE = re.compile(rb"\b(zstdstore|wirezstd|bundlegen|sharepool|"
                         rb"pastbytes|wirecache|commitid): ")
OURS = re.compile(rb"(zstdstore|wirezstd|bundlegen|sharepool|pastbytes|"
                  rb"wirecache|commitid|zstd-dicts\S*|MozReview-Commit-ID: \w+),?")
# A test that runs hg with an HGRCPATH of its own leaves our extensions
# out, and a stock hg refuses the zstd-dict repositories the suite made.
OWN_HGRC = re.compile(rb"^  \$ HGRCPATH=\S+ hg .*\n  abort: repository "
                      rb"requires features unknown to this Mercurial: "
                      rb"exp-compression-zstd-dict$", re.M)
# Tests that find changesets by their whole message, which the ID line
# changes (checked by hand: the test's own code says so).
FINDS_BY_MESSAGE = {
    "test-rebase-dest.t": "its maprevset.py maps changesets by their whole "
    "message, which the ID line changes, so destinations come out empty",
}
# Tests whose own code orders changesets by hash, which commit IDs change:
# when the first difference follows the command, the rest follows (checked
# by hand).
HASH_ORDER = {
    "test-strip.t": (rb"^  \$ restore$", "its restore() unbundles the "
                     "backups in the order of their names, which start with "
                     "a hash: changesets come back in another order"),
}
# A description's commit ID paragraph as a template prints it: the ID line
# (after a graph's columns, if any), and what the template prints after
# ``{desc}`` (our IDs are 11 characters).  Editor scripts in the tests
# tag each line they print (``EDITOR: ``).
TAG = rb"  (?:[A-Z]+: )?"
ID_LINE = re.compile(rb"^(%s)([|:\\/~ ]*?)MozReview-Commit-ID: \w{11}(.*)$"
                     % TAG)
GRAPH_ONLY = re.compile(rb"^%s[|:\\/ ]*$" % TAG)
GRAPH_EDGE = re.compile(rb"[|/\\:]+")
# A graph's node: its mark, then the text two columns on or another column
# (a "* " that starts a line is a list, as in rebase's collapsed message).
NODE_LINE = re.compile(rb"^  [|:\\/+ -]*[o@x*%_](  | [|:\\/])")
# A revset that finds changesets by a piece of their message.
DESC_REVSET = re.compile(rb"""\bdesc\(['"]?([^'")]+)['"]?\)""")
# How run-tests marks an expected line: a pattern, or a condition.
ANNOTATION = re.compile(rb" \((glob|re|esc|[^()]* !)\)$")
DEFECTS = [
    (re.compile(rb"Traceback \(most recent call last\)"), "new line"),
    (re.compile(rb"\babort: "), "new line"),
    (re.compile(rb"^  \[\d+\]$"), "exit code"),
]
CHANGESETS = re.compile(rb"\b(\d+) changesets?\b")


def sdist(cache):
    """Path of the extracted sdist of the running Mercurial."""
    version = util.version().decode("ascii").split("+")[0]
    root = os.path.join(cache, "hg-sdist", "mercurial-%s" % version)
    if os.path.isdir(root):
        return root
    with urllib.request.urlopen(
            "https://pypi.org/pypi/mercurial/json") as resp:
        files = json.load(resp)["releases"][version]
    [source] = [f for f in files if f["packagetype"] == "sdist"]
    os.makedirs(os.path.dirname(root), exist_ok=True)
    archive = root + ".tar.gz"
    with urllib.request.urlopen(source["url"]) as resp:
        data = resp.read()
    if hashlib.sha256(data).hexdigest() != source["digests"]["sha256"]:
        raise RuntimeError("%s: sha256 mismatch" % source["url"])
    with open(archive, "wb") as fh:
        fh.write(data)
    with tarfile.open(archive) as tar:
        tar.extractall(os.path.dirname(root), filter="data")
    return root


def run_pass(testdir, outdir, config, tests, args):
    """Run ``tests`` with ``config``; return run-tests' report by test."""
    shutil.rmtree(outdir, ignore_errors=True)
    os.makedirs(outdir)
    bindir = os.path.dirname(sys.executable)
    # The tests' helper scripts import mercurial with plain python.
    site = os.path.dirname(os.path.dirname(util.__file__))
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"],
               PYTHONPATH=site)
    opts = [arg for item in config for arg in ("--extra-config-opt", item)]
    with open(os.path.join(outdir, "run-tests.log"), "wb") as log:
        subprocess.run(
            [sys.executable, "run-tests.py", "--with-hg",
             os.path.join(bindir, "hg"), "-j", str(args.jobs), "--json",
             "--port", str(args.port), "--timeout", str(args.timeout),
             "--slowtimeout", str(2 * args.timeout), "--outputdir", outdir]
            + opts + tests,
            cwd=testdir, env=env, stdout=log, stderr=subprocess.STDOUT)
    with open(os.path.join(outdir, "report.json")) as fh:
        return json.loads(fh.read().split("=", 1)[1])


def output(testdir, outdir, name):
    """Lines a pass printed for test case ``name``, or its expected ones."""
    err = os.path.join(outdir, name + ".err")
    if not os.path.exists(err):
        err = os.path.join(testdir, name.split("#")[0])
    with open(err, "rb") as fh:
        return fh.read().splitlines()


def masked(line):
    for pattern, repl in MASKS:
        line = pattern.sub(repl, line)
    return line


def comparable(line):
    """``line`` masked, without annotations, its words in any order."""
    while ANNOTATION.search(line):
        line = ANNOTATION.sub(b"", line)
    return b" ".join(sorted(re.split(rb"[\s,;=]+", masked(line).strip())))


def matcher_of(line):
    """The regular expression of an expected ``(glob)`` or ``(re)`` line."""
    kinds = []
    while ANNOTATION.search(line):
        kinds.append(ANNOTATION.search(line).group(1))
        line = ANNOTATION.sub(b"", line)
    if b"re" in kinds:
        try:
            return re.compile(line)
        except re.error:
            return None
    pattern = re.escape(masked(line))
    if b"glob" in kinds:
        pattern = pattern.replace(rb"\*", b".*").replace(rb"\?", b".")
    for token, regex in TOKENS.items():
        pattern = pattern.replace(re.escape(token), regex)
    return re.compile(pattern)


def with_commands(lines):
    """Each line with the command line it follows, for ``EXPLAINED``."""
    command = b""
    for line in lines:
        if line.startswith(b"  $ "):
            command = line
        yield command + b"\n" + line


def without_id_paragraphs(lines):
    """``lines`` as the template would print them if descriptions had no
    commit ID paragraph: the blank line and the ID line go, and what
    followed the ID goes back after the line before the blank one.  In a
    graph the blank line stays where nothing more of the node follows:
    it is the edge the graph draws under a one-line node."""
    lines = list(lines)
    for i in range(len(lines) - 1, 1, -1):
        found = ID_LINE.match(lines[i])
        if not (found and GRAPH_ONLY.match(lines[i - 1])):
            continue
        following = lines[i + 1] if i + 1 < len(lines) else b""
        graph = GRAPH_EDGE.search(found.group(2)) or NODE_LINE.match(
            lines[i - 2])
        edge = graph and (
            NODE_LINE.match(following) or not following.startswith(b"  ")
            or following.startswith(b"  $ "))
        lines[i - 2] += found.group(3)
        if graph and not edge and not GRAPH_ONLY.match(following):
            # The next line takes the edge's place, and its columns.
            width = found.end(2)
            lines[i + 1] = (lines[i - 1].rstrip().ljust(width)
                            + following[width:])
        del lines[i - (0 if edge else 1):i + 1]
        if b"~" in found.group(2):
            # The mark of a graph cut short stays on a line of its own.
            lines.insert(i - (0 if edge else 1), found.group(1)
                         + found.group(2).rstrip())
    return lines


def first_divergence(reference, ours, changes):
    """The command, with its here-document, of the first change in
    ``ours`` that masks and patterns do not explain, and the command
    before it; b"" where there is none."""
    for tag, i1, i2, j1, j2 in changes:
        expected = [matcher_of(line) for line in reference[i1:i2]]
        keys = collections.Counter(comparable(line)
                                   for line in reference[i1:i2])
        for j in range(j1, j2):
            key = comparable(ours[j])
            if keys[key]:
                keys[key] -= 1
            elif not any(m and m.fullmatch(ours[j]) for m in expected):
                starts = [k for k in range(j + 1)
                          if ours[k].startswith(b"  $ ")] or [0]
                end = starts[-1] + 1
                while end < len(ours) and ours[end].startswith(b"  > "):
                    end += 1
                return (b"\n".join(ours[starts[-1]:end]),
                        ours[starts[-2]] if len(starts) > 1 else b"")
    return b"", b""


def classify(name, reference, ours, ids=False):
    """(class, reasons) of the output ``ours`` against ``reference``;
    ``ids`` when the pass gave changesets commit IDs, which change their
    hashes and messages."""
    removed, added = [], []
    why = set()
    new_ids = ids and any(ID_LINE.match(line) for line in ours)
    if new_ids:
        ours = without_id_paragraphs(ours)
        why.add("descriptions end in a commit ID paragraph")
    test_file = name.split("#")[0]
    explained = EXPLAINED.get(test_file, [])

    def keep(line):
        for pattern, reason in explained:
            if re.search(pattern, line):
                why.add(reason)
                return False
        return True

    matcher = difflib.SequenceMatcher(None, reference, ours, autojunk=False)
    ref, new = list(with_commands(reference)), list(with_commands(ours))
    changes = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    first = b"\n".join(new[changes[0][3]:changes[0][4]]) if changes else b""
    if OWN_HGRC.search(first):
        return "expected", [
            "runs hg with its own HGRCPATH, without our extensions, on a "
            "zstd-dict repository, which it refuses; the rest follows"]
    if test_file in FINDS_BY_MESSAGE and ids:
        return "expected", [FINDS_BY_MESSAGE[test_file]]
    # Where commit IDs made the first difference, the rest follows.
    command, before = first_divergence(reference, ours, changes) if ids \
        else (b"", b"")
    if test_file in HASH_ORDER and re.search(HASH_ORDER[test_file][0],
                                             before):
        return "expected", [HASH_ORDER[test_file][1]]
    if HASH.search(command):
        return "expected", [
            "names a changeset by the hash it had before commit IDs "
            "changed it; the rest follows"]
    found = command and DESC_REVSET.search(command)
    if found and found.group(1) in b"MozReview-Commit-ID":
        return "expected", [
            "the revset desc(%s) also matches the commit ID line; the rest "
            "follows" % found.group(1).decode()]
    for tag, i1, i2, j1, j2 in changes:
        removed += [l.split(b"\n")[1] for l in ref[i1:i2] if keep(l)]
        added += [l.split(b"\n")[1] for l in new[j1:j2] if keep(l)]
    reasons = []
    for pattern, what in DEFECTS:
        sides = [collections.Counter(masked(ANNOTATION.sub(b"", l))
                                     for l in side if pattern.search(l))
                 for side in (removed, added)]
        # A lost exit code line is a changed exit code too.
        changed = list(sides[1] - sides[0]) or (
            what == "exit code" and list(sides[0] - sides[1]))
        if changed:
            reasons.append("%s: %s" % (what, changed[0].strip().decode(
                "utf-8", "replace")))
    counts = [sorted(CHANGESETS.findall(b"\n".join(side)))
              for side in (removed, added)]
    if counts[0] != counts[1]:
        reasons.append("changeset count: %s -> %s" % tuple(
            " ".join(c.decode() for c in side) or "-" for side in counts))
    if reasons:
        return "defect", reasons
    if not removed and not added and not why:
        return "baseline", ["the baseline's own output"]

    def unexplained(lines):
        left = {}
        for line in lines:
            rest = OURS.sub(b"", line)
            if rest != line:
                why.add("lines naming our extensions, files or IDs")
                if OWN_MESSAGE.search(line) or not re.sub(
                        rb"[\W\d]|extensions", b"", rest):
                    continue
            key = comparable(rest)
            if new_ids:
                # Nodes of several lines change how a graph is laid out:
                # its edges are no part of the comparison.
                if GRAPH_ONLY.match(rest) and GRAPH_EDGE.search(rest):
                    continue
                key = b" ".join(w for w in key.split()
                                if not GRAPH_EDGE.fullmatch(w))
            left.setdefault(key, []).append(rest)
        return left

    gone, new = unexplained(removed), unexplained(added)
    # A reference line that is a pattern matches changed text.
    for key in list(gone):
        pattern = matcher_of(gone[key][0])
        for other in [k for k in new if pattern and k not in gone]:
            while key in gone and other in new and pattern.fullmatch(
                    new[other][0]):
                for side, k in ((gone, key), (new, other)):
                    side[k].pop()
                    if not side[k]:
                        del side[k]
    for key in set(gone) & set(new):
        same = min(len(gone[key]), len(new[key]))
        del gone[key][:same], new[key][:same]
    left = [("added", l) for lines in new.values() for l in lines] + [
        ("removed", l) for lines in gone.values() for l in lines]
    if left:
        return "unexplained", ["%s line: %s" % (
            left[0][0], left[0][1].strip().decode("utf-8", "replace"))]
    if any(masked(l) != l for l in removed + added):
        why.add("hashes, sizes or engine names")
    if not why:
        why.add("the same lines in another order")
    return "expected", sorted(why)


def result(report, name):
    return report.get(name, {}).get("result", "missing")


def compare(testdir, dirs, reports, names):
    """Rows of (test, baseline, pass, ours, class, reasons)."""
    rows = []
    baseline = reports["baseline"]
    for pass_ in [p for p in reports if p != "baseline"]:
        for name in sorted(names[pass_]):
            base, ours = result(baseline, name), result(reports[pass_], name)
            if ours == "success":
                kind, reasons = "pass", []
            elif ours == "skip":
                kind, reasons = "skip", [reports[pass_][name].get(
                    "skip", "") or "skipped"]
            elif ours != "failure":
                kind, reasons = "defect", ["did not finish: %s" % ours]
            else:
                reference = output(testdir, dirs["baseline"], name)
                kind, reasons = classify(
                    name, reference, output(testdir, dirs[pass_], name),
                    ids="extensions.commitid=" in PASSES[pass_])
            rows.append((name, base, pass_, ours, kind, reasons))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tests", nargs="*")
    parser.add_argument("--quick", action="store_true",
                        help="the short subset CI runs")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=int, default=900,
                        help="seconds a test may take (default 900)")
    parser.add_argument("--port", type=int, default=31000,
                        help="first port of the tests' servers (default "
                        "31000, away from run-tests' own default that "
                        "other runs on the machine may hold)")
    parser.add_argument("--passes", default="baseline,suite,commitid",
                        help="comma-separated passes to run (the baseline "
                        "is always there to compare with)")
    parser.add_argument("--reuse", metavar="PASSES", default="",
                        help="comma-separated passes whose last results "
                        "to classify again instead of running them, where "
                        "they cover the tests")
    parser.add_argument("--json", metavar="FILE",
                        help="write the table as JSON to FILE")
    args = parser.parse_args()
    tests = args.tests or (QUICK_TESTS if args.quick else DEFAULT_TESTS)
    history_tests = {t for area in HISTORY_AREAS for t in AREAS[area]}
    selected = {"baseline": tests, "suite": tests,
                "commitid": [t for t in tests if t in history_tests]}
    root = sdist(history.default_cache_dir())
    testdir = os.path.join(root, "tests")
    # A run of chosen tests keeps its results apart: they would replace
    # the whole run's, which --reuse reads.
    results = os.path.join(history.default_cache_dir(), "hgtests-%s%s" % (
        os.path.basename(root).split("-")[1],
        "" if tests == DEFAULT_TESTS else "-selected"))
    dirs = {p: os.path.join(results, p) for p in PASSES}
    reports, names = {}, {}
    wanted = set(args.passes.split(",")) | {"baseline"}
    for pass_, config in PASSES.items():
        if not selected[pass_] or pass_ not in wanted:
            continue
        report = os.path.join(dirs[pass_], "report.json")
        started = time.monotonic()
        if pass_ in args.reuse.split(",") and os.path.exists(report):
            with open(report) as fh:
                reports[pass_] = json.loads(fh.read().split("=", 1)[1])
        if not {n.split("#")[0] for n in reports.get(pass_, ())}.issuperset(
                selected[pass_]):
            reports[pass_] = run_pass(testdir, dirs[pass_], config,
                                      selected[pass_], args)
        names[pass_] = [n for n in reports[pass_]
                        if n.split("#")[0] in selected[pass_]]
        print("%s: %d test files, %d cases, %.0f s" % (
            pass_, len(selected[pass_]), len(names[pass_]),
            time.monotonic() - started), file=sys.stderr)
    rows = compare(testdir, dirs, reports, names)
    print("| test | baseline | pass | ours | class | why |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, base, pass_, ours, kind, reasons in rows:
        print("| %s | %s | %s | %s | %s | %s |" % (
            name, base, pass_, ours, kind,
            "; ".join(reasons).replace("|", "\\|")))
    counts = collections.Counter((r[2], r[4]) for r in rows)
    for pass_ in [p for p in PASSES if p != "baseline" and p in reports]:
        print("%s: %s" % (pass_, ", ".join(
            "%d %s" % (n, kind) for (p, kind), n in sorted(counts.items())
            if p == pass_)))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([dict(zip(("test", "baseline", "pass", "ours",
                                 "class", "why"), row)) for row in rows],
                      fh, indent=1)
    return int(any(r[4] in ("defect", "unexplained") for r in rows))


if __name__ == "__main__":
    sys.exit(main())
