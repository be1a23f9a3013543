"""The demo and the codec benchmark, run as a user runs them."""

import json
import os
import re
import subprocess
import sys

from vcsperf import tools

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_demo_prints_real_figures(env, tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    out = tools.run([tools.executable("vcsperf"), "demo"],
                    dict(env, TMPDIR=str(scratch)), cwd=str(scratch))
    changesets, files = map(int, re.search(
        r"(\d+) changesets, (\d+) files", out).groups())
    assert changesets >= 50 and files >= 500
    rows = {line.split()[0]: line.split() for line in out.splitlines()
            if "|" in line and line.split()[:1] in (["changelog"],
                                                    ["manifest"],
                                                    ["filelog"])}
    assert set(rows) == {"changelog", "manifest", "filelog"}
    for cells in rows.values():
        zlib_kib, zstd_kib, dict_kib = map(float, (cells[4], cells[5],
                                                   cells[6]))
        assert zlib_kib > 0 and zstd_kib > 0 and dict_kib > 0
    # The dictionary wins on the small chunks of the changelog.
    assert float(rows["changelog"][8]) < 1.0
    # zstdstore: three engines stored, read, logged and verified.
    engines = {line.split()[0]: line.split() for line in out.splitlines()
               if "|" in line and line.split()[:1] in (["zlib"], ["zstd"],
                                                       ["zstd-dict"])}
    assert set(engines) == {"zlib", "zstd", "zstd-dict"}
    assert all(cells[-1] == "yes" for cells in engines.values())
    assert float(engines["zstd-dict"][1]) < float(engines["zstd"][1])
    # wirezstd and bundlegen: bundles built, cloned from, pulled.
    bundles = {m.group(1): int(m.group(2)) for m in re.finditer(
        r"^(core gzip-v2|ours zstd-max|bundlegen all three) +(\d+)", out,
        re.M)}
    assert bundles["ours zstd-max"] < bundles["core gzip-v2"]
    assert bundles["bundlegen all three"] > bundles["core gzip-v2"]
    pulls = {m.group(1): int(m.group(2)) for m in re.finditer(
        r"^full pull, (core zstd|wirezstd) +(\d+)", out, re.M)}
    assert 0 < pulls["wirezstd"] < pulls["core zstd"]
    assert re.search(r"^from ours zstd-max +\d", out, re.M)
    assert os.listdir(str(scratch)) == []


def test_codec_benchmark_on_real_history(real_hg_repo, tmp_path):
    report = tmp_path / "codec.json"
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, "contrib", "bench", "codec.py"),
         str(real_hg_repo), "--json", str(report)],
        capture_output=True, text=True, check=True).stdout
    assert "zlib-6" in out and "zstd+dict" in out
    figures = json.loads(report.read_text())["classes"]
    assert set(figures) == {"changelog", "manifest", "filelog"}
    filelog = figures["filelog"]["codecs"]
    assert filelog["zstd-3+dict"]["stored_bytes"] < \
        0.95 * filelog["zstd-3"]["stored_bytes"]
    for codec in filelog.values():
        assert codec["decompress_seconds"] > 0
