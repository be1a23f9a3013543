"""``vcsperf bench NAME`` as a user first meets it: its ``--help``, and
a repository argument that is none."""

import importlib
import os
import re

import pytest

from vcsperf import bench
from vcsperf.harness import tools


def help_description(text):
    """The description paragraph of an argparse ``--help``: what lies
    between the usage and the first argument section, on one line."""
    body = text.split("\n\n", 1)[1]
    description = re.split(r"^(?:positional arguments|options):$", body,
                           flags=re.M)[0]
    return " ".join(description.split())


@pytest.mark.parametrize("name", bench.NAMES)
def test_every_bench_help_describes_it_in_whole_sentences(name, env,
                                                          tmp_path):
    """``vcsperf bench NAME --help`` gives the whole first paragraph of
    the benchmark's docstring: sentences that end, not its first line."""
    out = tools.run([tools.executable("vcsperf"), "bench", name, "--help"],
                    env, cwd=str(tmp_path))
    description = help_description(out)
    module = importlib.import_module("vcsperf.bench." + name)
    paragraph = module.__doc__.strip().split("\n\n")[0]
    assert description == " ".join(paragraph.replace("``", "").split())
    assert description.endswith(".") and description[0].isupper()
    # Every line of the paragraph is in it, the last one too.
    assert " ".join(paragraph.splitlines()[-1].replace("``", "").split()) \
        in description


@pytest.mark.parametrize("name", ["codec", "zstdstore", "zstdgroups",
                                  "wirezstd", "bundlegen", "wirecache"])
def test_bench_on_a_missing_repository_is_one_abort_line(name, env,
                                                         tmp_path):
    """A repository argument that does not exist: one ``abort:`` line and
    its hint, exit 255, before any work (nothing left in the temporary
    directory), never a traceback."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    missing = str(tmp_path / "nonexistent")
    proc = tools.completed([tools.executable("vcsperf"), "bench", name,
                            missing], dict(env, TMPDIR=str(scratch)),
                           cwd=str(tmp_path))
    assert (proc.returncode, proc.stdout) == (255, "")
    assert proc.stderr.splitlines() == [
        "abort: %s is not a Mercurial repository" % missing,
        "(give the directory that holds .hg)"]
    assert list(scratch.iterdir()) == []


def bench_on_a_repository_from_the_future(name, hg, env, tmp_path):
    """``vcsperf bench NAME`` on a repository whose ``requires`` names a
    feature no Mercurial knows: the CompletedProcess, checked to be an
    abort without a traceback."""
    repo = tmp_path / "repo"
    hg("init", repo)
    with open(repo / ".hg" / "requires", "a") as fh:
        fh.write("a-feature-from-the-future\n")
    proc = tools.completed([tools.executable("vcsperf"), "bench", name,
                            str(repo)], env, cwd=str(tmp_path))
    assert proc.returncode == 255 and "Traceback" not in proc.stderr
    return proc


def test_codec_bench_on_an_unreadable_repository_is_one_abort_line(
        hg, env, tmp_path):
    """A repository Mercurial refuses to open (a requirement it does not
    know): Mercurial's reason and hint as one ``abort:`` line."""
    proc = bench_on_a_repository_from_the_future("codec", hg, env, tmp_path)
    repo = tmp_path / "repo"
    lines = proc.stderr.splitlines()
    assert lines[0] == ("abort: hg cannot read %s: repository requires "
                        "features unknown to this Mercurial: "
                        "a-feature-from-the-future" % repo)
    assert len(lines) == 2 and lines[1].startswith("(see ")


def test_a_command_the_bench_runs_that_fails_is_one_abort_line(
        hg, env, tmp_path):
    """A repository that passes the first look but that hg refuses when the
    benchmark copies it: the command's name and hg's own message and hint
    as one ``abort:`` line, not the benchmark's traceback."""
    proc = bench_on_a_repository_from_the_future("wirezstd", hg, env,
                                                 tmp_path)
    assert proc.stderr.splitlines() == [
        "abort: hg clone failed: repository requires features unknown to "
        "this Mercurial: a-feature-from-the-future",
        "(see https://mercurial-scm.org/wiki/MissingRequirement for more "
        "information)"]


def test_wirecache_bench_options_out_of_range_are_one_abort_line(
        hg, env, tmp_path):
    """``vcsperf bench wirecache`` given a fleet of no clients, a push or
    a depth the history does not hold, no worker: one ``abort:`` line and
    a hint, exit 255, the servers it started stopped and its temporary
    directory removed."""
    repo = tmp_path / "repo"
    hg("init", repo)
    for name in ("a", "b"):
        (repo / name).write_text(name)
        hg("commit", "-q", "-A", "-m", name, cwd=str(repo))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    for args, error in (
            (["--clients", "8,none"], "abort: --clients takes positive "
             "numbers separated by commas, not '8,none'"),
            (["--server-threads", "0"], "abort: --max-depth, --stream-pulls, "
             "--stream-clients, --server-threads and --repeat must be "
             "positive"),
            (["--repeat", "0"], "abort: --max-depth, --stream-pulls, "
             "--stream-clients, --server-threads and --repeat must be "
             "positive"),
            (["--push", "2"], "abort: cannot push 2 of 2 changesets"),
            (["--push", "1", "--max-depth", "2"],
             "abort: --max-depth 2 is deeper than the history")):
        proc = tools.completed([tools.executable("vcsperf"), "bench",
                                "wirecache", str(repo), *args],
                               dict(env, TMPDIR=str(scratch)),
                               cwd=str(tmp_path))
        assert (proc.returncode, proc.stdout) == (255, ""), proc.stderr
        lines = proc.stderr.splitlines()
        assert lines[0] == error and len(lines) <= 2, lines
        assert list(scratch.iterdir()) == []


@pytest.mark.slow
def test_sharepool_bench_beside_another_robustcheckout(hg, env, tmp_path):
    """``vcsperf bench sharepool --upstream``: cold and reuse --purge of a
    small repository beside another robustcheckout (ours again here:
    Mozilla's is not in this repository), every row and both sides' steps
    in the table; reuse-purge alone without an earlier run's checkouts, or
    a path it does not know, is one abort line."""
    from hgext3rd import robustcheckout

    repo = tmp_path / "repo"
    hg("init", repo)
    for n in range(3):
        (repo / ("f%d" % n)).write_text("%d\n" % n)
        hg("commit", "-q", "-A", "-m", "c%d" % n, cwd=repo)
    vcsperf = tools.executable("vcsperf")
    base = [vcsperf, "bench", "sharepool", "--hg", str(repo), "--upstream",
            robustcheckout.__file__, "--behind", "1", "--junk", "20"]
    out = tools.run(base + ["--rounds", "1"], env, cwd=str(tmp_path))
    assert "(3 changesets, 1 behind, 20 junk files)" in out
    for row in ("| cold (empty pool), round 1 |",
                "| cold (empty pool), round 2 |",
                "| cold (empty pool), median |", "| reuse --purge, round 1 |",
                "| reuse --purge, median |", "| purge | reuse round 1 |",
                "| update | reuse round 1 |", "| clone | cold round 2 |"):
        assert row in out, out
    for args, message in (
            (["--paths", "reuse-purge", "--workdir", str(tmp_path / "w")],
             "abort: reuse-purge alone needs the checkouts of an earlier "
             "run in %s" % (tmp_path / "w" / "hg")),
            (["--paths", "warm"], "abort: unknown path warm")):
        proc = tools.completed(base + args, env, cwd=str(tmp_path))
        assert (proc.returncode, proc.stdout) == (255, "")
        assert proc.stderr.splitlines()[0] == message
    assert not (tmp_path / "w").exists()


def test_sharepool_bench_cold_from_a_stream_clone_bundle(hg, env, tmp_path):
    """``vcsperf bench sharepool --upstream --paths cold-bundle``:
    ``hg bundlegen`` publishes a stream clone bundle to the real S3
    server, hg serve hands out its manifest, and each side's cold
    checkout takes the store from the bundle host (every byte bundlegen
    uploaded, counted by the proxy in front of it) and only the rest from
    the origin.  Both sides end at the revision asked for (the run checks), their checkouts
    and pools are deleted once timed, the manifest is withdrawn from the
    served copy, and the original repository gains no file."""
    from hgext3rd import robustcheckout
    from vcsperf.bench import sharepool

    mozilla = "/tmp/vct/hgext/robustcheckout"
    upstream = (mozilla if os.path.isdir(mozilla)
                else os.path.dirname(robustcheckout.__file__)
                + "/robustcheckout.py")
    repo = tmp_path / "repo"
    hg("init", repo)
    for n in range(3):
        (repo / ("d%d" % n)).mkdir()
        # incompressible: the store outweighs what discovery sends
        (repo / ("d%d" % n) / "f").write_bytes(os.urandom(8000))
        hg("commit", "-q", "-A", "-m", "c%d" % n, cwd=repo)
    before = sorted(p.name for p in (repo / ".hg").iterdir())
    work = tmp_path / "w"
    result = sharepool.bench_hg_upstream(
        str(repo), str(work), upstream, 1, 1, 0, ["cold-bundle"],
        cold_rounds=1)
    published = result["cold_bundle"]["publish"]["bytes"]
    assert published > 24000
    for side in sharepool.SIDES:
        (bundled,) = result["cold_bundle"][side]
        assert bundled["bundle_requests"] == 1, bundled
        assert bundled["bundle_bytes"] == published, bundled
        # the bundle's store is not sent again: discovery and phases only
        assert 0 < bundled["origin_bytes"] < published, bundled
        assert bundled["steps"]["clone"] > 0
    assert sorted(os.listdir(work / "hg")) == []
    assert not (work / "hg-served" / ".hg" / "clonebundles.manifest").exists()
    assert sorted(p.name for p in (repo / ".hg").iterdir()) == before
    report = sharepool.format_upstream_report(result)
    for row in ("| cold from a stream clone bundle, round 1 |",
                "| bytes from the bundle host | %d | %d |" % (published,
                                                           published),
                "| clone | cold-bundle round 1 |"):
        assert row in report, report
