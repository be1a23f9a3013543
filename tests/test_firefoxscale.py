"""The builder of the Firefox-scale repository
(``vcsperf.harness.firefoxscale``) at a tiny scale, on real content: two
installed packages' sources are the tree commits, and the newest 20
first-parent commits of a real history made here (a merge, a deleted
file, a gitlink, odd file names, a blob gone missing as a snapshot loses
big files) are replayed on top.  The Git form is whole, linear and
stands alone, keeps what it replays, and a rerun changes nothing; its
Mercurial form verifies."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

from vcsperf.core.bundlestore import sha256_file
from vcsperf.core.errors import Abort
from vcsperf.harness import firefoxscale, tools

#: Where the source files the history is made of come from (real text,
#: ours).
VCSPERF = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "vcsperf")


def python_sources():
    """Paths of the ``.py`` files of the vcsperf package, sorted."""
    return sorted(os.path.join(top, name)
                  for top, _, files in os.walk(VCSPERF) for name in files
                  if name.endswith(".py"))


def package_tree(name, dest):
    """A copy of the installed sources of ``name`` at ``dest``."""
    origin = os.path.dirname(importlib.util.find_spec(name).origin)
    shutil.copytree(origin, dest,
                    ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def files_under(tree, skip=()):
    found = set()
    for top, dirs, files in os.walk(tree):
        dirs[:] = [d for d in dirs
                   if os.path.relpath(os.path.join(top, d), tree) not in skip]
        for name in files:
            found.add(os.path.relpath(os.path.join(top, name), tree))
    return found


def make_history(path, env):
    """A Git repository at ``path`` whose first-parent history has 25
    commits: its newest 20 hold a merge of a side branch, a deletion, a
    gitlink, names to quote and a blob whose object is then removed.
    Returns the ID of the removed blob."""
    sources = python_sources()
    step = [0]

    def git(*args, **extra):
        return tools.run(["git", "-C", path, *args], dict(env, **extra))

    def commit(message):
        step[0] += 1
        # Real authors' shapes: several people, zones other than UTC.
        who = ["Ada Lovelace", "Grace Hopper", "Linus Torvalds"][step[0] % 3]
        date = "%d %s" % (1700000000 + 3600 * step[0],
                          ["+0200", "-0700", "+0530"][step[0] % 3])
        git("add", "-A")
        git("commit", "-q", "--allow-empty", "-m", message,
            GIT_AUTHOR_NAME=who, GIT_AUTHOR_EMAIL="%s@example.org"
            % who.split()[0].lower(), GIT_AUTHOR_DATE=date,
            GIT_COMMITTER_DATE=date)

    def write(name, source):
        os.makedirs(os.path.dirname(os.path.join(path, name)) or path,
                    exist_ok=True)
        shutil.copy(source, os.path.join(path, name))

    tools.run(["git", "init", "-q", "-b", "main", path], env)
    for number, source in enumerate(sources[:8]):
        write("src/%d.py" % number, source)
        commit("add %d.py\n\nFrom vcsperf's %s." % (number, source[-20:]))
    git("checkout", "-q", "-b", "side")
    write("side/one.py", sources[8])
    commit("side: one")
    write("side/two.py", sources[9])
    commit("side: two")
    git("checkout", "-q", "main")
    write("src/after.py", sources[10])
    commit("main moves on")
    git("merge", "-q", "--no-ff", "-m", "Merge branch side", "side",
        GIT_AUTHOR_DATE="1700100000 +0100", GIT_COMMITTER_DATE=
        "1700100000 +0100")
    os.unlink(os.path.join(path, "src", "0.py"))
    commit("delete 0.py")
    with open(os.path.join(path, "big.bin"), "wb") as fh:
        fh.write(b"a big file a snapshot leaves out\n" * 1000)
    commit("add a big file")
    big = git("rev-parse", "HEAD:big.bin").strip()
    git("update-index", "--add", "--cacheinfo", "160000,%s,vendor/sub"
        % git("rev-parse", "HEAD").strip())
    commit("add a gitlink")
    write('we"ird name.py', sources[0])
    write('"quoted.py', sources[1])
    write("with space/a b.py", sources[2])
    commit("names to quote")
    for number, source in enumerate(sources[11:21], 11):
        write("src/%d.py" % number, source)
        commit("more: %d.py\n\nBody line.\nSigned-off-by: Someone "
               "<someone@example.org>" % number)
    commit("an empty commit")
    # A snapshot that omits big files: the blob's object is gone.
    os.unlink(os.path.join(path, ".git", "objects", big[:2], big[2:]))
    assert len(git("rev-list", "--first-parent", "HEAD").split()) == 25
    return big


def test_builds_a_tiny_firefox_scale_repository_and_reruns(tmp_path, env):
    old = package_tree("pycparser", str(tmp_path / "old"))
    new = package_tree("cffi", str(tmp_path / "new"))
    # The tree's own ignore rules do not drop files; a nested repository
    # is left out.
    with open(os.path.join(new, ".gitignore"), "w") as fh:
        fh.write("*.py\n")
    tools.run(["git", "init", "-q", os.path.join(new, "vendored")], env)
    # Nor do its attributes change a byte.
    with open(os.path.join(new, ".gitattributes"), "w") as fh:
        fh.write("* text eol=lf\n")
    with open(os.path.join(new, "crlf.txt"), "wb") as fh:
        fh.write(b"one\r\ntwo\r\n")
    with open(os.path.join(new, "vendored", "inner.txt"), "w") as fh:
        fh.write("in a nested repository\n")
    source = str(tmp_path / "history")
    missing = make_history(source, env)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "vcsperf.harness.firefoxscale",
               "--dir", str(out), "--tree", old, "--tree", new,
               "--pdfjs", os.path.join(source, ".git"), "--pdfjs-tip",
               "main", "--pdfjs-commits", "20"]
    first = subprocess.run(command, capture_output=True, text=True)
    assert first.returncode == 0, first.stdout + first.stderr
    summary = json.loads((out / "summary.json").read_text())
    gitdir = str(out / "firefox-scale.git")

    def git(*args):
        return tools.run(["git", "--git-dir=" + gitdir, *args], env)

    assert summary["git"]["commits"] == 22
    assert summary["git"]["placeholders"] == 1
    parents = git("rev-list", "--parents", "main").splitlines()
    assert len(parents) == 22 and all(len(line.split()) <= 2
                                      for line in parents)
    expected = files_under(new, skip={"vendored"}) | {
        "third_party/pdf.js/" + name for name in tools.run(
            ["git", "-C", source, "ls-files", "-z"], env).split("\0")
        if name not in ("", "vendor/sub")}
    tip_files = set(git("ls-tree", "-r", "--name-only", "-z", "main")
                    .split("\0")) - {""}
    assert tip_files == expected
    assert summary["git"]["files_at_tip"] == len(expected)
    assert "vendored/inner.txt" not in tip_files
    assert subprocess.run(["git", "--git-dir=" + gitdir, "cat-file", "blob",
                           "main:crlf.txt"], capture_output=True,
                          check=True).stdout == b"one\r\ntwo\r\n"
    assert "third_party/pdf.js/src/0.py" not in tip_files
    assert "third_party/pdf.js/src/0.py" in git("ls-tree", "-r",
                                                "--name-only", "main~15")
    # The tree commits hold the whole trees, each in full.
    assert set(git("ls-tree", "-r", "--name-only", "main~21")
               .splitlines()) == files_under(old)
    # Replayed: authors, committers, dates and messages as they were.
    shape = "--format=%an|%ae|%ad|%cn|%ce|%cd|%B%x00"
    assert git("log", "-20", shape, "main") == tools.run(
        ["git", "-C", source, "log", "--first-parent", "-20", shape], env)
    assert missing in git("cat-file", "-p", "main:third_party/pdf.js/big.bin")
    # Whole and standing alone: no alternates, no borrowed objects.
    git("fsck", "--strict", "--no-dangling")
    assert not os.path.exists(os.path.join(gitdir, "objects", "info",
                                           "alternates"))
    assert not os.path.exists(gitdir + ".borrowed")
    clone = str(tmp_path / "clone")
    tools.run(["git", "clone", "-q", gitdir, clone], env)
    assert files_under(clone, skip={".git"}) == tip_files
    # The Mercurial form, verified by the build.
    hgdir = str(out / "firefox-scale-hg")
    assert summary["hg"]["changesets"] == 22 and summary["hg"]["verified"]
    assert len(tools.hg(["-R", hgdir, "files", "-r", "tip"], env)
               .splitlines()) == len(expected)

    # A rerun skips every stage and changes nothing.
    markers = {name: (out / "markers" / name).read_text()
               for name in os.listdir(out / "markers")}
    again = subprocess.run(command, capture_output=True, text=True)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.count("skipped") == len(markers) == 6
    assert json.loads((out / "summary.json").read_text()) == summary
    assert {name: (out / "markers" / name).read_text()
            for name in os.listdir(out / "markers")} == markers

    # The same inputs make the same commits.
    other = tmp_path / "other"
    command[command.index(str(out))] = str(other)
    rebuilt = subprocess.run(command + ["--no-hg"], capture_output=True,
                             text=True)
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    assert json.loads((other / "summary.json").read_text())["git"]["tip"] \
        == summary["git"]["tip"]


def test_upstream_version_and_dsc_checksums(tmp_path):
    assert firefoxscale.upstream_version("1:140.12.0esr-1~deb12u1") == \
        "140.12.0esr"
    dsc = tmp_path / "t.dsc"
    dsc.write_text("Format: 3.0 (quilt)\nChecksums-Sha256:\n"
                   " 0123 42 thunderbird_1.orig.tar.xz\n"
                   "Files:\n 99 42 thunderbird_1.orig.tar.xz\n")
    assert firefoxscale.dsc_checksums(str(dsc)) == {
        "thunderbird_1.orig.tar.xz": "0123"}


def test_apt_get_source_failing_says_what_to_do(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "apt-get"
    fake.write_text("#!/bin/sh\necho \"E: You must put some 'deb-src' URIs "
                    "in your sources.list\" >&2\nexit 100\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, os.environ["PATH"]))
    with pytest.raises(Abort) as failure:
        firefoxscale.fetch_source("1:115.16.0esr-1~deb12u1",
                                  str(tmp_path / "debsrc"))
    assert str(failure.value) == (
        "apt-get source thunderbird=1:115.16.0esr-1~deb12u1 failed: E: You "
        "must put some 'deb-src' URIs in your sources.list")
    assert "deb-src entry" in failure.value.hint
    assert "--debsrc" in failure.value.hint


def test_unpacks_without_the_top_directory_once(tmp_path):
    top = tmp_path / "thunderbird-1.0"
    (top / "dir").mkdir(parents=True)
    (top / "dir" / "file").write_text("content\n")
    os.symlink("dir/file", top / "link")
    tarball = str(tmp_path / "t.orig.tar.xz")
    tools.run(["tar", "-cJf", tarball, "-C", str(tmp_path),
               "thunderbird-1.0"], None)
    tree = str(tmp_path / "trees" / "tb-1.0")
    os.makedirs(os.path.dirname(tree))
    assert firefoxscale.unpack(tarball, tree) == {"tarball": tarball,
                                                  "files": 2}
    assert open(os.path.join(tree, "link")).read() == "content\n"
    assert firefoxscale.unpack(tarball, tree)["reused"]
    os.unlink(tree + ".unpacked")
    with pytest.raises(Abort, match="exists but has no marker"):
        firefoxscale.unpack(tarball, tree)


def test_thunderbird_trees_come_from_the_source_packages(tmp_path, env):
    """The default path: each version's upstream tarball, found in
    ``--debsrc`` beside its ``.dsc`` and checked against it, unpacked
    once and committed (tiny stand-ins for Debian's packages here)."""
    debsrc = tmp_path / "debsrc"
    debsrc.mkdir()
    versions = ["1:1.0esr-1~deb12u1", "1:2.0esr-1~deb12u1"]
    for version, package in zip(versions, ["pycparser", "cffi"]):
        upstream = firefoxscale.upstream_version(version)
        top = tmp_path / ("thunderbird-" + upstream)
        package_tree(package, str(top))
        tarball = debsrc / ("thunderbird_%s.orig.tar.xz" % upstream)
        tools.run(["tar", "-cJf", str(tarball), "-C", str(tmp_path),
                   top.name], None)
        (debsrc / ("thunderbird_%s.dsc" % version.split(":")[1])).write_text(
            "Checksums-Sha256:\n %s %d %s\n"
            % (sha256_file(str(tarball))[0], tarball.stat().st_size,
               tarball.name))
    source = str(tmp_path / "history")
    make_history(source, env)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "vcsperf.harness.firefoxscale",
               "--dir", str(out), "--debsrc", str(debsrc), "--pdfjs",
               os.path.join(source, ".git"), "--pdfjs-tip", "main",
               "--pdfjs-commits", "3", "--no-hg"]
    for version in versions:
        command += ["--thunderbird", version]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    gitdir = str(out / "firefox-scale.git")
    log = tools.run(["git", "--git-dir=" + gitdir, "log", "--format=%s",
                     "main~3", "main~4"], env).splitlines()
    assert log == [
        "Thunderbird 2.0esr: the whole source tree of Debian's "
        "thunderbird=1:2.0esr-1~deb12u1 (thunderbird_2.0esr.orig.tar.xz)",
        "Thunderbird 1.0esr: the whole source tree of Debian's "
        "thunderbird=1:1.0esr-1~deb12u1 (thunderbird_1.0esr.orig.tar.xz)"]
    assert set(tools.run(["git", "--git-dir=" + gitdir, "ls-tree", "-r",
                          "--name-only", "main~4"], env).splitlines()) == \
        files_under(str(tmp_path / "thunderbird-1.0esr"))
    assert (out / "trees" / "tb-2.0esr.unpacked").exists()
