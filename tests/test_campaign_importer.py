"""The adversarial campaign for the pastbytes importer's scanner (issue 18).

- Time: for each family of adversarial sources (tests/pastbytes_hostile.py:
  CRLF, CR and LF mixes after literals, runs of quotes and backslashes,
  unterminated strings, nested f-strings and calls, ...), a source 8 times
  larger costs at most 24 times the CPU time (linear: 8; quadratic: 64),
  and at most 25 ms per KB.  Measured in a subprocess with a timeout, so
  a hang is a failure and not a stuck run; on this Python and on the
  Pythons 3.12+ installed (whose tokenizer nests f-strings).
- Any source, random or built from statements: the rewrite ends within a
  CPU second in the rewritten source or a ScanError, never another
  exception; when the source compiles, so does its rewrite, and the
  rewrite is its own rewrite (hypothesis here; seeded batches on 3.12+).
- Crafted extension files, loaded by hg with the whole suite and rewritten
  by contrib/pastbytes_rewrite.py under an address-space limit and a
  timeout: they load or fail with Mercurial's one-line warning, and the
  tool rewrites them or says why not, never with a traceback.
- contrib/pastbytes_rewrite.py on a tree of hostile files among good ones
  (missing, nested deeper than the compiler goes, a FIFO, a symbolic link
  to /dev/zero or to a good file, a folder named ``*.py``, a read-only
  file): each hostile file gets one line and stays as it was, every good
  one is rewritten, nothing is left behind, and the run ends, bounded.
"""

import json
import os
import random
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, seed, settings, strategies as st

import campaign
import pastbytes
import pastbytes_hostile as hostile
from test_all_extensions import SUITE
from test_pastbytes import REWRITE_TOOL, other_pythons

HERE = os.path.dirname(os.path.abspath(__file__))
GROWTH = 8
MAX_RATIO = 24
MAX_SECONDS_PER_KB = 0.025
# A smaller input's time is never taken as less than this: below it, the
# clock and the interpreter's own noise decide the ratio.
FLOOR = 0.002


def pythons():
    """``[(label, python)]``: this Python, and the newest installed 3.12+
    (every one of them in a full run)."""
    newer = sorted(other_pythons().items(),
                   key=lambda item: tuple(map(int, item[0].split("."))))
    if not campaign.FULL:
        newer = newer[-1:]
    return [("%d.%d" % sys.version_info[:2], sys.executable)] + newer


@pytest.fixture
def worker(tmp_path):
    """Runs tests/pastbytes_hostile.py under a Python, on the installed
    pastbytes, with a request; returns its answer."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "pastbytes").symlink_to(os.path.dirname(pastbytes.__file__))
    env = dict(os.environ, PYTHONPATH=str(shim))

    def run(python, request, timeout):
        proc = subprocess.run(
            [python, os.path.join(HERE, "pastbytes_hostile.py")],
            input=json.dumps(request), env=env, capture_output=True,
            text=True, timeout=timeout, check=True)
        return json.loads(proc.stdout)
    return run


@pytest.mark.slow
@pytest.mark.campaign
def test_scan_time_grows_linearly(tally, worker):
    size = campaign.size(4000, 16000)
    variants = campaign.size(1, 2)
    for label, python in pythons():
        for name, make in sorted(hostile.FAMILIES.items()):
            for _ in range(variants):
                variant = tally.rng.randrange(2 ** 32)
                small = make(random.Random(variant), size)
                big = make(random.Random(variant), size * GROWTH)
                what = "%s, Python %s, variant %d" % (name, label, variant)
                try:
                    (short, first), (long, second) = worker(
                        python, {"time": [small, big], "repeat": 3},
                        timeout=campaign.size(60, 180))
                except subprocess.TimeoutExpired:
                    tally.case(False, what + ": no end within the timeout")
                    continue
                ratio = long / max(short, FLOOR)
                per_kb = long / (len(big) / 1024)
                print("%-45s %-9s %.4f s  %-9s %.4f s  x%.1f  %.2f ms/KB" % (
                    what, first[:9], short, second[:9], long, ratio,
                    per_kb * 1000))
                tally.case(ratio <= MAX_RATIO and per_kb <= MAX_SECONDS_PER_KB
                           and {first, second} <= {"ok", "ScanError"},
                           "%s: %s then %s, x%.1f, %.1f ms/KB" % (
                               what, first, second, ratio, per_kb * 1000))
    tally.check()


@st.composite
def built_sources(draw):
    """Statements joined by random line ends, with comment lines."""
    count = draw(st.integers(0, 20))

    def some(strategy):
        return draw(st.lists(strategy, min_size=count, max_size=count))
    return hostile.statements_source(
        some(st.sampled_from(hostile.STATEMENTS)),
        some(st.sampled_from(hostile.LINE_ENDS)), some(st.booleans()))


SOURCES = st.one_of(
    st.lists(st.sampled_from(hostile.TOKENS), max_size=60).map("".join),
    built_sources(),
    st.text(max_size=200))


@pytest.mark.slow
@pytest.mark.campaign
def test_any_source_ends_in_its_rewrite_or_a_clean_error(tally):
    @settings(max_examples=campaign.size(400, 10000), deadline=None,
              derandomize=not campaign.FULL,
              suppress_health_check=[HealthCheck.too_slow])
    @seed(tally.seed)
    @given(SOURCES)
    def rewrite(source):
        failure = hostile.check(source)
        tally.case(failure is None, "%r: %s" % (source[:300], failure))
        assert failure is None, failure

    rewrite()
    tally.check()


@pytest.mark.campaign
def test_any_source_on_newer_tokenizers(tally, worker):
    newer = pythons()[1:]
    if not newer:
        pytest.skip("no Python 3.12+ installed")
    for label, python in newer:
        sources = [hostile.random_source(tally.rng, tally.rng.randint(1, 40))
                   for _ in range(campaign.size(400, 10000))]
        for source, failure in zip(sources, worker(
                python, {"check": sources}, timeout=campaign.size(60, 900))):
            tally.case(failure is None, "Python %s: %r: %s" % (
                label, source[:300], failure))
    tally.check()


@pytest.mark.campaign
def test_crafted_extensions_load_or_fail_cleanly(tally, hg, hgrc, hgrepo,
                                                 tmp_path):
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    names = sorted(hostile.FAMILIES)
    crafted = []
    for index in range(campaign.size(3, 20)):
        if index % 2:
            source = hostile.random_source(tally.rng, 40)
        else:
            source = hostile.FAMILIES[tally.rng.choice(names)](
                tally.rng, 64000)
        name = "crafted%d" % index
        (legacy / (name + ".py")).write_bytes(
            source.encode())
        crafted.append(name)
    with open(hgrc, "a") as fh:
        fh.write("[extensions]\n%s%s[pastbytes]\npaths = %s\n" % (
            "".join("%s =\n" % name for name in SUITE),
            "".join("%s = %s/%s.py\n" % (name, legacy, name)
                    for name in crafted), legacy))
    proc = campaign.run_bounded([hg.binary, "root"], hg.env, cwd=hgrepo,
                                address_space=2 << 30, timeout=120)
    failed = proc.stderr.count("*** failed to import extension")
    print("hg root with %d crafted extensions: exit %d, %d failed to import"
          % (len(crafted), proc.returncode, failed))
    tally.case(proc.returncode == 0 and proc.stdout == "%s\n" % hgrepo
               and "Traceback" not in proc.stderr,
               "hg root: %d %r" % (proc.returncode, proc.stderr[-2000:]))
    for name in crafted:
        path = legacy / (name + ".py")
        proc = campaign.run_bounded([sys.executable, REWRITE_TOOL, str(path)],
                                    address_space=2 << 30, timeout=60)
        tally.case(proc.returncode in (0, 1) and "Traceback" not in
                   proc.stderr and (proc.returncode == 0 or
                                    "not rewritten: " in proc.stderr),
                   "pastbytes_rewrite %s: %d %r" % (
                       name, proc.returncode, proc.stderr[-2000:]))
    tally.check()


def hostile_tree(rng, root):
    """A folder of legacy sources for the rewrite tool, hostile files among
    good ones; returns ``(good, hostile)``: the good files' names and the
    hostile ones' (whose bytes, or link, must stay as they are)."""
    good, hostile = [], []
    for index in range(rng.randint(1, 4)):
        name = "good%d.py" % index
        (root / name).write_text("x = 'a%d'\n" % index)
        good.append(name)
    kinds = ["sum", "unary", "fifo", "zero", "link", "folder", "readonly"]
    for index, kind in enumerate(rng.sample(kinds, rng.randint(2, 5))):
        name = "%s%d.py" % (kind, index)
        path = root / name
        depth = rng.randint(50000, 200000)
        if kind == "sum":
            path.write_text("x = 'a'\ny = 1" + " + 1" * depth + "\n")
        elif kind == "unary":
            path.write_text("x = 'a'\ny = " + "-" * depth + "1\n")
        elif kind == "fifo":
            os.mkfifo(str(path))
        elif kind == "zero":
            path.symlink_to("/dev/zero")
        elif kind == "link":
            path.symlink_to(good[0])
        elif kind == "folder":
            path.mkdir()
            continue
        elif kind == "readonly":
            # Read-only files are rewritten (replaced, mode kept): good.
            path.write_text("x = 'r'\n")
            path.chmod(0o444)
            good.append(name)
            continue
        hostile.append(name)
    return good, hostile


def snapshot(root, names):
    """What each of ``names`` is now: a link's target or a file's bytes
    (a FIFO's mode)."""
    found = {}
    for name in names:
        path = root / name
        if path.is_symlink():
            found[name] = ("link", os.readlink(str(path)))
        elif path.is_fifo():
            found[name] = ("fifo",)
        else:
            found[name] = ("file", path.read_bytes())
    return found


@pytest.mark.campaign
def test_rewrite_tool_on_hostile_trees(tally, tmp_path):
    for round_ in range(campaign.size(3, 30)):
        root = tmp_path / ("tree%d" % round_)
        root.mkdir()
        good, hostile = hostile_tree(tally.rng, root)
        before = snapshot(root, hostile)
        missing = "missing%d.py" % round_
        args = [sys.executable, REWRITE_TOOL, "."]
        if tally.rng.random() < 0.5:
            args.append(missing)
            hostile.append(missing)
        what = "round %d: good %s, hostile %s" % (round_, good, hostile)
        try:
            proc = campaign.run_bounded(args, cwd=str(root), timeout=60)
        except subprocess.TimeoutExpired:
            tally.case(False, what + ": no end within 60 s")
            continue
        lines = proc.stderr.splitlines()
        reported = sorted(os.path.basename(line.split(": not rewritten: ")[0])
                          for line in lines)
        names = set(os.listdir(str(root)))
        tally.case(
            proc.returncode == 1 and "Traceback" not in proc.stderr
            and reported == sorted(hostile)
            and all(": not rewritten: " in line for line in lines)
            and snapshot(root, [h for h in hostile if h != missing])
            == before
            and all((root / name).read_text().startswith("x = b'")
                    for name in good)
            and not any(name.startswith(".pastbytes-") for name in names),
            "%s: exit %d, %r" % (what, proc.returncode, proc.stderr[-2000:]))
    tally.check()
