"""The adversarial campaign for the Git lookup index (``gitbridge
commitid-lookup``, issue 27), with the real git, each lookup under an
address-space limit and a timeout.  The oracle is the scan: the keys of
the message of every commit a ref reaches (``git log --all``), under the
core's own reading of a typed key (``commitkeys.parse_key``).

- Hostile and oversized keys (seeded): control characters, other
  scripts' digits, separators, prefixes, bytes that are not UTF-8,
  thousands of characters, beside real keys: each lookup answers as the
  scan, or, where a key is no key, says one ``abort:`` line and nothing
  else.
- The index changed behind its back (seeded): a file of it truncated,
  grown, deleted, replaced by other bytes or by an older docket, its
  checksummed headers flipped: the answer is the scan's.  A docket
  rewritten with a valid checksum but other fields (uids that are not
  hex, counts, node width, covers): answered, or one ``abort:`` line,
  never a traceback or a wait.
- Stock git beside it (seeded sequences on a shallow clone): commits,
  amend, rebase, reset, branches and tags made and deleted,
  ``filter-branch``, ``gc --prune=now``, ``fetch --deepen`` and
  ``--unshallow``, a new commit fetched: lookups between them answer as
  the scan.
- Read-only and special files: the repository made read-only after
  seeded histories (lookups run without the capabilities that let root
  write anyway): answered as the scan, nothing written; a directory, a
  FIFO or a symbolic link (to ``/dev/zero``, nowhere, a file outside the
  repository) in place of each index file and of ``.git/shallow``: the
  docket, its lock and ``shallow`` give one ``abort:`` line and stay;
  the data files are built again; nothing outside is written.

Left out by design: flipped bytes inside the table's, tail's or nodes'
records (not their headers).  A lookup reads O(log n) entries and checks
no record's checksum; ``Index.verify`` reads them all.
"""

import json
import os
import shutil
import subprocess

import pytest

import campaign
from vcsperf.core import commitindex, commitkeys
from vcsperf.core.commitid import message_keys
from vcsperf.harness import tools

pytestmark = pytest.mark.campaign

COMMITTER = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
INDEX = "commitindex"
#: Lookups run without these, so permission bits bind root too.
DROP = "-dac_override,-dac_read_search,-fowner"


def message(rng, number):
    """A message with a bug, a review, a commit ID and sometimes a
    Change-Id or a bug number of thousands of digits."""
    bug = str(100 + number) if rng.random() < 0.9 else "9" * rng.choice(
        [19, 4301, 5000])
    text = "Bug %s - change %d\n\nDifferential Revision: " \
        "https://phabricator.example/D%d\nMozReview-Commit-ID: id%d\n" % (
            bug, number, number, number)
    if rng.random() < 0.3:
        text += "Change-Id: I%040x\n" % number
    return text


class Repo:
    """A Git working repository the campaign commits to."""

    def __init__(self, git, path, rng):
        self.git, self.path, self.rng = git, path, rng
        self.number = 0

    def commit(self):
        self.number += 1
        name = "f%d" % self.number
        (self.path / name).write_text("%d\n" % self.number)
        self.git("add", name, cwd=self.path)
        self.git(*COMMITTER, "commit", "-qm",
                 message(self.rng, self.number), cwd=self.path)

    def run(self, *args):
        """``git ARGS`` here, which may fail (the CompletedProcess)."""
        return self.git.proc(*args, cwd=self.path)


def scan(git, repo):
    """{(kind, key): {sha, ...}} of every commit a ref reaches."""
    out = git("log", "--all", "-z", "--format=%H%n%B", cwd=repo)
    found = {}
    for entry in out.split("\0"):
        sha, _, text = entry.partition("\n")
        if sha.strip():
            for key in message_keys(text):
                found.setdefault(key, set()).add(sha.strip())
    return found


def typed(key):
    kind, value = key
    return "%s:%s" % (kind, value)


def lookup(env, repo, keys, unprivileged=False):
    argv = [tools.executable("gitbridge"), "commitid-lookup", "--json", "--",
            *keys]
    if unprivileged:
        argv = ["setpriv", "--inh-caps=" + DROP, "--bounding-set=" + DROP,
                *argv]
    try:
        return campaign.run_bounded(argv, env=env, cwd=repo,
                                    address_space=1 << 30, timeout=60)
    except subprocess.TimeoutExpired:
        return None


def answers_as_scan(proc, keys, expected):
    """Whether ``proc`` answered ``keys`` as the scan ``expected`` does
    (every key parses), and said nothing on stderr."""
    if proc is None or proc.returncode not in (0, 1) or proc.stderr:
        return False
    found = {}
    try:
        for item in json.loads(proc.stdout):
            found.setdefault(item["key"], set()).add(item["node"])
    except ValueError:
        return False
    wanted = {key: expected.get(commitkeys.parse_key(key), set())
              for key in keys}
    return found == {key: shas for key, shas in wanted.items() if shas} \
        and proc.returncode == (0 if all(wanted.values()) else 1)


def clean_abort(proc):
    return proc is not None and campaign.is_clean_abort(proc) and \
        proc.stdout == ""


def parses(key):
    try:
        commitkeys.parse_key(key)
        return True
    except ValueError:
        return False


def some_keys(rng, expected, count):
    keys = [typed(key) for key in rng.sample(sorted(expected),
                                             min(count, len(expected)))]
    return keys + ["review:D99999", "bug 1"]


# Hostile and oversized keys --------------------------------------------------

PIECES = ["\n", "\r", "\t", " ", "\x1b[2J", "\x7f", "\x01", "\u0661",
          "\u00b2", "\u2167", "\u200b", "\uff11", "\udcff", "%", "/", "..",
          ":", "bug", "Bug", "BUG", "bug:", "review:", "id:", "D", "I",
          "0", "1", "9", "a", "f", "-", "\u00e9", "\u202e"]


def hostile_key(rng, expected):
    choice = rng.random()
    if choice < 0.25:
        kind, value = rng.choice(sorted(expected))
        return rng.choice(["%s:%s" % (kind, value), value,
                           "%s %s" % (kind, value), "%s%s" % (kind, value),
                           value.upper(), " " + value, value + "\n"])
    if choice < 0.4:
        return rng.choice(["bug ", "D", "id:", "x", "bug:", "I"]) + \
            rng.choice("19a\u0661") * rng.choice([17, 18, 19, 40, 255, 256,
                                                   257, 4301, 20000])
    return "".join(rng.choice(PIECES) for _ in range(rng.randrange(1, 12)))


def test_hostile_and_oversized_keys(git, env, gitrepo, tally):
    repo = Repo(git, gitrepo, tally.rng)
    for _ in range(8):
        repo.commit()
    expected = scan(git, gitrepo)
    for case in range(campaign.size(25, 600)):
        keys = [hostile_key(tally.rng, expected)
                for _ in range(tally.rng.randrange(1, 4))]
        proc = lookup(env, gitrepo, keys)
        if all(parses(key) for key in keys):
            ok = answers_as_scan(proc, keys, expected)
        else:
            ok = clean_abort(proc)
        tally.case(ok, (case, [key[:40] for key in keys],
                        proc and proc.stderr[-200:]))
    tally.check()


# The index changed behind its back -----------------------------------------

def index_files(git_dir):
    return sorted(name for name in os.listdir(git_dir)
                  if name.startswith(INDEX) and name != INDEX + ".lock")


def restore(git_dir, saved):
    for name in index_files(git_dir):
        path = os.path.join(git_dir, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    for name, data in saved.items():
        with open(os.path.join(git_dir, name), "wb") as fh:
            fh.write(data)


def save(git_dir):
    saved = {}
    for name in index_files(git_dir):
        with open(os.path.join(git_dir, name), "rb") as fh:
            saved[name] = fh.read()
    return saved


def forged_docket(rng, data):
    """The docket ``data`` with one field changed and its checksum
    made right again."""
    docket = commitindex.Docket.unpack(data)
    field = rng.choice(["uid", "hexuid", "count", "width", "covers",
                        "rules"])
    part = rng.choice(["table", "tail", "nodes"])
    uid, count = getattr(docket, part)
    if field == "uid":
        setattr(docket, part, (bytes(rng.randrange(1, 256) for _ in range(
            rng.randrange(1, 16))), count))
    elif field == "hexuid":
        setattr(docket, part, (b"%016x" % rng.randrange(2 ** 64), count))
    elif field == "count":
        setattr(docket, part, (uid, rng.choice([0, 1, count + 1, 2 ** 40])))
    elif field == "width":
        docket.node_width = rng.choice([0, 1, 19, 21, 32, 2 ** 31])
    elif field == "covers":
        docket.covers = rng.choice([
            b"", b"all-reachable", b"all-reachable\nshallow",
            b"all-reachable\nshallow\n" + b"0" * 40,
            b"may-hold-unreachable\nshallow " + b"1" * 40,
            docket.covers.replace(b"may-hold-unreachable", b"all-reachable"),
            docket.covers + b"\n" + b"\xff" * 40])
    else:
        docket.rules = bytes(rng.randrange(256) for _ in range(8))
    return docket.pack(), field


def damage(rng, git_dir, saved, older):
    """Damage one file of the index; returns what was done, and whether
    a checksum guards what changed (then the answer must be the scan's)."""
    name = rng.choice(sorted(saved))
    path = os.path.join(git_dir, name)
    data = saved[name]
    what = rng.choice(["truncate", "grow", "delete", "replace", "header",
                       "older", "forge"] if name == INDEX else
                      ["truncate", "grow", "delete", "replace", "header"])
    if what == "truncate":
        with open(path, "r+b") as fh:
            fh.truncate(rng.randrange(len(data)))
    elif what == "grow":
        with open(path, "ab") as fh:
            fh.write(os.urandom(rng.randrange(1, 100)))
    elif what == "delete":
        os.unlink(path)
    elif what == "replace":
        with open(path, "wb") as fh:
            fh.write(os.urandom(rng.randrange(0, 2 * len(data) + 1)))
    elif what == "header":
        # A docket's every byte, a data file's header: checksummed.
        end = len(data) if name == INDEX else 24
        position = rng.randrange(min(end, len(data)))
        with open(path, "r+b") as fh:
            fh.seek(position)
            fh.write(bytes([data[position] ^ (1 << rng.randrange(8))]))
    elif what == "older":
        with open(path, "wb") as fh:
            fh.write(older)
    else:
        forged, field = forged_docket(rng, data)
        with open(path, "wb") as fh:
            fh.write(forged)
        return "forged %s" % field, False
    return "%s %s" % (what, name), True


def test_the_index_changed_behind_its_back(git, gitbridge, env, gitrepo,
                                           tally):
    repo = Repo(git, gitrepo, tally.rng)
    git_dir = str(gitrepo / ".git")
    for _ in range(6):
        repo.commit()
    gitbridge("commitid-lookup", "D1", cwd=gitrepo)
    older = save(git_dir)[INDEX]
    for _ in range(4):
        repo.commit()
    # A rewrite, so the docket says some indexed commit is unreachable
    # (the lookups that check each answer).
    if tally.rng.random() < 0.5:
        gitbridge("commitid-lookup", "D1", cwd=gitrepo)
        repo.run(*COMMITTER, "commit", "-q", "--amend", "-m", "amended")
    gitbridge("commitid-lookup", "D1", cwd=gitrepo)
    saved = save(git_dir)
    expected = scan(git, gitrepo)
    for case in range(campaign.size(24, 400)):
        restore(git_dir, saved)
        what, guarded = damage(tally.rng, git_dir, saved, older)
        keys = some_keys(tally.rng, expected, 6)
        proc = lookup(env, gitrepo, keys)
        if guarded:
            ok = answers_as_scan(proc, keys, expected)
        else:
            ok = answers_as_scan(proc, keys, expected) or clean_abort(proc) \
                or (proc is not None and proc.returncode in (0, 1)
                    and not proc.stderr)
        if guarded:
            # And the next lookup, from what this one built.
            ok = ok and answers_as_scan(lookup(env, gitrepo, keys), keys,
                                        expected)
        tally.case(ok, (case, what, proc and proc.stderr[-300:]))
    tally.check()


# Stock git beside it ---------------------------------------------------------

def git_step(rng, source, clone):
    """One thing a user does with stock git to the clone."""
    step = rng.choice(["commit", "commit", "amend", "rebase", "reset",
                       "branch", "delete", "tag", "untag", "gc", "filter",
                       "deepen", "unshallow", "fetch"])
    if step == "commit":
        clone.commit()
    elif step == "amend":
        clone.run(*COMMITTER, "commit", "-q", "--amend", "-m",
                  message(rng, 1000 + rng.randrange(100)))
    elif step == "rebase":
        if clone.run(*COMMITTER, "rebase", "-q", "--onto", "HEAD~2",
                     "HEAD~1").returncode:
            clone.run("rebase", "--abort")
    elif step == "reset":
        clone.run("reset", "-q", "--hard", "HEAD~1")
    elif step == "branch":
        clone.run("branch", "-f", "b%d" % rng.randrange(3),
                  "HEAD~%d" % rng.randrange(3))
    elif step == "delete":
        clone.run("branch", "-q", "-D", "b%d" % rng.randrange(3))
    elif step == "tag":
        clone.run("tag", "-f", "t%d" % rng.randrange(3), "HEAD")
    elif step == "untag":
        clone.run("tag", "-d", "t%d" % rng.randrange(3))
    elif step == "gc":
        clone.run("reflog", "expire", "--expire=now", "--all")
        clone.run("gc", "-q", "--prune=now")
    elif step == "filter":
        clone.run(*COMMITTER, "filter-branch", "-f", "--msg-filter",
                  "sed 's/^Bug 1/Bug 2/'", "HEAD~2..HEAD")
    elif step == "deepen":
        clone.run("fetch", "-q", "--deepen", str(rng.randrange(1, 4)))
    elif step == "unshallow":
        clone.run("fetch", "-q", "--unshallow")
    else:
        source.commit()
        clone.run("fetch", "-q", "origin")
    return step


def shallow_clone(git, tmp_path, rng, env):
    # git filter-branch sleeps 10 s after its warning otherwise.
    env["FILTER_BRANCH_SQUELCH_WARNING"] = "1"
    source = Repo(git, tmp_path / "source", rng)
    git("init", "-q", "-b", "main", source.path)
    for _ in range(12):
        source.commit()
    path = tmp_path / "clone"
    git("clone", "-q", "--depth", "3", "file://%s" % source.path, path)
    clone = Repo(git, path, rng)
    clone.number = 500
    return source, clone


def test_stock_git_rewrites_history_beside_it(git, env, tmp_path, tally):
    source, clone = shallow_clone(git, tmp_path, tally.rng, env)
    steps = []
    for case in range(campaign.size(30, 300)):
        steps.append(git_step(tally.rng, source, clone))
        if tally.rng.random() < 0.5:
            continue
        expected = scan(git, clone.path)
        keys = some_keys(tally.rng, expected, 8)
        proc = lookup(env, clone.path, keys)
        tally.case(answers_as_scan(proc, keys, expected),
                   (case, steps[-6:], proc and proc.stderr[-300:]))
        if tally.rng.random() < 0.1:
            # Lookups run with --rebuild now and then, as a hook would.
            subprocess.run([tools.executable("gitbridge"), "commitid-lookup",
                            "--rebuild", "D1"], cwd=clone.path, env=env,
                           capture_output=True, timeout=60)
    tally.check()


# Read-only and special files -------------------------------------------------

def snapshot(directory):
    return {os.path.join(root, name): (
        os.lstat(os.path.join(root, name)).st_size,
        os.lstat(os.path.join(root, name)).st_mtime_ns)
        for root, dirs, files in os.walk(directory)
        for name in dirs + files}


@pytest.mark.skipif(not shutil.which("setpriv"), reason="needs setpriv")
def test_a_read_only_repository(git, env, tmp_path, tally):
    source, clone = shallow_clone(git, tmp_path, tally.rng, env)
    git_dir = clone.path / ".git"
    for case in range(campaign.size(6, 60)):
        for _ in range(tally.rng.randrange(1, 4)):
            git_step(tally.rng, source, clone)
        if tally.rng.random() < 0.6:
            lookup(env, clone.path, ["D1"])
        expected = scan(git, clone.path)
        keys = some_keys(tally.rng, expected, 8)
        target = tally.rng.choice(["repository", "index files"])
        paths = [git_dir] if target == "repository" else [
            git_dir / name for name in index_files(str(git_dir))] + [git_dir]
        if target == "index files" and len(paths) > 1:
            # The directory writable, the index files not.
            paths = paths[:-1]
        try:
            subprocess.run(["chmod", "-R", "a-w", *paths], check=True)
            before = snapshot(git_dir)
            proc = lookup(env, clone.path, keys, unprivileged=True)
            ok = answers_as_scan(proc, keys, expected) and \
                (target != "repository" or snapshot(git_dir) == before)
        finally:
            subprocess.run(["chmod", "-R", "u+w", git_dir], check=True)
        tally.case(ok, (case, target, proc and proc.stderr[-300:]))
    tally.check()


def special(kind, path, outside):
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        os.mkdir(path)
        (path / "inside").write_bytes(b"kept")
    elif kind == "zero":
        os.symlink("/dev/zero", path)
    elif kind == "dangling":
        os.symlink("/nonexistent/vcsperf", path)
    else:
        os.symlink(outside, path)


def remove(path):
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def test_special_files_in_place_of_the_index(git, env, tmp_path, tally):
    source, clone = shallow_clone(git, tmp_path, tally.rng, env)
    git_dir = clone.path / ".git"
    outside = tmp_path / "outside"
    outside.write_bytes(b"not the index's\n")
    for case in range(campaign.size(18, 200)):
        lookup(env, clone.path, ["D1"])
        names = index_files(str(git_dir))
        name = tally.rng.choice(names + [INDEX, INDEX + ".lock", "shallow"])
        kind = tally.rng.choice(["fifo", "directory", "zero", "dangling",
                                 "outside"])
        path = git_dir / name
        kept = None
        if name == "shallow":
            kept = path.read_bytes() if path.exists() else None
        remove(path)
        special(kind, path, outside)
        expected = scan(git, clone.path) if name != "shallow" else {}
        keys = some_keys(tally.rng, expected, 6) if expected else ["D1"]
        proc = lookup(env, clone.path, keys)
        if name in (INDEX, INDEX + ".lock"):
            ok = clean_abort(proc) and os.path.lexists(path) and \
                not (path.is_file() and not path.is_symlink())
        elif name == "shallow":
            # Git's own file: refused, or read as Git reads it, never
            # waited on.
            ok = proc is not None and (clean_abort(proc) or (
                proc.returncode in (0, 1) and not proc.stderr))
        else:
            ok = answers_as_scan(proc, keys, expected)
        ok = ok and outside.read_bytes() == b"not the index's\n"
        tally.case(ok, (case, name, kind, proc and proc.stderr[-300:]))
        remove(path)
        if kept is not None:
            path.write_bytes(kept)
        if tally.rng.random() < 0.2:
            git_step(tally.rng, source, clone)
    tally.check()
