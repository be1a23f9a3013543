"""The demo and the codec benchmarks, run as a user runs them."""

import json
import os
import re
import subprocess

import pytest

from vcsperf.harness import tools

pytestmark = pytest.mark.slow


def test_demo_runs_the_check_on_real_content(env, tmp_path):
    """The README's main job: builds its repositories offline, then runs
    every feature through ``vcsperf check`` (the same runner)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    report_path = tmp_path / "demo.json"
    cache = tmp_path / "cache"
    out = tools.run([tools.executable("vcsperf"), "demo", "--json",
                     str(report_path)], dict(env, TMPDIR=str(scratch),
                                             XDG_CACHE_HOME=str(cache)),
                    cwd=str(scratch))
    changesets, files = map(int, re.search(
        r"(\d+) changesets, (\d+) files at the tip", out).groups())
    assert changesets >= 50 and files >= 500
    report = json.loads(report_path.read_text())
    assert report["changesets"] == changesets and not report["quick"]
    features = {f["name"]: f for f in report["features"]}
    assert list(features) == ["dictionaries", "wire", "bundles",
                              "checkouts", "commit IDs", "importer",
                              "git checkouts"]
    assert all(f["status"] == "passed" for f in features.values()), features
    ratios = {(f["name"], c["what"], c["core_label"]): c["ratio"]
              for f in features.values() for c in f["comparisons"]}
    assert ratios[("dictionaries", "store bytes, changelog", "zstd")] < 1
    assert ratios[("bundles", "bundle bytes, zstd-max", "core gzip-v2")] < 1
    assert ratios[("wire", "full pull, bytes received", "core zstd")] < 1
    assert features["bundles"]["facts"]["clones verified"] == 3
    assert report["passed"] and report["original_unchanged"]
    # the page, where the demo says it is (tests/test_check_page.py
    # renders one in a browser)
    page = cache / "vcsperf" / "demo.html"
    assert out.splitlines()[-1] == "report page: %s" % page
    assert "PASSED" in out.splitlines()[-2]
    # per feature its ratios and its steps; the run's time, disk, memory
    assert page.read_text().count('<figure class="plot"') == \
        2 * len(features) + 3
    assert os.listdir(str(scratch)) == []


def test_codec_benchmark_on_real_history(real_hg_repo, tmp_path):
    report = tmp_path / "codec.json"
    out = subprocess.run(
        [tools.executable("vcsperf"), "bench", "codec", str(real_hg_repo),
         "--json", str(report)],
        capture_output=True, text=True, check=True).stdout
    assert "zlib-6" in out and "zstd+dict" in out
    figures = json.loads(report.read_text())["classes"]
    assert set(figures) == {"changelog", "manifest", "filelog"}
    filelog = figures["filelog"]["codecs"]
    assert filelog["zstd-3+dict"]["stored_bytes"] < \
        0.95 * filelog["zstd-3"]["stored_bytes"]
    for codec in filelog.values():
        assert codec["decompress_seconds"] > 0


def test_group_dictionaries_benchmark_on_real_history(real_hg_repo, tmp_path):
    report = tmp_path / "groups.json"
    out = subprocess.run(
        [tools.executable("vcsperf"), "bench", "zstdgroups",
         str(real_hg_repo), "--groups", "1", "--sample-budget", "1000000",
         "--json", str(report)],
        capture_output=True, text=True, check=True).stdout
    assert "one for all filelogs" in out and "per extension" in out
    figures = json.loads(report.read_text())
    results, ratios = figures["results"], figures["ratios"]
    assert set(ratios) == {"extension", "directory"}
    # pip's history is mostly Python: its own dictionary stores it in fewer
    # bytes than the one for every filelog; each dictionary counts.
    by_extension = results["groupings"]["extension"]
    python = by_extension["groups"][".py"]
    assert 0 < python["bytes"] < python["one_dict_bytes"]
    assert by_extension["dict_bytes"] > results["one"]["dict_bytes"]
    assert ratios["extension"] == pytest.approx(
        (by_extension["bytes"] + by_extension["dict_bytes"])
        / (results["one"]["bytes"] + results["one"]["dict_bytes"]))


def test_store_benchmark_in_parts_on_real_history(real_hg_repo, tmp_path):
    """The store benchmark as it is run at Firefox scale: two engines,
    two commands, no chunk reads, then again on the copies it left
    (``--reuse``); each timed run printed as it ends.  Every copy it
    measured passes ``hg verify`` (the command it timed last)."""
    work = tmp_path / "work"
    work.mkdir()
    command = [tools.executable("vcsperf"), "bench", "zstdstore",
               str(real_hg_repo), "--workdir", str(work), "--engines",
               "zstd,zstd-dict", "--commands", "status,verify",
               "--repeat", "0", "--rounds", "1"]
    first = subprocess.run(command + ["--json", str(tmp_path / "a.json")],
                           capture_output=True, text=True, check=True)
    assert sorted(os.listdir(str(work))) == [
        "hgrc", "zstd", "zstd-dict", "zstd-dict.prepare.json",
        "zstd.prepare.json"]
    assert first.stderr.splitlines() == [
        "(%s, %s: %s s)" % (name, engine, seconds) for name, engine, seconds
        in re.findall(r"\((status|verify), (zstd|zstd-dict): ([0-9.]+) s\)",
                      first.stderr)]
    assert len(first.stderr.splitlines()) == 4
    figures = json.loads((tmp_path / "a.json").read_text())
    assert set(figures["results"]["engines"]) == {"zstd", "zstd-dict"}
    assert list(figures["results"]["commands"]["times"]) == [
        "status", "verify"]
    assert set(figures["ratios"]) == {"changelog_bytes", "total_bytes"}
    assert "store bytes vs core zstd" in first.stdout
    assert "read speed" not in first.stdout
    prepared = (work / "zstd-dict.prepare.json").read_text()
    again = subprocess.run(command + ["--reuse", "--commands", "status"],
                           capture_output=True, text=True, check=True)
    assert (work / "zstd-dict.prepare.json").read_text() == prepared
    assert "train" in again.stdout and "verify " not in again.stdout
    # a name it does not know: one abort line naming the choices
    wrong = subprocess.run(command + ["--commands", "status,blame"],
                           capture_output=True, text=True)
    assert (wrong.returncode, wrong.stderr.splitlines()) == (255, [
        "abort: unknown command: blame",
        "(choose among: log desc, log -p 1000, annotate, update null->tip, "
        "status, verify, clone --stream)"])


def test_store_benchmark_of_the_conversion_in_place(real_hg_repo, tmp_path):
    """``--conversion in-place``: zstdstore's copy is trained, then
    converted by ``hg zstd-recompress --convert``, beside core zstd's
    upgrade in the same run; the copy it leaves carries the engine's
    requirement and passes ``hg verify`` (the command timed).  A
    conversion it does not know is one abort line."""
    work = tmp_path / "work"
    command = [tools.executable("vcsperf"), "bench", "zstdstore",
               str(real_hg_repo), "--workdir", str(work), "--engines",
               "zstd,zstd-dict", "--commands", "verify", "--repeat", "0",
               "--rounds", "1", "--conversion"]
    subprocess.run(command + ["in-place", "--json", str(tmp_path / "a.json")],
                   capture_output=True, text=True, check=True)
    engines = json.loads((tmp_path / "a.json").read_text())[
        "results"]["engines"]
    assert list(engines["zstd-dict"]["prepare"]) == [
        "clone", "train", "convert"]
    assert list(engines["zstd"]["prepare"]) == ["clone", "upgrade"]
    assert all(step["peak_mib"] > 0
               for step in engines["zstd-dict"]["prepare"].values())
    requires = (work / "zstd-dict" / ".hg" / "store" / "requires").read_text()
    assert "exp-compression-zstd-dict" in requires.split()
    assert (engines["zstd-dict"]["store"]["total"]
            < engines["zstd"]["store"]["total"])
    wrong = subprocess.run(command + ["rewrite"], capture_output=True,
                           text=True)
    assert (wrong.returncode, wrong.stderr.splitlines()) == (255, [
        "abort: unknown conversion: rewrite",
        "(choose among: upgrade, in-place)"])
