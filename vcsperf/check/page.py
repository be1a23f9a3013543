"""The report page of ``vcsperf check --html FILE`` and ``vcsperf report
JSON... --html FILE``: one HTML file that needs nothing else to be read
(no network, no script library, no font; a Content-Security-Policy of its
own forbids any load), for people who look at plots rather than logs.

The plots are SVG drawn by matplotlib (the ``html`` extra), inline, with
their text kept as text so that a browser, a search and the page's own
checks read it.  Per repository, from its newest report: a warning for
every figure worse than core's (the feature passed or not), then per
feature its figures as ratios to core's beside the 1.0 line and the wall
time of its steps, then the run's time and disk against their estimates
and its memory peaks.  Given several reports of one repository (the same
``repository`` path), each feature's ratios and the run's time over the
runs, in the order they started (in the order given when a report does
not say when it started, as those of earlier releases do not); reports
of other repositories get a section each.

A small script of the page's own checks runs when it is opened: every
plot is there, drawn and labelled, and nothing was loaded or blocked; it
says so at the top and marks the document (``data-checks``), which is
what the test reads from headless Chromium.

A report is checked before anything is drawn: a file that is not a
report, a report without what every release of the check wrote, a figure
that is not a finite number from 0 to ``LARGEST``, or a file over
``MAX_BYTES``, is one ``Abort``.  Names from a report are escaped on the
page and drawn as plain text (no mathtext)."""

import base64
import datetime
import hashlib
import html
import io
import json
import math
import os
import stat
import unicodedata
import warnings

from vcsperf.check import report as text_report
from vcsperf.check.resume import write_replacing
from vcsperf.core import __version__, pooling
from vcsperf.core.errors import Abort, print_abort

#: The largest report file read: a report of the check is kilobytes.
MAX_BYTES = 16 * 2**20
#: The most reports one page shows, and features, figures per feature and
#: steps per report: bounds far beyond a real run's.
MAX_REPORTS = 1000
MAX_FEATURES = 50
MAX_COMPARISONS = 50
MAX_STEPS = 2000
#: The most steps one feature's plot draws (the first ones), and the
#: runs of one repository its trend shows (the newest).
PLOT_STEPS = 40
TREND_RUNS = 50
#: The largest figure a report may hold (bytes, seconds, ratios): an
#: exabyte, or 30 billion years.
LARGEST = 1e18
#: Characters of a name shown on the page, and in a plot (beside its
#: axis, where a longer name would crowd the bars out).
NAME_CHARS = 100
PLOT_CHARS = 60
#: Unicode categories never shown as they are: controls, surrogates,
#: format characters (a bidirectional override reverses the text after
#: it), line and paragraph separators.
HIDDEN = {"Cc", "Cs", "Cf", "Zl", "Zp"}
STATUSES = ("passed", "failed", "skipped")

WORSE, BETTER = "#c0392b", "#2e8b57"
ESTIMATE, ACTUAL = "#9db8d9", "#1f4e8c"

INSTALL_HINT = "install the html extra from vcsperf's checkout: pip " \
    "install -c constraints.txt '.[html]'"


def require_matplotlib():
    """Abort before any work when the plotting library is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise Abort("the HTML page needs matplotlib, which is not "
                    "installed", hint=INSTALL_HINT) from None


# -- reading reports ------------------------------------------------------


class _Malformed(Exception):
    """A report's content is not what the check writes."""


def _number(value, where, none=False):
    if value is None and none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Malformed("%s is %s, not a number" % (where, _json(value)))
    if not (0 <= value <= LARGEST):  # NaN too
        raise _Malformed("%s is %s, out of the range a run measures (0 to "
                         "%g)" % (where, _json(value), LARGEST))
    return value


def _json(value):
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _string(value, where):
    if not isinstance(value, str):
        raise _Malformed("%s is %s, not a string" % (where, _json(value)))
    return value


def _list(value, where, limit):
    if not isinstance(value, list):
        raise _Malformed("%s is %s, not a list" % (where, _json(value)))
    if len(value) > limit:
        raise _Malformed("%s has %d entries, more than the %d a page shows"
                         % (where, len(value), limit))
    return value


def _record(value, where, keys):
    if not isinstance(value, dict):
        raise _Malformed("%s is %s, not an object" % (where, _json(value)))
    missing = [key for key in keys if key not in value]
    if missing:
        raise _Malformed("%s has no %r" % (where, missing[0]))
    return value


def _numbers_by_name(value, where):
    """An optional ``{name: number}`` of the report; None when absent."""
    if value is None:
        return None
    if not isinstance(value, dict) or len(value) > MAX_FEATURES + 1:
        raise _Malformed("%s is not an object of a number per part"
                         % where)
    return {_string(name, where): _number(number, "%s[%s]" % (
        where, _json(name))) for name, number in value.items()}


def _checked(report):
    """``report`` as the page uses it: what every release of the check
    wrote is required, what later ones added (estimates by part, disk by
    feature, memory, the start) is None when absent."""
    _record(report, "the report", ("repository", "features", "steps",
                                   "seconds", "passed"))
    checked = {
        "repository": _string(report["repository"], "repository"),
        "seconds": _number(report["seconds"], "seconds"),
        "passed": report["passed"] is True,
        "changesets": _number(report.get("changesets", 0), "changesets"),
        "tip": str(report.get("tip") or "")[:40],
        "quick": report.get("quick") is True,
        "hg_version": str(report.get("hg_version") or "")[:40],
        "vcsperf_version": str(report.get("vcsperf_version") or "")[:40],
        "started": _started(report.get("started")),
        "features": [], "steps": [],
    }
    for index, feature in enumerate(_list(report["features"], "features",
                                          MAX_FEATURES)):
        where = "features[%d]" % index
        _record(feature, where, ("name", "status", "comparisons"))
        if feature["status"] not in STATUSES:
            raise _Malformed("%s.status is %s, none of %s" % (
                where, _json(feature["status"]), ", ".join(STATUSES)))
        comparisons = []
        for number, c in enumerate(_list(
                feature["comparisons"], where + ".comparisons",
                MAX_COMPARISONS)):
            at = "%s.comparisons[%d]" % (where, number)
            _record(c, at, ("what", "core_label", "core", "ours", "unit",
                            "better", "ratio"))
            if c["better"] not in ("lower", "higher"):
                raise _Malformed("%s.better is %s, not \"lower\" or "
                                 "\"higher\"" % (at, _json(c["better"])))
            comparisons.append({
                "what": _string(c["what"], at + ".what"),
                "core_label": _string(c["core_label"], at + ".core_label"),
                "core": _number(c["core"], at + ".core"),
                "ours": _number(c["ours"], at + ".ours"),
                "unit": _string(c["unit"], at + ".unit"),
                "better": c["better"],
                "ratio": _number(c["ratio"], at + ".ratio", none=True)})
        error = feature.get("error")
        checked["features"].append({
            "name": _string(feature["name"], where + ".name"),
            "status": feature["status"],
            "error": error if isinstance(error, str) else None,
            "seconds": _number(feature.get("seconds", 0),
                               where + ".seconds"),
            "comparisons": comparisons})
    for index, step in enumerate(_list(report["steps"], "steps",
                                       MAX_STEPS)):
        where = "steps[%d]" % index
        _record(step, where, ("feature", "step", "seconds"))
        checked["steps"].append({
            "feature": _string(step["feature"], where + ".feature"),
            "step": _string(step["step"], where + ".step"),
            "seconds": _number(step["seconds"], where + ".seconds"),
            "memory": _number(step.get("largest_process_bytes_so_far"),
                              where + ".largest_process_bytes_so_far",
                              none=True)})
    estimate = report.get("estimate") or {}
    scratch = report.get("scratch") or {}
    memory = report.get("peak_memory") or {}
    for name, part in (("estimate", estimate), ("scratch", scratch),
                       ("peak_memory", memory)):
        if not isinstance(part, dict):
            raise _Malformed("%s is %s, not an object" % (name, _json(part)))
    checked["time"] = (
        _numbers_by_name(estimate.get("seconds_by_part"),
                         "estimate.seconds_by_part"),
        _numbers_by_name(estimate.get("actual_seconds_by_part"),
                         "estimate.actual_seconds_by_part"))
    checked["disk"] = (
        _numbers_by_name(scratch.get("estimated_bytes_by_feature"),
                         "scratch.estimated_bytes_by_feature"),
        _numbers_by_name(scratch.get("peak_used_bytes_by_feature"),
                         "scratch.peak_used_bytes_by_feature"))
    checked["memory"] = {
        "runner": _number(memory.get("runner_bytes"),
                          "peak_memory.runner_bytes", none=True),
        "largest": _number(memory.get("largest_process_bytes"),
                           "peak_memory.largest_process_bytes", none=True),
        "reached_in": str(memory.get("reached_in") or "")}
    return checked


def _started(value):
    """The start of the run, an aware datetime, or None (earlier releases
    did not write it; anything else there is ignored)."""
    if not isinstance(value, str):
        return None
    try:
        started = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    return started if started.tzinfo else None


def _reject_constant(name):
    raise _Malformed("it holds %s, which is not a number" % name)


def load(path):
    """The report the check wrote to ``path`` (``--json``), checked; one
    ``Abort`` for anything else."""
    hint = "give the file that vcsperf check --json wrote"
    try:
        # not blocking on a FIFO; what was opened is what is checked
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with open(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise Abort("%s is not a file" % path, hint=hint)
            data = fh.read(MAX_BYTES + 1)
    except OSError as err:
        raise Abort("cannot read %s: %s" % (path, err.strerror or err),
                    hint=hint) from None
    if len(data) > MAX_BYTES:
        raise Abort("%s is larger than %s: not a report of vcsperf check"
                    % (path, pooling.format_bytes(MAX_BYTES)), hint=hint)
    try:
        report = json.loads(data.decode("utf-8"),
                            parse_constant=_reject_constant)
        if not isinstance(report, dict) or "features" not in report:
            raise Abort("%s is not a report of vcsperf check (no "
                        "'features')" % path, hint=hint)
        return _checked(report)
    except UnicodeDecodeError:
        raise Abort("%s is not a report of vcsperf check: not UTF-8 text"
                    % path, hint=hint) from None
    except _Malformed as bad:
        raise Abort("%s is not a report this release (%s) reads: %s"
                    % (path, __version__, bad), hint="a report of another "
                    "version, or changed: run vcsperf check again") from None
    except (ValueError, RecursionError) as err:
        raise Abort("%s is not a report of vcsperf check: not JSON (%s)"
                    % (path, str(err).splitlines()[0][:80]),
                    hint=hint) from None


# -- figures ----------------------------------------------------------------


def _shown(text, limit=NAME_CHARS):
    """``text`` as the page shows and draws it: characters of ``HIDDEN``
    replaced, at most ``limit`` characters."""
    if len(text) > limit:
        text = text[:limit - 1] + "\u2026"
    return "".join("\ufffd" if unicodedata.category(ch) in HIDDEN
                   else ch for ch in text)


def _worse(c):
    """Whether the comparison ``c`` is worse than core's."""
    if c["ratio"] is None:
        return False
    return c["ratio"] > 1 if c["better"] == "lower" else c["ratio"] < 1


def _label(c, limit=PLOT_CHARS):
    return _shown("%s (vs %s)" % (c["what"], c["core_label"]), limit)


class _Figures:
    """The SVG plots of one page: each figure gets an id and a salt of its
    own for matplotlib's ids, so that plots inline in one document never
    share an id."""

    def __init__(self):
        self.count = 0

    def render(self, draw, title, labels, caption, size):
        """One ``<figure>``: ``draw(figure)`` draws on a matplotlib
        Figure of ``size`` inches; ``labels``, texts the plot must show
        (the page's checks look for them)."""
        import matplotlib
        from matplotlib.figure import Figure
        self.count += 1
        ident = "plot-%d" % self.count
        with warnings.catch_warnings(), matplotlib.rc_context({
                "svg.fonttype": "none", "svg.hashsalt": ident,
                "text.parse_math": False, "font.size": 9,
                "font.family": "sans-serif", "axes.titlesize": 10}):
            # a glyph the font lacks is drawn as a box, said once here
            warnings.simplefilter("ignore", UserWarning)
            figure = Figure(figsize=size, layout="constrained")
            draw(figure)
            figure.suptitle(title, fontsize=10, fontweight="bold")
            out = io.StringIO()
            figure.savefig(out, format="svg", metadata={"Date": None})
        svg = out.getvalue()
        svg = svg[svg.index("<svg"):]
        return ('<figure class="plot" id="%s" data-expect="%s">%s'
                '<figcaption>%s</figcaption></figure>' % (
                    ident, html.escape(json.dumps([title] + labels)), svg,
                    html.escape(caption)))


def _log_axis(axis, set_scale):
    """A log scale whose ticks say plain ratios (``0.5x``, ``2x``), as
    text: matplotlib's own are mathtext, which the page does not parse."""
    from matplotlib import ticker
    set_scale("log")
    axis.set_major_locator(ticker.LogLocator(subs=(1, 2, 5)))
    axis.set_major_formatter(ticker.FuncFormatter(
        lambda value, _: "%gx" % value))
    axis.set_minor_formatter(ticker.NullFormatter())


def _log_limits(values):
    low = min(min(values), 1.0)
    high = max(max(values), 1.0)
    return low / 1.6, high * 1.6


def _ratios_figure(figures, name, comparisons):
    shown = [c for c in comparisons if c["ratio"] is not None]
    labels = [_label(c) for c in shown]
    # a ratio of 0 (ours measured nothing) drawn at the left edge
    ratios = [max(c["ratio"], 1e-3) for c in shown]

    def draw(figure):
        axes = figure.add_subplot()
        rows = list(range(len(shown)))[::-1]
        colors = [WORSE if _worse(c) else BETTER for c in shown]
        axes.barh(rows, [r - 1 for r in ratios], left=1, color=colors,
                  height=0.6)
        axes.axvline(1.0, color="black", linewidth=1.2)
        _log_axis(axes.xaxis, axes.set_xscale)
        axes.set_xlim(*_log_limits(ratios))
        axes.set_yticks(rows, labels)
        for row, ratio, c in zip(rows, ratios, shown):
            axes.annotate("%.3gx" % c["ratio"], (ratio, row),
                          xytext=(4 if ratio >= 1 else -4, 0),
                          textcoords="offset points", va="center",
                          ha="left" if ratio >= 1 else "right")
        axes.set_xlabel("ours \u00f7 core (log scale; 1x = core)")
    return figures.render(
        draw, _shown("%s: ours against core" % name), labels,
        "Each bar runs from 1x (core) to ours \u00f7 core: red where ours "
        "is worse than core, green where better (a figure whose better side "
        "is higher, such as a speed, is worse left of the line).",
        (7.5, 1.2 + 0.38 * len(shown)))


def _bars_figure(figures, title, names, series, unit, xlabel, caption):
    """Horizontal bars, one group per name, one bar per ``series``
    ``(label, color, values)``, ``values`` a number or None per name."""
    names = [_shown(n, PLOT_CHARS) for n in names]
    scale, unit_name = _scale(unit, [v for _, _, values in series
                                     for v in values if v is not None])

    def draw(figure):
        axes = figure.add_subplot()
        height = 0.8 / len(series)
        for number, (label, color, values) in enumerate(series):
            rows = [len(names) - 1 - i + (len(series) - 1 - 2 * number)
                    * height / 2 for i in range(len(names))]
            axes.barh(rows, [(v or 0) / scale for v in values],
                      height=height, color=color, label=label)
        axes.set_yticks(range(len(names))[::-1], names)
        axes.set_xlabel("%s (%s)" % (xlabel, unit_name))
        if len(series) > 1:
            axes.legend(loc="lower right")
    return figures.render(draw, _shown(title), names + [
        label for label, _, _ in series if len(series) > 1], caption,
        (7.5, 1.3 + 0.3 * len(names) * max(1, len(series) * 0.7)))


def _by_part(estimated, actual):
    """The parts of both, and the values of each, in that order."""
    names = list(dict.fromkeys([*estimated, *actual]))
    return names, [estimated.get(n) for n in names], \
        [actual.get(n) for n in names]


def _scale(unit, values):
    """The divisor and name of the axis unit for ``values``."""
    if unit == "bytes":
        top = max(values, default=0)
        for divisor, name in ((2**30, "GiB"), (2**20, "MiB"),
                              (2**10, "KiB")):
            if top >= divisor:
                return divisor, name
        return 1, "bytes"
    return 1, unit


def _run_ticks(axes, labels):
    """The runs along the x axis, at most a dozen of them named."""
    step = -(-len(labels) // 12)
    axes.set_xticks(range(0, len(labels), step), labels[::step],
                    rotation=30, ha="right")


def _trend_figure(figures, name, runs, labels):
    """Each figure of feature ``name`` over ``runs`` (its comparisons in
    each report, None where it did not run), ratios beside the 1.0 line."""
    keys = []
    for comparisons in runs:
        for c in comparisons or ():
            key = (c["what"], c["core_label"])
            if c["ratio"] is not None and key not in keys:
                keys.append(key)
    lines = []
    for key in keys:
        values = []
        for comparisons in runs:
            match = [c["ratio"] for c in comparisons or ()
                     if (c["what"], c["core_label"]) == key
                     and c["ratio"] is not None]
            values.append(max(match[0], 1e-3) if match else math.nan)
        lines.append((_shown("%s (vs %s)" % key, PLOT_CHARS), values))

    def draw(figure):
        axes = figure.add_subplot()
        xs = range(len(runs))
        for label, values in lines:
            axes.plot(xs, values, marker="o", label=label)
        axes.axhline(1.0, color="black", linewidth=1.2)
        _log_axis(axes.yaxis, axes.set_yscale)
        finite = [v for _, values in lines for v in values
                  if not math.isnan(v)]
        axes.set_ylim(*_log_limits(finite))
        _run_ticks(axes, labels)
        axes.set_ylabel("ours \u00f7 core (log)")
        axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
    return figures.render(
        draw, _shown("%s: ratios over %d runs" % (name, len(runs))),
        [label for label, _ in lines], "Below the line is lower than "
        "core; each point is one run, oldest left.", (8, 3.2))


def _seconds_trend_figure(figures, reports, labels):
    def draw(figure):
        axes = figure.add_subplot()
        axes.plot(range(len(reports)), [r["seconds"] for r in reports],
                  marker="o", color=ACTUAL, label="total seconds")
        _run_ticks(axes, labels)
        axes.set_ylabel("seconds (wall)")
        axes.set_ylim(bottom=0)
    return figures.render(draw, "whole run: seconds over %d runs"
                          % len(reports), ["seconds (wall)"],
                          "The wall time of each run, oldest left.",
                          (7.5, 2.8))


# -- the page -----------------------------------------------------------------

#: The page's own checks; the Content-Security-Policy lets this script
#: run, by its digest, and nothing else.
CHECKS = """
(function () {
  var problems = [];
  function say() {
    var line = document.getElementById("page-checks");
    var plots = document.querySelectorAll("figure.plot").length;
    document.body.setAttribute("data-plots", String(plots));
    document.body.setAttribute("data-checks",
                               problems.length ? "failed" : "passed");
    line.textContent = problems.length
      ? "page checks FAILED: " + problems.join("; ")
      : "page checks passed: " + plots + " plots present, drawn and " +
        "labelled; nothing loaded from elsewhere";
    line.className = problems.length ? "bad" : "good";
  }
  document.addEventListener("securitypolicyviolation", function (event) {
    problems.push("blocked " + event.violatedDirective + " " +
                  event.blockedURI);
    say();
  });
  window.addEventListener("error", function (event) {
    var target = event.target;
    problems.push(target && target !== window
                  ? "failed to load " + target.tagName
                  : "error: " + event.message);
    say();
  }, true);
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("figure.plot").forEach(function (figure) {
      var svg = figure.querySelector("svg");
      if (!svg) {
        problems.push(figure.id + ": no plot");
        return;
      }
      var box = svg.getBoundingClientRect();
      if (box.width < 200 || box.height < 60) {
        problems.push(figure.id + ": drawn " + Math.round(box.width) +
                      "x" + Math.round(box.height));
      }
      if (!svg.querySelector("path, rect, use")) {
        problems.push(figure.id + ": nothing drawn");
      }
      var texts = [];
      svg.querySelectorAll("text").forEach(function (text) {
        texts.push(text.textContent);
      });
      JSON.parse(figure.getAttribute("data-expect")).forEach(
        function (label) {
          if (texts.indexOf(label) < 0) {
            problems.push(figure.id + ": no label " + JSON.stringify(label));
          }
        });
    });
    document.querySelectorAll("[src], link, object, iframe, embed")
      .forEach(function (element) {
        problems.push("an element loads " + element.outerHTML.slice(0, 60));
      });
    performance.getEntriesByType("resource").forEach(function (entry) {
      problems.push("loaded " + entry.name);
    });
    say();
  });
})();
"""

STYLE = """
body { font-family: sans-serif; margin: 1.5em auto; max-width: 62em;
       color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.25em; border-top: 2px solid #888;
padding-top: .6em; } h3 { font-size: 1.05em; margin-bottom: .3em; }
figure { margin: .6em 0 1.2em; } figure svg { max-width: 100%; height: auto; }
figcaption { font-size: .85em; color: #555; }
.good { color: #2e8b57; } .bad { color: #c0392b; font-weight: bold; }
.warnings { border-left: 4px solid #e67e22; padding: .2em 1em;
            background: #fdf1ef; }
.passed { color: #2e8b57; } .failed { color: #c0392b; }
.skipped { color: #8a6d00; } code { font-size: .95em; }
table { border-collapse: collapse; } td + td { white-space: nowrap; }
td:first-child { overflow-wrap: anywhere; } td, th { padding: .15em .6em;
text-align: left; border-bottom: 1px solid #ddd; }
"""


def _run_label(report, index):
    if report["started"] is not None:
        return report["started"].strftime("%Y-%m-%d %H:%M")
    return "run %d" % (index + 1)


def _ordered(reports):
    """The reports of one repository, oldest first, and whether they are
    in the order they ran (all say when they started) or as given."""
    if all(r["started"] is not None for r in reports):
        return sorted(reports, key=lambda r: r["started"]), True
    return list(reports), False


def _warnings(report):
    lines = []
    for feature in report["features"]:
        if feature["status"] == "failed":
            lines.append("%s FAILED: %s" % (
                _shown(feature["name"]), _shown(feature["error"] or "", 300)))
        for c in feature["comparisons"]:
            if _worse(c):
                lines.append("%s (%s): %s is %.3gx %s, worse (ours %s, core "
                             "%s)" % (
                                 _shown(feature["name"]), feature["status"],
                                 _shown(c["what"]), c["ratio"],
                                 _shown(c["core_label"]),
                                 text_report.amount(c["ours"], c["unit"]),
                                 text_report.amount(c["core"], c["unit"])))
    return lines


def _table_row(c):
    return ('<tr class="%s"><td>%s</td><td>%s</td><td>%s</td><td>%s</td>'
            '</tr>' % ("failed" if _worse(c) else "",
                       html.escape(_label(c, NAME_CHARS)),
                       html.escape(text_report.amount(c["core"], c["unit"])),
                       html.escape(text_report.amount(c["ours"], c["unit"])),
                       "%.4gx" % c["ratio"] if c["ratio"] is not None
                       else "-"))


def _feature_section(figures, report, feature, trend):
    """The section of one feature of the newest ``report``; ``trend``, its
    comparisons in every run of the repository and their labels, or
    None."""
    name = _shown(feature["name"], PLOT_CHARS)
    parts = ['<section class="feature"><h3>%s <span class="%s">%s</span> '
             '(%.1f s)%s</h3>' % (
                 html.escape(_shown(feature["name"])), feature["status"],
                 feature["status"].upper(), feature["seconds"],
                 html.escape(": " + _shown(feature["error"], 300))
                 if feature["error"] else "")]
    if any(c["ratio"] is not None for c in feature["comparisons"]):
        parts.append(_ratios_figure(figures, name, feature["comparisons"]))
    no_ratio = [c for c in feature["comparisons"] if c["ratio"] is None]
    if no_ratio:
        parts.append("<p>no ratio (core measured 0): %s</p>" % html.escape(
            ", ".join(_label(c) for c in no_ratio)))
    if feature["comparisons"]:
        parts.append("<table><tr><th>figure</th><th>core</th><th>ours</th>"
                     "<th>ours \u00f7 core</th></tr>%s</table>" % "".join(
                         _table_row(c) for c in feature["comparisons"]))
    steps = [s for s in report["steps"] if s["feature"] == feature["name"]]
    if steps:
        drawn = steps[:PLOT_STEPS]
        parts.append(_bars_figure(
            figures, "%s: seconds per step" % name,
            [s["step"] for s in drawn],
            [("wall seconds", ACTUAL, [s["seconds"] for s in drawn])],
            "seconds", "wall time", "Each step of the feature%s, as the "
            "run took it; a timed step had the machine to itself." % (
                " (the first %d of %d)" % (len(drawn), len(steps))
                if len(drawn) < len(steps) else "")))
    if trend is not None:
        runs, labels = trend
        if any(c["ratio"] is not None for comparisons in runs
               for c in comparisons or ()):
            parts.append(_trend_figure(figures, name, runs, labels))
    parts.append("</section>")
    return "".join(parts)


def _run_section(figures, report):
    """The run's time and disk against the estimates, and memory."""
    parts = ["<section class=\"run\"><h3>the whole run</h3>"]
    missing = []
    estimated, actual = report["time"]
    if estimated and actual:
        names, estimated, actual = _by_part(estimated, actual)
        parts.append(_bars_figure(
            figures, "time: estimate against actual, per part", names,
            [("estimated", ESTIMATE, estimated), ("actual", ACTUAL, actual)],
            "seconds", "wall time", "Estimated before the run from the "
            "repository's size; actual: the wall time of each part's "
            "steps."))
    else:
        missing.append("time by part")
    estimated, actual = report["disk"]
    if estimated and actual:
        names, estimated, actual = _by_part(estimated, actual)
        parts.append(_bars_figure(
            figures, "disk: estimate against actual peak, per part", names,
            [("estimated", ESTIMATE, estimated),
             ("actual peak", ACTUAL, actual)], "bytes", "scratch disk",
            "Scratch disk estimated before the run, and the most the "
            "scratch directory took while each part ran (the copy stays "
            "all along)."))
    else:
        missing.append("disk by part")
    memory = report["memory"]
    bars = {}
    if memory["runner"] is not None:
        bars["the runner (Python)"] = memory["runner"]
    if memory["largest"] is not None:
        bars["largest process of the run"] = memory["largest"]
    for feature in report["features"]:
        marks = [s["memory"] for s in report["steps"]
                 if s["feature"] == feature["name"]
                 and s["memory"] is not None]
        if marks:
            bars["largest process by the end of %s"
                 % _shown(feature["name"])] = max(marks)
    if bars:
        parts.append(_bars_figure(
            figures, "memory: peak resident memory", list(bars),
            [("resident memory", ACTUAL, list(bars.values()))],
            "bytes", "resident memory", "The kernel keeps the largest "
            "resident memory of the processes the run started so far, not "
            "one per step: a bar higher than the one above it is the "
            "largest process of that feature%s." % (
                " (reached in %s)" % _shown(memory["reached_in"], 200)
                if memory["reached_in"] else "")))
    if missing:
        parts.append("<p>not in this report (an earlier release's): %s"
                     "</p>" % ", ".join(missing))
    parts.append("</section>")
    return "".join(parts)


def _repository_section(figures, repository, reports):
    reports, in_time = _ordered(reports)
    given = len(reports)
    reports = reports[-TREND_RUNS:]
    newest = reports[-1]
    labels = [_run_label(r, i) for i, r in enumerate(reports)]
    parts = ['<section class="repository"><h2>%s</h2>' % html.escape(
        _shown(repository, 300))]
    parts.append(
        "<p>newest run: %s, %s changesets%s, tip <code>%s</code>, hg %s, "
        "vcsperf %s: %.1f s, <span class=\"%s\">%s</span></p>" % (
            html.escape(labels[-1]), int(newest["changesets"]),
            " (quick)" if newest["quick"] else "",
            html.escape(_shown(newest["tip"][:12])),
            html.escape(_shown(newest["hg_version"]) or "?"),
            html.escape(_shown(newest["vcsperf_version"]) or "?"),
            newest["seconds"], "passed" if newest["passed"] else "failed",
            "PASSED" if newest["passed"] else "FAILED"))
    if given > 1:
        parts.append("<p>%d reports of this repository%s, %s.</p>" % (
            given, "; the trend shows the newest %d" % len(reports)
            if given > len(reports) else "",
            "oldest first, by when each run started" if in_time else
            "in the order given (not every report says when it started)"))
    warnings = _warnings(newest)
    parts.append('<div class="warnings"><h3>%d figure%s worse than core, or '
                 'failed</h3>%s</div>' % (
                     len(warnings), "" if len(warnings) == 1 else "s",
                     "<ul>%s</ul>" % "".join("<li>%s</li>" % html.escape(w)
                                             for w in warnings)
                     if warnings else "<p>none</p>"))
    for feature in newest["features"]:
        trend = None
        if len(reports) > 1:
            trend = ([next((f["comparisons"] for f in r["features"]
                            if f["name"] == feature["name"]), None)
                      for r in reports], labels)
        parts.append(_feature_section(figures, newest, feature, trend))
    parts.append(_run_section(figures, newest))
    if len(reports) > 1:
        parts.append(_seconds_trend_figure(figures, reports, labels))
    parts.append("</section>")
    return "".join(parts)


def build(reports):
    """The page (text) of ``reports`` (as ``load`` returns them): one
    section per repository, in the order first given."""
    by_repository = {}
    for report in reports:
        by_repository.setdefault(report["repository"], []).append(report)
    figures = _Figures()
    sections = [_repository_section(figures, repository, group)
                for repository, group in by_repository.items()]
    digest = base64.b64encode(hashlib.sha256(CHECKS.encode()).digest())
    policy = ("default-src 'none'; style-src 'unsafe-inline'; "
              "script-src 'sha256-%s'" % digest.decode())
    title = "vcsperf check: %s" % ", ".join(
        _shown(os.path.basename(r.rstrip("/")) or r, 40)
        for r in by_repository)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        '<meta http-equiv="Content-Security-Policy" content="%s">\n'
        '<meta name="generator" content="vcsperf %s">\n'
        '<title>%s</title><style>%s</style>\n<script>%s</script></head>\n'
        '<body data-checks="pending"><h1>vcsperf check</h1>\n'
        '<p id="page-checks" class="bad">page checks did not run</p>\n'
        '<p>%d report%s of %d repositor%s; figures are ours against core '
        "Mercurial's (or core Git's), measured side by side in the same "
        'run.</p>\n%s\n</body></html>\n' % (
            html.escape(policy), __version__, html.escape(title), STYLE,
            CHECKS, len(reports), "" if len(reports) == 1 else "s",
            len(by_repository), "y" if len(by_repository) == 1 else "ies",
            "\n".join(sections)))


def check_output(path):
    """Refuse, before any work, an ``--html`` path the page could not be
    written to, or a page without its plotting library."""
    text_report.check_output(path, "--html")
    if path is not None:
        require_matplotlib()


def write(reports, path):
    """Write the page of ``reports`` to ``path`` by write-then-rename."""
    text = build(reports)
    try:
        write_replacing(path, text)
    except OSError as err:
        raise Abort("cannot write the page to %s: %s"
                    % (path, err.strerror or err)) from None


def write_from_report(report, path):
    """The page of the report a run just made (a dict), checked like a
    report read from a file."""
    try:
        checked = _checked(json.loads(json.dumps(report)))
    except _Malformed as bad:
        raise Abort("the run's report cannot be drawn: %s" % bad) from None
    write([checked], path)


def main(paths, html_path):
    """``vcsperf report JSON... --html FILE``: the exit status."""
    try:
        if len(paths) > MAX_REPORTS:
            raise Abort("%d reports: a page shows at most %d"
                        % (len(paths), MAX_REPORTS),
                        hint="give the reports of fewer runs")
        check_output(html_path)
        reports = [load(path) for path in paths]
        write(reports, html_path)
    except Abort as abort:
        return print_abort(abort)
    print("wrote %s: %d report%s" % (html_path, len(reports),
                                     "" if len(reports) == 1 else "s"))
    return 0
