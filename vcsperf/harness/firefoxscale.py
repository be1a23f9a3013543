"""The Firefox-scale benchmark repository, built from real content: the
repository that the time-to-tree benchmark (Git) and the check, store and
robustcheckout figures at Firefox scale (Mercurial) run on.

::

    python -m vcsperf.harness.firefoxscale --dir DIR [options]

builds, in ``DIR`` (never in a checkout of ours):

1. the sources: Debian's source packages of two Thunderbird ESR
   releases (``apt-get source --download-only``, which needs a
   ``deb-src`` entry), each a whole Firefox tree plus ``comm/``; the
   upstream tarball of each (``*.orig.tar.xz``, checked against the
   ``.dsc``) is unpacked into ``trees/tb-VERSION`` (Debian's packaging
   and the localisation tarball are left out);
2. the Git form, the bare repository ``firefox-scale.git``, branch
   ``main``: one commit of each tree, oldest first, with a fixed author
   and dates, then the newest ``--pdfjs-commits`` first-parent commits of
   pdf.js (which Firefox vendors; Mozilla keeps vendored upstreams under
   ``third_party/``) replayed under ``third_party/pdf.js/`` as a linear
   history keeping each commit's author, committer, dates and message,
   so that the changes near the tip are real ones; it stands alone
   (``git repack -a -d``, no alternates) and passes ``git fsck``;
3. the Mercurial form, ``firefox-scale-hg``: ``hg convert`` of the Git
   form, then ``hg verify``.

Every stage leaves a marker in ``DIR/markers`` (what it made and how
long it took) and a rerun skips the stages that have one, so a killed
build goes on where it stopped; ``DIR/summary.json`` holds the figures.
The same inputs make the same commit IDs.  A history read from a
snapshot that omits big blobs (files of 4 MiB and more) gets a small
placeholder blob for each missing one, naming it; ``summary.json``
counts them.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

from vcsperf.core.bundlestore import sha256_file
from vcsperf.core.errors import Abort, print_abort
from vcsperf.core.process import CommandError, executable, run

#: The two Thunderbird ESR releases of Debian 12 whose trees are the
#: first two commits (the versions ``apt-get source`` is given).
THUNDERBIRD_VERSIONS = ("1:115.16.0esr-1~deb12u1", "1:140.12.0esr-1~deb12u1")
PDFJS_URL = "https://github.com/mozilla/pdf.js"
#: pdf.js's master when this repository was first built: the replayed
#: history ends here, whatever the clone holds beyond it.
PDFJS_TIP = "0f26334f9d6f96119f6e5164fb65832fbbde7344"
PDFJS_COMMITS = 3999
SUBDIR = "third_party/pdf.js"
#: Author and committer of the tree commits.
TREE_AUTHOR = ("vcsperf firefoxscale", "firefoxscale@vcsperf.invalid")
GIT_NAME = "firefox-scale.git"
HG_NAME = "firefox-scale-hg"
DAY = 86400
#: Modes of the entries Git stores as blobs (gitlinks, 160000, are
#: another repository's commits and are left out).
BLOB_MODES = (b"100644", b"100755", b"120000")


def log(message):
    """One line of progress, with the time, on stdout (the build log)."""
    print(time.strftime("%H:%M:%S ") + message, flush=True)


class Stages:
    """The markers of the finished stages, in ``DIR/markers``: one JSON
    file per stage with what it made and its seconds."""

    def __init__(self, directory):
        self.directory = os.path.join(directory, "markers")
        os.makedirs(self.directory, exist_ok=True)

    def _path(self, name):
        return os.path.join(self.directory, name + ".json")

    def done(self, name):
        """The record of stage ``name``, or None when it has not finished."""
        try:
            with open(self._path(name)) as fh:
                return json.load(fh)
        except FileNotFoundError:
            return None

    def run(self, name, build):
        """The record of stage ``name``: its marker's, or what ``build()``
        returns (a dict) once it has run, with its seconds."""
        record = self.done(name)
        if record is not None:
            log("%s: done before (%.0f s), skipped" % (name, record["seconds"]))
            return record
        log("%s: starting" % name)
        start = time.monotonic()
        record = dict(build() or {}, seconds=round(time.monotonic() - start, 1))
        temporary = self._path(name) + ".tmp"
        with open(temporary, "w") as fh:
            json.dump(record, fh, indent=1, sort_keys=True)
        os.replace(temporary, self._path(name))
        log("%s: done in %.0f s" % (name, record["seconds"]))
        return record

    def seconds(self):
        """Stage name -> seconds, of every finished stage."""
        found = {}
        for file in sorted(os.listdir(self.directory)):
            if file.endswith(".json"):
                found[file[:-5]] = self.done(file[:-5])["seconds"]
        return found


def git_env(name=None, email=None, date=None):
    """The environment of our git commands: no user or system
    configuration, the C locale, and the identity and date given."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull,
               LC_ALL="C", GIT_TERMINAL_PROMPT="0")
    if name:
        env.update(GIT_AUTHOR_NAME=name, GIT_AUTHOR_EMAIL=email,
                   GIT_COMMITTER_NAME=name, GIT_COMMITTER_EMAIL=email,
                   GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date)
    return env


def logged(name, args, env):
    """Run ``args`` (the command ``name``) with its output going to ours
    (the build log), for the long steps whose progress is worth seeing;
    Abort on failure."""
    status = subprocess.run(args, env=env).returncode
    if status:
        raise Abort("%s failed (%d)" % (name, status),
                    hint="its message is above; run the build again to go "
                    "on from the stage that failed")


def git(gitdir, *args, env=None):
    """``git --git-dir=GITDIR ARGS``: its stdout as text."""
    return run(["git", "--git-dir=" + gitdir, *args], env or git_env())


def git_bytes(gitdir, *args, input=None):
    """``git --git-dir=GITDIR ARGS`` whose input or output is bytes
    (paths and messages in any encoding), which the core's text runner
    does not carry."""
    proc = subprocess.run(["git", "--git-dir=" + gitdir, *args], input=input,
                          env=git_env(), capture_output=True)
    if proc.returncode:
        raise CommandError(proc.returncode, proc.args, proc.stdout,
                           proc.stderr.decode("utf-8", "replace"))
    return proc.stdout


# -- 1. the sources --------------------------------------------------------

def upstream_version(version):
    """``115.16.0esr`` of the Debian version ``1:115.16.0esr-1~deb12u1``."""
    return version.split(":", 1)[-1].rsplit("-", 1)[0]


def dsc_checksums(dsc):
    """File name -> sha256 from the ``Checksums-Sha256`` field of ``dsc``."""
    sums, inside = {}, False
    with open(dsc) as fh:
        for line in fh:
            if line.startswith("Checksums-Sha256:"):
                inside = True
            elif inside and line.startswith(" "):
                digest, _, name = line.split()
                sums[name] = digest
            else:
                inside = False
    return sums


def fetch_source(version, debsrc):
    """The upstream tarball of Debian's ``thunderbird=VERSION`` in
    ``debsrc``: downloaded with ``apt-get source`` unless a copy there
    matches the checksum its ``.dsc`` gives."""
    os.makedirs(debsrc, exist_ok=True)
    upstream = upstream_version(version)
    dsc = os.path.join(debsrc, "thunderbird_%s.dsc" % version.split(":")[-1])
    tarball = "thunderbird_%s.orig.tar.xz" % upstream
    if not os.path.exists(dsc):
        try:
            run(["apt-get", "source", "--download-only",
                 "thunderbird=" + version], None, cwd=debsrc)
        except (CommandError, RuntimeError, OSError) as failure:
            last = str(failure).strip().splitlines()[-1:] or [""]
            raise Abort("apt-get source thunderbird=%s failed: %s"
                        % (version, last[0]),
                        hint="it needs a deb-src entry for the mirror apt "
                        "uses (Types: deb-src in a file of "
                        "/etc/apt/sources.list.d/, then apt-get update), "
                        "or pass --debsrc DIR holding the downloaded files")
    expected = dsc_checksums(dsc).get(tarball)
    path = os.path.join(debsrc, tarball)
    actual = sha256_file(path)[0]
    if actual != expected:
        raise Abort("%s does not match its .dsc (sha256 %s, expected %s)"
                    % (path, actual, expected),
                    hint="remove it and the .dsc and run again")
    return {"tarball": path, "sha256": actual}


def unpack(tarball, tree):
    """Unpack ``tarball`` into the directory ``tree``, without its top
    directory, and mark it done with ``TREE.unpacked`` (JSON: the
    tarball and the files), which lets any later build reuse it; a
    half-unpacked tree from a killed run is started over."""
    marker = tree + ".unpacked"
    if os.path.exists(marker):
        with open(marker) as fh:
            return dict(json.load(fh), reused=True)
    if os.path.exists(tree):
        raise Abort("%s exists but has no marker %s" % (tree, marker),
                    hint="remove it to unpack it again, or if it is a whole "
                    "copy of %s unpacked without its top directory, write "
                    "the marker: {\"tarball\": ..., \"files\": N}" % tarball)
    partial = tree + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    run(["tar", "-xJf", tarball, "-C", partial, "--strip-components=1",
         "--no-same-owner"], None)
    os.rename(partial, tree)
    record = {"tarball": tarball, "files": count_files(tree)}
    with open(marker, "w") as fh:
        json.dump(record, fh)
    return record


def count_files(tree):
    """Files and symbolic links under ``tree``."""
    count = 0
    for top, dirs, files in os.walk(tree):
        count += len(files) + sum(
            os.path.islink(os.path.join(top, d)) for d in dirs)
    return count


# -- 2. the Git form -------------------------------------------------------

def nested_repositories(tree):
    """Paths (relative, ``/``-separated) of the directories of ``tree``
    holding a ``.git`` of their own: git would add them as gitlinks,
    which a tree of sources has no business with."""
    found = []
    for top, dirs, files in os.walk(tree):
        if top != tree and (".git" in dirs or ".git" in files):
            found.append(os.path.relpath(top, tree).replace(os.sep, "/"))
            dirs[:] = []
        dirs[:] = [d for d in dirs if d != ".git"]
    return sorted(found)


def commit_tree(gitdir, tree, index, message, parent, date):
    """Commit the whole directory ``tree`` on ``parent`` (or none), every
    file whatever a ``.gitignore`` says, with the fixed author and
    ``date``: its commit ID and the number of files."""
    if os.path.exists(index):
        os.unlink(index)
    env = dict(git_env(), GIT_INDEX_FILE=index)
    excluded = [":(exclude,literal)" + path
                for path in nested_repositories(tree)]
    # The bytes as they are: no end-of-line conversion or filter that a
    # .gitattributes of the tree asks for (info/attributes comes first).
    attributes = os.path.join(gitdir, "info", "attributes")
    os.makedirs(os.path.dirname(attributes), exist_ok=True)
    with open(attributes, "w") as fh:
        fh.write("* -text -eol -filter -ident -working-tree-encoding\n")
    try:
        run(["git", "--git-dir=" + gitdir, "--work-tree=" + tree, "add",
             "-A", "-f", "--", ".", *excluded], env, cwd=tree)
    finally:
        os.unlink(attributes)
    tree_id = run(["git", "--git-dir=" + gitdir, "write-tree"], env).strip()
    os.unlink(index)
    env = git_env(*TREE_AUTHOR, date="@%d +0000" % date)
    commit = run(["git", "--git-dir=" + gitdir, "commit-tree", tree_id,
                  *(["-p", parent] if parent else []), "-m", message],
                 env).strip()
    files = int(git(gitdir, "ls-tree", "-r", "--name-only", "-z", tree_id)
                .count("\0"))
    return {"commit": commit, "tree": tree_id, "files": files,
            "nested_repositories_left_out": excluded}


def clone(url, gitdir):
    """A bare clone of ``url`` at ``gitdir`` (a killed one started over)."""
    shutil.rmtree(gitdir + ".tmp", ignore_errors=True)
    run(["git", "clone", "--bare", "-q", url, gitdir + ".tmp"], git_env())
    os.rename(gitdir + ".tmp", gitdir)
    return {"clone": gitdir, "from": url}


def replayed_commits(source, tip, count):
    """The newest ``count`` first-parent commits up to ``tip`` of the
    repository ``source``, oldest first."""
    ids = git(source, "rev-list", "--first-parent", "-n", str(count), tip,
              "--").split()
    return ids[::-1]


def raw_commit(source, ids):
    """Commit ID -> the commit object's bytes, for ``ids``."""
    out = git_bytes(source, "cat-file", "--batch",
                    input=b"".join(i.encode() + b"\n" for i in ids))
    found, at = {}, 0
    while at < len(out):
        header_end = out.index(b"\n", at)
        oid, kind, size = out[at:header_end].split()
        body_start = header_end + 1
        found[oid.decode()] = out[body_start:body_start + int(size)]
        at = body_start + int(size) + 1
    return found


def parse_commit(data):
    """``(author, committer, encoding, message)`` of a raw commit object:
    the first two as Git writes them (``Name <email> SECONDS ZONE``),
    which is what ``git fast-import`` reads."""
    headers, _, message = data.partition(b"\n\n")
    fields = {}
    for line in headers.split(b"\n"):
        if line.startswith(b" "):  # a continuation (gpgsig, mergetag)
            continue
        key, _, value = line.partition(b" ")
        fields.setdefault(key, value)
    return fields[b"author"], fields[b"committer"], \
        fields.get(b"encoding"), message


def changes_after(source, first, tip):
    """Commit ID -> its changes against its first parent, ``(old mode,
    new mode, new blob, status, path)`` (bytes), for each first-parent
    commit after ``first`` up to ``tip``."""
    out = git_bytes(source, "log", "--first-parent",
                    "--diff-merges=first-parent", "--raw", "--no-renames",
                    "--no-abbrev", "-r", "--reverse", "-z", "--format=%H",
                    "%s..%s" % (first, tip), "--")
    changes, current = {}, None
    tokens = iter(out.split(b"\0"))
    for token in tokens:
        token = token.lstrip(b"\n")
        if not token:
            continue
        if token.startswith(b":"):
            old_mode, new_mode, _, new_id, status = token[1:].split(b" ")
            changes[current].append((old_mode, new_mode, new_id, status,
                                     next(tokens)))
        else:
            current = token.decode()
            changes[current] = []
    return changes


def full_tree(source, commit):
    """``(mode, blob, path)`` of every entry of ``commit``'s tree."""
    entries = []
    for line in git_bytes(source, "ls-tree", "-r", "-z", commit).split(b"\0"):
        if line:
            info, _, path = line.partition(b"\t")
            mode, _, oid = info.split(b" ")
            entries.append((mode, oid, path))
    return entries


def present_blobs(source):
    """The IDs of every blob ``source`` holds (bytes, hex)."""
    out = git_bytes(source, "cat-file", "--batch-all-objects",
                    "--batch-check=%(objectname) %(objecttype)")
    return {line[:-5] for line in out.split(b"\n") if line.endswith(b" blob")}


def quoted(path):
    """``path`` as ``git fast-import`` reads one: C-quoted when it starts
    with a quote or holds a newline, as is (spaces and all) otherwise."""
    if not (path.startswith(b'"') or b"\n" in path):
        return path
    escaped = path.replace(b"\\", b"\\\\").replace(b'"', b'\\"') \
        .replace(b"\n", b"\\n")
    return b'"' + escaped + b'"'


def placeholder(oid):
    """The text of the blob that stands for the missing blob ``oid``."""
    return (b"vcsperf firefoxscale: placeholder for blob %s, which the "
            b"history this repository was built from lacked (a snapshot "
            b"leaving out files of 4 MiB and more).\n" % oid)


def replay_stream(source, commits, base, subdir, present, out):
    """Write to ``out`` the ``git fast-import`` stream that replays
    ``commits`` of ``source`` (oldest first) under ``subdir`` on top of
    the commit ``base``, on ``refs/heads/main``: how many placeholder
    blobs it holds."""
    prefix = subdir.strip("/").encode() + b"/"
    raw = raw_commit(source, commits)
    changes = changes_after(source, commits[0], commits[-1])
    marks = {}

    def blob(oid):
        """``oid``, or the mark of its placeholder when it is missing."""
        if oid in present:
            return oid
        if oid not in marks:
            marks[oid] = b":%d" % (len(marks) + 1)
            data = placeholder(oid)
            out.write(b"blob\nmark %s\ndata %d\n%s\n"
                      % (marks[oid], len(data), data))
        return marks[oid]

    for number, commit in enumerate(commits, 1):
        lines = []
        if number == 1:
            lines.append(b"D " + quoted(prefix[:-1]))
            for mode, oid, path in full_tree(source, commit):
                if mode in BLOB_MODES:
                    lines.append(b"M %s %s %s"
                                 % (mode, blob(oid), quoted(prefix + path)))
        else:
            for old_mode, new_mode, oid, status, path in changes[commit]:
                if status == b"D" or new_mode not in BLOB_MODES:
                    # A deletion, or an entry becoming a gitlink: the
                    # blob it was goes; a gitlink was never written.
                    if old_mode in BLOB_MODES:
                        lines.append(b"D " + quoted(prefix + path))
                else:
                    lines.append(b"M %s %s %s"
                                 % (new_mode, blob(oid), quoted(prefix + path)))
        author, committer, encoding, message = parse_commit(raw[commit])
        out.write(b"commit refs/heads/main\nauthor %s\ncommitter %s\n"
                  % (author, committer))
        if encoding:
            out.write(b"encoding %s\n" % encoding)
        out.write(b"data %d\n%s\n" % (len(message), message))
        if number == 1:
            out.write(b"from %s\n" % base.encode())
        out.write(b"\n".join(lines) + b"\n\n" if lines else b"\n")
        if number % 250 == 0 or number == len(commits):
            out.write(b"progress replayed %d of %d commits\n\n"
                      % (number, len(commits)))
    out.write(b"done\n")
    return len(marks)


def borrowed_view(source, view):
    """An object directory at ``view`` that shows the objects of the
    repository ``source`` through symbolic links, its packs' ``.promisor``
    markers left out: ``git repack -a`` copies every object of a promisor
    pack it can see, whole history and all, where we want the ones our
    history reaches.  Returns its path."""
    shutil.rmtree(view, ignore_errors=True)
    objects = os.path.join(os.path.abspath(source), "objects")
    os.makedirs(os.path.join(view, "pack"))
    for name in os.listdir(objects):
        if len(name) == 2:  # a fan-out directory of loose objects
            os.symlink(os.path.join(objects, name), os.path.join(view, name))
    for name in os.listdir(os.path.join(objects, "pack")):
        if not name.endswith(".promisor"):
            os.symlink(os.path.join(objects, "pack", name),
                       os.path.join(view, "pack", name))
    return view


def replay(gitdir, source, commits, base, subdir):
    """Replay ``commits`` of ``source`` under ``subdir`` on ``base`` into
    ``gitdir`` with one ``git fast-import``, reading ``source``'s objects
    through an alternate: its tip and the placeholders it needed."""
    alternates = os.path.join(gitdir, "objects", "info", "alternates")
    os.makedirs(os.path.dirname(alternates), exist_ok=True)
    with open(alternates, "w") as fh:
        fh.write(borrowed_view(source, gitdir + ".borrowed") + "\n")
    present = present_blobs(source)
    proc = subprocess.Popen(["git", "--git-dir=" + gitdir, "fast-import",
                             "--force", "--done", "--quiet"],
                            stdin=subprocess.PIPE, env=git_env())
    try:
        placeholders = replay_stream(source, commits, base, subdir,
                                     present, proc.stdin)
    finally:
        proc.stdin.close()
        status = proc.wait()
    if status:
        raise Abort("git fast-import failed (%d)" % status,
                    hint="its message is above")
    tip = git(gitdir, "rev-parse", "refs/heads/main").strip()
    return {"tip": tip, "placeholders": placeholders,
            "replayed": len(commits)}


def stand_alone(gitdir):
    """Copy into one pack of ``gitdir`` every object it borrows, drop the
    alternate and the loose objects, and check it is whole."""
    # Its messages go to the log as they come: at full size this is the
    # longest step of the Git form.
    logged("git repack", ["git", "--git-dir=" + gitdir, "repack", "-a", "-d"],
           git_env())
    alternates = os.path.join(gitdir, "objects", "info", "alternates")
    if os.path.exists(alternates):
        os.unlink(alternates)
    shutil.rmtree(gitdir + ".borrowed", ignore_errors=True)
    run(["git", "--git-dir=" + gitdir, "prune", "--expire=now"], git_env())
    git(gitdir, "fsck", "--connectivity-only", "--no-progress")
    return {"fsck": "connectivity-only, clean"}


def git_figures(gitdir):
    """Commits, files and working-tree bytes at the tip, pack bytes."""
    sizes = git(gitdir, "ls-tree", "-r", "-l", "-z", "refs/heads/main")
    files = [entry for entry in sizes.split("\0") if entry]
    tree_bytes = sum(int(entry.split("\t")[0].split()[3]) for entry in files
                     if entry.split()[1] == "blob")
    pack_dir = os.path.join(gitdir, "objects", "pack")
    pack_bytes = sum(os.path.getsize(os.path.join(pack_dir, name))
                     for name in os.listdir(pack_dir)
                     if name.endswith(".pack"))
    return {"commits": int(git(gitdir, "rev-list", "--count",
                               "refs/heads/main")),
            "merges": int(git(gitdir, "rev-list", "--count", "--merges",
                              "refs/heads/main")),
            "files_at_tip": len(files), "working_tree_bytes": tree_bytes,
            "pack_bytes": pack_bytes,
            "tip": git(gitdir, "rev-parse", "refs/heads/main").strip()}


# -- 3. the Mercurial form -------------------------------------------------

def hg_convert(gitdir, hgdir):
    """``hg convert`` of the Git form into ``hgdir``; a rerun goes on
    where a killed one stopped (convert keeps its map of done commits)."""
    # Its progress bar too, a line every 30 s in the log (a tree commit
    # of 400,000 files prints nothing else for the better part of an
    # hour).
    logged("hg convert", [executable("hg"), "--config", "extensions.convert=",
            "--config", "progress.assume-tty=true",
            "--config", "progress.refresh=30", "--config", "progress.width=100",
            "convert", "--source-type", "git", gitdir, hgdir],
           dict(hg_env(), HGPLAINEXCEPT="progress"))
    return hg_figures(hgdir)


def hg_env():
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("HG")}
    env.update(HGRCPATH="", HGPLAIN="1", HGENCODING="utf-8", LC_ALL="C")
    return env


def hg_figures(hgdir):
    store = os.path.join(hgdir, ".hg", "store")
    files = store_bytes = 0
    for top, _, names in os.walk(store):
        for name in names:
            files += 1
            store_bytes += os.lstat(os.path.join(top, name)).st_size
    changesets = run([executable("hg"), "-R", hgdir, "log", "-r", "tip",
                      "-T", "{rev}"], hg_env())
    requires = []
    for path in (os.path.join(hgdir, ".hg", "requires"),
                 os.path.join(store, "requires")):
        if os.path.exists(path):
            with open(path) as fh:
                requires += fh.read().split()
    return {"changesets": int(changesets) + 1, "store_files": files,
            "store_bytes": store_bytes, "requires": requires}


def hg_verify(hgdir):
    run([executable("hg"), "-R", hgdir, "verify", "-q"], hg_env())
    return {"verify": "clean"}


# -- the build -------------------------------------------------------------

def build(options):
    directory = os.path.abspath(options.dir)
    os.makedirs(directory, exist_ok=True)
    stages = Stages(directory)
    summary = {}

    if options.tree:
        trees = [(os.path.abspath(tree), "source tree %s" % os.path.basename(
            os.path.abspath(tree))) for tree in options.tree]
    else:
        debsrc = os.path.abspath(options.debsrc
                                 or os.path.join(directory, "debsrc"))
        tree_root = os.path.abspath(options.trees
                                    or os.path.join(directory, "trees"))
        os.makedirs(tree_root, exist_ok=True)
        trees = []
        for version in options.thunderbird:
            upstream = upstream_version(version)
            tree = os.path.join(tree_root, "tb-" + upstream)
            tarball = None
            if not os.path.exists(tree + ".unpacked"):  # else reused as is
                tarball = stages.run("source-" + upstream, lambda: fetch_source(
                    version, debsrc))["tarball"]
            unpacked = stages.run("unpack-" + upstream,
                                  lambda: unpack(tarball, tree))
            trees.append((tree, "Thunderbird %s: the whole source tree of "
                          "Debian's thunderbird=%s (%s)"
                          % (upstream, version,
                             os.path.basename(unpacked["tarball"]))))

    history = os.path.abspath(options.pdfjs
                              or os.path.join(directory, "pdf.js.git"))
    if not options.pdfjs:
        stages.run("clone-pdfjs", lambda: clone(PDFJS_URL, history))
    commits = replayed_commits(history, options.pdfjs_tip,
                               options.pdfjs_commits)
    first_date = int(parse_commit(raw_commit(history, commits[:1])
                                  [commits[0]])[0].split()[-2])

    gitdir = os.path.join(directory, GIT_NAME)
    if not os.path.exists(os.path.join(gitdir, "HEAD")):
        run(["git", "init", "-q", "--bare", "-b", "main", gitdir], git_env())
        git(gitdir, "config", "gc.auto", "0")
        # Loose objects live only until the repack: write them fast.
        git(gitdir, "config", "core.looseCompression", "1")
    parent = None
    for number, (tree, message) in enumerate(trees, 1):
        # A day apart, ending the day before the first replayed commit:
        # fixed by the inputs, and in order with the history after them.
        date = first_date - (len(trees) - number + 1) * DAY
        record = stages.run(
            "git-tree-%d" % number,
            lambda: commit_tree(gitdir, tree, os.path.join(
                directory, "index.tmp"), message, parent, date))
        parent = record["commit"]
    replayed = stages.run("git-replay", lambda: replay(
        gitdir, history, commits, parent, options.subdir))
    stages.run("git-repack", lambda: stand_alone(gitdir))
    summary["git"] = dict(git_figures(gitdir), path=gitdir,
                          tree_commits=len(trees),
                          replayed_commits=replayed["replayed"],
                          placeholders=replayed["placeholders"],
                          replayed_from=history, replayed_tip=commits[-1],
                          subdir=options.subdir)
    write_summary(directory, summary, stages)
    log("Git form: %(commits)d commits, %(files_at_tip)d files at the tip, "
        "pack %(pack_bytes)d bytes" % summary["git"])
    if options.no_hg:
        return summary

    hgdir = os.path.join(directory, HG_NAME)
    stages.run("hg-convert", lambda: hg_convert(gitdir, hgdir))
    if not options.no_hg_verify:
        stages.run("hg-verify", lambda: hg_verify(hgdir))
    summary["hg"] = dict(hg_figures(hgdir), path=hgdir,
                         verified=not options.no_hg_verify)
    write_summary(directory, summary, stages)
    log("Mercurial form: %(changesets)d changesets, %(store_files)d store "
        "files, %(store_bytes)d bytes" % summary["hg"])
    return summary


def write_summary(directory, summary, stages):
    summary["stage_seconds"] = stages.seconds()
    temporary = os.path.join(directory, "summary.json.tmp")
    with open(temporary, "w") as fh:
        json.dump(summary, fh, indent=1, sort_keys=True)
        fh.write("\n")
    os.replace(temporary, os.path.join(directory, "summary.json"))


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m vcsperf.harness.firefoxscale",
        description="Build the Firefox-scale benchmark repository (Git "
        "and Mercurial forms) from real content in DIR; a rerun skips "
        "the stages already done.")
    parser.add_argument("--dir", required=True,
                        help="where everything goes (outside any checkout)")
    parser.add_argument("--debsrc", help="where the Debian source packages "
                        "are or are downloaded to (default DIR/debsrc)")
    parser.add_argument("--trees", help="where they are unpacked, one "
                        "tb-VERSION each, reused when a marker says so "
                        "(default DIR/trees)")
    parser.add_argument("--thunderbird", action="append", metavar="VERSION",
                        help="a Debian version of thunderbird whose tree is "
                        "a commit, oldest first (default: %s)"
                        % " and ".join(THUNDERBIRD_VERSIONS))
    parser.add_argument("--tree", action="append", metavar="PATH",
                        help="commit this directory tree instead of the "
                        "Thunderbird ones (repeat, oldest first)")
    parser.add_argument("--pdfjs", metavar="GITDIR", help="the Git "
                        "repository whose history is replayed (default: a "
                        "bare clone of %s in DIR/pdf.js.git)" % PDFJS_URL)
    parser.add_argument("--pdfjs-tip", default=PDFJS_TIP, metavar="REV",
                        help="the last commit replayed (default %(default)s)")
    parser.add_argument("--pdfjs-commits", type=int, default=PDFJS_COMMITS,
                        metavar="N", help="first-parent commits replayed "
                        "(default %(default)s)")
    parser.add_argument("--subdir", default=SUBDIR,
                        help="where they go (default %(default)s)")
    parser.add_argument("--no-hg", action="store_true",
                        help="stop after the Git form")
    parser.add_argument("--no-hg-verify", action="store_true",
                        help="skip hg verify of the Mercurial form")
    options = parser.parse_args(argv)
    options.thunderbird = options.thunderbird or list(THUNDERBIRD_VERSIONS)
    if options.pdfjs_commits < 1:
        parser.error("--pdfjs-commits must be at least 1")
    if not re.fullmatch(r"[^/].*[^/]|[^/]", options.subdir.strip("/")):
        parser.error("--subdir must name a directory")
    return options


def main(argv=None):
    return run_build(build, parse_args(argv))


def run_build(build, options):
    """The command line of a staged build (this one, ``longhistory``):
    ``build(options)``'s summary as JSON on stdout and 0, or one abort
    line, a failed command's last line of stderr with it, and 255."""
    try:
        summary = build(options)
    except Abort as abort:
        return print_abort(abort)
    except CommandError as failure:
        return print_abort(Abort(
            "%s failed (%d): %s" % (" ".join(failure.cmd[:3]),
                                    failure.returncode,
                                    (failure.stderr.strip().splitlines()
                                     or [""])[-1]),
            hint="run the build again to go on from the stage that failed"))
    json.dump(summary, sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
