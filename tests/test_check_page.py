"""The report page of ``vcsperf check`` (issue 32): ``vcsperf report``
and ``vcsperf check --html`` write it, headless Chromium renders it, and
the test reads the rendered document: the page's own checks passed (every
plot present, drawn and labelled, nothing loaded), the plots are in the
screenshot, names from a report stay text; and every hostile report is
one abort.

The reports are the demo's (tests/data/check_demo_report.json, a real
run's ``--json``) and copies of it changed as another run, another
repository or an older release would have written them."""

import copy
import json
import os
import re
import shutil
import signal
import stat
import subprocess

import pytest

import campaign
from vcsperf.check import page, runner
from vcsperf.harness import tools

DEMO_REPORT = os.path.join(os.path.dirname(__file__), "data",
                           "check_demo_report.json")


def _demo_report():
    with open(DEMO_REPORT) as fh:
        return json.load(fh)


def _write(path, report):
    path.write_text(json.dumps(report))
    return str(path)


def _vcsperf_report(*args, env=None):
    return subprocess.run([tools.executable("vcsperf"), "report",
                           *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=120)


def _chromium():
    found = shutil.which("chromium")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("no chromium: CI installs it (contrib/chromium.sh)")
        pytest.skip("no chromium (sh contrib/chromium.sh installs it)")
    return found


def _in_chromium(tmp_path, page_path, *flags):
    """Run headless Chromium on the page (a fresh profile, no network of
    its own); its stdout.  Killed with its children after 90 s."""
    profile = tmp_path / "chromium-profile"
    argv = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
            "--user-data-dir=%s" % profile, "--no-first-run",
            "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--hide-scrollbars",
            "--virtual-time-budget=5000", *flags,
            "file://%s" % os.path.abspath(page_path)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)
    assert proc.returncode == 0, argv
    return out


def _rendered(tmp_path, page_path):
    """The document as Chromium left it after the page's script ran."""
    dom = _in_chromium(tmp_path, page_path, "--dump-dom")
    body = re.search(r"<body([^>]*)>", dom).group(1)
    attributes = dict(re.findall(r'([\w-]+)="([^"]*)"', body))
    checks = re.search(r'<p id="page-checks"[^>]*>(.*?)</p>', dom).group(1)
    return dom, attributes, checks


def _another_run(report, started, factor):
    """``report`` as a later run of the same repository would write it:
    started at ``started``, every ratio times ``factor``."""
    later = copy.deepcopy(report)
    later["started"] = started
    for feature in later["features"]:
        for c in feature["comparisons"]:
            if c["ratio"] is not None:
                c["ratio"] = round(c["ratio"] * factor, 4)
                c["ours"] = c["ours"] * factor
    return later


def _figure_titles(dom):
    return re.findall(r'<figure class="plot" id="plot-\d+" data-expect="'
                      r'\[&quot;(.*?)&quot;', dom)


def test_page_of_the_demo_in_chromium(tmp_path):
    """The demo's report and two later runs of the same repository, and
    the page as Chromium renders it: the checks passed, a plot of every
    kind for every feature, the trend, the warnings; the screenshot shows
    the bars."""
    first = _demo_report()
    paths = [_write(tmp_path / "1.json", first),
             _write(tmp_path / "2.json", _another_run(
                 first, "2026-12-01T09:00:00+00:00", 1.25)),
             _write(tmp_path / "3.json", _another_run(
                 first, "2026-11-28T09:00:00+00:00", 0.9))]
    out = tmp_path / "page.html"
    proc = _vcsperf_report(*paths, "--html", out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "wrote %s: 3 reports\n" % out
    source = out.read_text()
    # self-contained: nothing that names another place to load from
    assert not re.search(r"(src|href)=\"(?!#)", source)
    assert "<svg" in source and len(source) < 2 * 2**20

    dom, body, checks = _rendered(tmp_path, out)
    assert body["data-checks"] == "passed", checks
    assert checks.startswith("page checks passed: %s plots"
                             % body["data-plots"])
    titles = _figure_titles(dom)
    assert int(body["data-plots"]) == len(titles) == source.count(
        '<figure class="plot"')
    for feature in first["features"]:
        name = feature["name"]
        if any(c["ratio"] is not None for c in feature["comparisons"]):
            assert "%s: ours against core" % name in titles
            assert "%s: ratios over 3 runs" % name in titles
        assert "%s: seconds per step" % name in titles
    for title in ("time: estimate against actual, per part",
                  "disk: estimate against actual peak, per part",
                  "memory: peak resident memory",
                  "whole run: seconds over 3 runs"):
        assert title in titles
    # the newest run (started last, given second) is the one drawn, the
    # trend oldest first
    assert "newest run: 2026-12-01 09:00" in dom
    assert "3 reports of this repository, oldest first" in dom
    # every figure worse than core in the newest run has its warning
    worse = [(f["name"], c["what"]) for f in first["features"]
             for c in f["comparisons"] if c["ratio"] is not None and (
                 c["ratio"] * 1.25 > 1 if c["better"] == "lower"
                 else c["ratio"] * 1.25 < 1)]
    assert worse
    warnings = re.search(r'<div class="warnings">(.*?)</div>', dom).group(1)
    assert "%d figure" % len(worse) in warnings
    for name, what in worse:
        assert "<li>%s (passed): %s is " % (name, what) in warnings

    from PIL import Image
    shot = tmp_path / "shot.png"
    _in_chromium(tmp_path, out, "--window-size=1100,2600",
                 "--screenshot=%s" % shot)
    colors = Image.open(shot).convert("RGB").getcolors(1 << 20)
    counted = {color: count for count, color in colors}

    def pixels(hex_color):
        return counted.get(tuple(bytes.fromhex(hex_color[1:])), 0)
    # the ratio bars and the step bars of the first features
    assert pixels(page.BETTER) > 500 and pixels(page.ACTUAL) > 500
    assert pixels(page.WORSE) > 500


@pytest.mark.slow
def test_page_checks_see_what_is_wrong(tmp_path):
    """The page's checks are not a formality: a plot removed, a label
    missing, an image from elsewhere: each fails them, said on the page."""
    out = tmp_path / "page.html"
    assert _vcsperf_report(_write(tmp_path / "r.json", _demo_report()),
                           "--html", out).returncode == 0
    source = out.read_text()
    broken = tmp_path / "broken.html"
    first_svg = source.index("<svg")
    svg_end = source.index("</svg>", first_svg) + len("</svg>")
    damaged = source[:first_svg] + source[svg_end:]
    # a label of the second plot no longer drawn
    second = re.search(r'id="plot-2" data-expect="\[&quot;(.*?)&quot;',
                       damaged).group(1)
    damaged = damaged.replace(">%s</text>" % second, ">renamed</text>", 1)
    damaged = damaged.replace(
        "</h1>", '</h1><img src="http://127.0.0.1:9/x.png" alt="x">', 1)
    broken.write_text(damaged)
    _, body, checks = _rendered(tmp_path, broken)
    assert body["data-checks"] == "failed"
    assert "plot-1: no plot" in checks
    assert "plot-2: no label \"%s\"" % second in checks
    assert "an element loads &lt;img" in checks
    assert "blocked img-src http://127.0.0.1:9/x.png" in checks


HOSTILE_NAME = "<script>document.title='owned'</script><b>x</b>"
HOSTILE_REPOSITORY = '/srv/<img src=x onerror="document.title=1">&"\u202e'


def test_hostile_names_stay_text(tmp_path):
    """``<script>`` and markup in feature, step, figure and repository
    names and in an error: escaped on the page and drawn as text in the
    plots; Chromium runs no script but the page's own."""
    report = _demo_report()
    report["repository"] = HOSTILE_REPOSITORY
    feature = report["features"][0]
    old_name = feature["name"]
    feature["name"] = HOSTILE_NAME
    feature["comparisons"][0]["what"] = "<script>z()</script> $\\frac{1}{0}$"
    feature["comparisons"][0]["core_label"] = "</svg><script>"
    feature["status"] = "failed"
    feature["error"] = HOSTILE_NAME
    for step in report["steps"]:
        if step["feature"] == old_name:
            step["feature"] = HOSTILE_NAME
            step["step"] = "]]><script>y()</script>"
    out = tmp_path / "page.html"
    proc = _vcsperf_report(_write(tmp_path / "r.json", report), "--html",
                           out)
    assert proc.returncode == 0, proc.stderr
    source = out.read_text()
    assert source.count("<script>") == 1
    assert "<img" not in source and "<b>" not in source
    dom, body, checks = _rendered(tmp_path, out)
    assert body["data-checks"] == "passed", checks
    title = re.search(r"<title>(.*?)</title>", dom).group(1)
    assert "owned" not in title and title != "1"
    assert dom.count("<script") == 1 and "<img" not in dom
    # the right-to-left override is not shown: it would reverse the text
    # after it
    assert "\u202e" not in dom and "/srv/&lt;img" in dom
    escaped = HOSTILE_NAME.replace("<", "&lt;").replace(">", "&gt;")
    # drawn in the plots as SVG text, mathtext not parsed
    assert ">%s: ours against core</text>" % escaped in dom
    assert ">&lt;script&gt;z()&lt;/script&gt; $\\frac{1}{0}$ (vs &lt;/svg" \
        "&gt;&lt;script&gt;)</text>" in dom
    assert ">]]&gt;&lt;script&gt;y()&lt;/script&gt;</text>" in dom
    assert "FAILED</span> (%.1f s): %s</h3>" % (feature["seconds"],
                                                escaped) in dom


@pytest.mark.slow
def test_reports_of_two_repositories_and_an_older_release(tmp_path):
    """Reports of two repositories: a section each, the trend only where
    a repository has several runs.  A report as earlier releases
    wrote it (no start, no estimates by part, no disk by feature, no
    memory per step) is drawn with what it has, in the order given."""
    demo = _demo_report()
    other = copy.deepcopy(demo)
    other["repository"] = "/srv/other"
    older = copy.deepcopy(demo)
    for key in ("started", "vcsperf_version"):
        del older[key]
    del older["estimate"]["seconds_by_part"]
    del older["scratch"]["estimated_bytes_by_feature"]
    for step in older["steps"]:
        del step["largest_process_bytes_so_far"]
    paths = [_write(tmp_path / "demo.json", demo),
             _write(tmp_path / "other.json", other),
             _write(tmp_path / "older.json", older)]
    out = tmp_path / "page.html"
    proc = _vcsperf_report(*paths, "--html", out)
    assert proc.returncode == 0, proc.stderr
    # readable by whoever the page is for, as open() under the umask gives
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask
    dom, body, checks = _rendered(tmp_path, out)
    assert body["data-checks"] == "passed", checks
    sections = re.findall(r'<section class="repository"><h2>(.*?)</h2>',
                          dom)
    assert sections == [demo["repository"], "/srv/other"]
    first, second = dom.split('<section class="repository">')[1:]
    assert "2 reports of this repository, in the order given" in first
    assert "ratios over 2 runs" in first and "over 2 runs" not in second
    # the older report, given last, is the newest of its repository
    assert "not in this report (an earlier release's): time by " \
        "part, disk by part" in first
    assert "newest run: run 2" in first


def _hostile_reports(tmp_path, rng):
    """(name, path, the abort's words) of every hostile input."""
    demo = _demo_report()
    cases = [("missing", tmp_path / "no-such.json",
              "cannot read %s: No such file" % (tmp_path / "no-such.json")),
             ("directory", tmp_path, "Is a directory"),
             ("/dev/zero", "/dev/zero", "/dev/zero is not a file")]
    os.mkfifo(tmp_path / "fifo")
    cases.append(("FIFO", tmp_path / "fifo", "is not a file"))

    def case(name, content, words):
        path = tmp_path / ("%s.json" % name.replace(" ", "-"))
        path.write_bytes(content if isinstance(content, bytes)
                         else content.encode())
        cases.append((name, path, words))

    def changed(name, change, words):
        report = copy.deepcopy(demo)
        change(report)
        case(name, json.dumps(report, allow_nan=True), words)

    case("empty", "", "not JSON")
    case("not json", "features: 1\n", "not JSON")
    case("a list", "[1, 2]", "not a report of vcsperf check (no 'features')")
    case("another json", '{"bundles": []}', "no 'features'")
    case("latin-1", b'{"features": "\xe9"}', "not UTF-8")
    case("deep", "[" * 100000, "not JSON")
    case("huge integer", '{"features": [], "seconds": 1%s}' % ("0" * 5000),
         "not JSON")
    case("oversized", b" " * (page.MAX_BYTES + 1), "larger than 16.0 MB")
    changed("NaN", lambda r: r["features"][1]["comparisons"][0].update(
        ratio=float("nan")), "it holds NaN, which is not a number")
    changed("infinity", lambda r: r.update(seconds=float("inf")),
            "it holds Infinity")
    case("1e400", json.dumps(demo).replace('"seconds": %s' % json.dumps(
        demo["seconds"]), '"seconds": 1e400', 1), "seconds is Infinity, "
        "out of the range")
    changed("too large", lambda r: r["steps"][0].update(seconds=1e300),
            "steps[0].seconds is 1e+300, out of the range a run measures")
    changed("negative", lambda r: r["features"][0]["comparisons"][0].update(
        core=-1), "features[0].comparisons[0].core is -1, out of the range")
    changed("string for a number", lambda r: r["features"][0].update(
        seconds="12"), 'features[0].seconds is "12", not a number')
    changed("older shape", lambda r: r["features"][2].pop("comparisons"),
            "not a report this release (%s) reads: features[2] has no "
            "'comparisons'" % page.__version__)
    changed("status", lambda r: r["features"][0].update(status="<b>"),
            'features[0].status is "<b>", none of passed, failed, skipped')
    changed("features a dict", lambda r: r.update(features={"a": 1}),
            "features is {\"a\": 1}, not a list")
    changed("too many steps", lambda r: r.update(
        steps=r["steps"] * (page.MAX_STEPS // len(r["steps"]) + 1)),
        "more than the %d a page shows" % page.MAX_STEPS)
    changed("no repository", lambda r: r.pop("repository"),
            "the report has no 'repository'")
    changed("estimate a list", lambda r: r.update(estimate=[1]),
            "estimate is [1], not an object")
    # seeded: a random number of the report replaced by a random value
    for index in range(campaign.size(3, 12)):
        report = copy.deepcopy(demo)
        feature = rng.choice([f for f in report["features"]
                              if f["comparisons"]])
        c = rng.choice(feature["comparisons"])
        key = rng.choice(["core", "ours", "ratio"])
        c[key] = rng.choice([-rng.random(), 10 ** rng.randint(19, 300),
                             "1", [], {}, True])
        case("random %d" % index, json.dumps(report), "out of the range"
             if isinstance(c[key], (int, float)) and not isinstance(
                 c[key], bool) else "not a number")
    return cases


def test_hostile_reports_refused(tmp_path, tally):
    """The hostile inputs below, read in this process: each one
    ``Abort`` that says what is wrong, with a hint."""
    for name, path, words in _hostile_reports(tmp_path, tally.rng):
        try:
            page.load(str(path))
            tally.case(False, "%s: read" % name)
        except page.Abort as abort:
            tally.case(words in str(abort) and "\n" not in str(abort)
                       and abort.hint, "%s: %s" % (name, abort))
    tally.check()


@pytest.mark.slow
@pytest.mark.campaign
def test_hostile_reports_abort(tmp_path, tally):
    """Every input that is not a report this release reads is one
    ``abort:`` line saying what is wrong, with a hint; no page is
    written, and an old page stays as it was."""
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    out = tmp_path / "page.html"
    out.write_text("the last good page\n")
    good = _write(tmp_path / "good.json", _demo_report())
    for name, path, words in _hostile_reports(inputs, tally.rng):
        proc = campaign.run_bounded(
            [tools.executable("vcsperf"), "report", good, str(path),
             "--html", str(out)], address_space=2 << 30, timeout=120)
        tally.case(campaign.is_clean_abort(proc) and words in proc.stderr
                   and proc.stderr.count("\n") == 2
                   and proc.stderr.splitlines()[1].startswith("(")
                   and out.read_text() == "the last good page\n"
                   and sorted(os.listdir(tmp_path)) == [
                       "good.json", "inputs", "page.html"],
                   "%s: %s" % (name, proc.stderr.strip()))
    tally.check()


def test_page_path_checked_before_anything(env, hg, tmp_path):
    """``--html`` into a directory that does not exist, onto a directory,
    or without matplotlib: refused in one line before the reports are
    read or the check runs; a symlink is replaced, not written through."""
    good = _write(tmp_path / "r.json", _demo_report())
    for path in (tmp_path / "nowhere" / "p.html", tmp_path):
        proc = _vcsperf_report(good, "--html", path)
        assert campaign.is_clean_abort(proc), proc.stderr
        assert proc.stderr.startswith("abort: cannot write the report to "
                                      "%s" % path)
        assert "give --html" in proc.stderr
    # a symlink given as the page: replaced, what it points to untouched
    elsewhere = tmp_path / "elsewhere.html"
    elsewhere.write_text("not ours\n")
    link = tmp_path / "link.html"
    link.symlink_to(elsewhere)
    assert _vcsperf_report(good, "--html", link).returncode == 0
    assert not link.is_symlink() and "<svg" in link.read_text()
    assert elsewhere.read_text() == "not ours\n"
    repo = tmp_path / "repo"
    hg("init", repo)
    proc = subprocess.run(
        [tools.executable("vcsperf"), "check", "--repo", str(repo),
         "--html", str(tmp_path / "nowhere" / "p.html")], env=env,
        capture_output=True, text=True, timeout=60)
    assert campaign.is_clean_abort(proc) and proc.stdout == ""
    # matplotlib hidden from a run: the page is refused, the check too
    shadow = tmp_path / "shadow"
    (shadow / "matplotlib").mkdir(parents=True)
    (shadow / "matplotlib" / "__init__.py").write_text(
        "raise ImportError('hidden by the test')\n")
    proc = _vcsperf_report(good, "--html", tmp_path / "p.html",
                           env=dict(env, PYTHONPATH=str(shadow)))
    assert campaign.is_clean_abort(proc)
    assert "needs matplotlib" in proc.stderr and "'.[html]'" in \
        proc.stderr
    assert not (tmp_path / "p.html").exists()


def test_check_writes_the_page(hg, tmp_path, monkeypatch):
    """``vcsperf check --html``: the run's report drawn, beside the JSON,
    both by rename; the run's report has what the page draws."""
    repo = tmp_path / "repo"
    hg("init", repo)
    (repo / "a.py").write_text("x = 1\n")
    hg("commit", "-q", "-A", "-m", "a", cwd=repo)

    def measured(check, work):
        with check.step("a timed step"):
            check.command(["true"], check.hg_env())
        check.compare("a figure", 2.0, 3.0, "seconds", "lower")

    from test_check import FEATURES, _replace_features
    _replace_features(monkeypatch, dict(dict.fromkeys(
        FEATURES, lambda check, work: "skipped"), importer=measured))
    out = tmp_path / "out"
    out.mkdir()
    check = runner.Check(str(repo), scratch=str(tmp_path))
    assert runner.report_run(check, str(out / "r.json"),
                             str(out / "r.html")) == 0
    assert sorted(os.listdir(out)) == ["r.html", "r.json"]
    report = json.loads((out / "r.json").read_text())
    assert report["started"] and report["vcsperf_version"]
    assert all(s["largest_process_bytes_so_far"] > 0
               for s in report["steps"])
    source = (out / "r.html").read_text()
    assert "importer: ours against core" in source
    assert "1 figure worse than core" in source
    assert "importer (passed): a figure is 1.5x core, worse" in source


#: The demo on three snapshots, every feature skipped (as in
#: tests/test_check.py), in the directory argv[1].
SMALL_DEMO = """
import dataclasses, sys
from vcsperf.check import demo, features
from vcsperf.harness import history
sources = history.installed_sources
history.installed_sources = lambda: list(
    sources(distributions=("pycparser",)))[:3]
features.FEATURES = tuple(dataclasses.replace(
    f, function=lambda check, work: "not in this test")
    for f in features.FEATURES)
sys.exit(demo.run_demo(sys.argv[1]))
"""


def test_demo_without_matplotlib(env, tmp_path):
    """Installed without the html extra, the demo runs as before and says
    why it wrote no page."""
    shadow = tmp_path / "shadow"
    (shadow / "matplotlib").mkdir(parents=True)
    (shadow / "matplotlib" / "__init__.py").write_text(
        "raise ImportError('hidden by the test')\n")
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run(
        [tools.executable("python"), "-c", SMALL_DEMO, str(work)],
        env=dict(env, PYTHONPATH=str(shadow),
                 XDG_CACHE_HOME=str(tmp_path / "cache")),
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "(no report page: %s)\n" % page.INSTALL_HINT in proc.stdout
    assert "\nreport page:" not in proc.stdout
    assert not (tmp_path / "cache").exists() and os.listdir(work) == []
