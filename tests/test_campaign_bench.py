"""The adversarial campaign for ``vcsperf bench NAME REPO``'s repository
argument: what a user may hand it by mistake.

Each benchmark that takes a repository gets, drawn by the seed, a path
that does not exist, a regular file, a FIFO, /dev/zero, a folder whose
``.hg`` is a file, a ``.hg`` whose ``requires`` names a feature no
Mercurial knows, or a path with a newline in it: each ends, under an
address-space limit and a timeout, with exit 255 and one ``abort:`` line
(no traceback), and leaves nothing in the temporary directory.
"""

import os

import pytest

import campaign
from vcsperf.harness import objectstore, tools

pytestmark = pytest.mark.campaign

#: The benchmarks whose one positional argument is a Mercurial repository.
BENCHES = ("codec", "zstdstore", "zstdgroups", "wirezstd", "bundlegen",
           "wirecache")


def hostile_repository(kind, root, hg):
    """A path of the ``kind`` a user may mistake for a repository."""
    path = root / kind
    if kind == "missing":
        pass
    elif kind == "file":
        path.write_text("not a repository\n")
    elif kind == "fifo":
        os.mkfifo(str(path))
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    elif kind == "hg-file":
        path.mkdir()
        (path / ".hg").write_text("gitdir: elsewhere\n")
    elif kind == "requirement":
        hg("init", path)
        with open(path / ".hg" / "requires", "a") as fh:
            fh.write("a-feature-from-the-future\n")
    elif kind == "newline":
        path = root / "two\nlines"
    return path


KINDS = ("missing", "file", "fifo", "zero", "hg-file", "requirement",
         "newline")


def test_bench_repository_argument(tally, hg, env, tmp_path):
    cases = [(bench, kind) for bench in BENCHES for kind in KINDS]
    tally.rng.shuffle(cases)
    for index, (bench, kind) in enumerate(cases[:campaign.size(12, 35)]):
        root = tmp_path / ("case%d" % index)
        scratch = root / "tmp"
        scratch.mkdir(parents=True)
        repo = hostile_repository(kind, root, hg)
        what = "vcsperf bench %s on a %s" % (bench, kind)
        # The bundlegen benchmark starts its object server before it
        # reads the repository: the one built and cached already.
        ran = dict(env, TMPDIR=str(scratch),
                   VCSPERF_CACHE=objectstore.cache_root())
        try:
            proc = campaign.run_bounded(
                [tools.executable("vcsperf"), "bench", bench, str(repo)],
                env=ran, cwd=str(root), timeout=120)
        except Exception as err:  # the timeout, reported as a case
            tally.case(False, "%s: %r" % (what, err))
            continue
        tally.case(campaign.is_clean_abort(proc)
                   and proc.stderr.startswith("abort: ")
                   and os.listdir(str(scratch)) == [],
                   "%s: exit %d, %r" % (what, proc.returncode,
                                        proc.stderr[-2000:]))
    tally.check()



def test_bench_workdir_that_cannot_be_made(hg, env, tmp_path):
    """A --workdir under a regular file or under a symlink loop is one
    abort line before any work (the first was a FileNotFoundError
    traceback once a missing --workdir was made for the user)."""
    repo = tmp_path / "repo"
    hg("init", repo)
    afile = tmp_path / "afile"
    afile.write_text("not a folder\n")
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    for workdir in (afile / "work", loop / "work"):
        proc = campaign.run_bounded(
            [tools.executable("vcsperf"), "bench", "zstdstore", str(repo),
             "--workdir", str(workdir)],
            env=env, cwd=str(tmp_path), timeout=120)
        assert campaign.is_clean_abort(proc), proc.stderr
        assert proc.stderr.startswith(
            "abort: cannot use %s as --workdir" % workdir), proc.stderr
    assert afile.read_text() == "not a folder\n" and loop.is_symlink()
