"""Issue 32, item 4: contrib/bundlegen's monitoring pieces, run: the
freshness units' and the alert unit's commands and the cron lines of the
README on real repositories, every unit through systemd's own parser and
``systemd-analyze security`` (under 5), and the alert rules through
Prometheus' ``promtool`` on the metrics files real runs wrote."""

import os
import re
import shlex
import shutil
import subprocess
import time

import pytest
import yaml

from test_bundlegen_monitoring import read_metrics
from vcsperf.harness import tools

CONTRIB = os.path.join(os.path.dirname(__file__), os.pardir, "contrib",
                       "bundlegen")
VENV = os.path.dirname(os.path.dirname(tools.executable("hg")))
TEXTFILE = "/var/lib/prometheus/node-exporter"
SERVICES = ["bundlegen@.service", "bundlegen-fresh@.service",
            "gitbridge-bundlegen@.service",
            "gitbridge-bundlegen-fresh@.service", "vcsperf-alert@.service"]
TIMERS = ["bundlegen@.timer", "bundlegen-fresh@.timer",
          "gitbridge-bundlegen@.timer", "gitbridge-bundlegen-fresh@.timer"]


def _unit(name):
    with open(os.path.join(CONTRIB, name)) as fh:
        return fh.read()


def _exec_start(name, **instance):
    """The unit's ExecStart as argv, its specifiers and the virtualenv of
    the layout replaced by this test's."""
    [line] = re.findall(r"^ExecStart=(.*)$", _unit(name), re.M)
    for specifier, value in instance.items():
        line = line.replace("%" + specifier, value)
    return shlex.split(line.replace("/opt/vcsperf/venv", VENV))


def _readme_lines(prefix):
    with open(os.path.join(CONTRIB, "README.md")) as fh:
        return [line for line in fh.read().splitlines()
                if line.startswith(prefix)]


def test_units_wire_the_textfile_directory_and_on_failure():
    for name in SERVICES[:4]:
        text = _unit(name)
        assert "\nOnFailure=vcsperf-alert@%n.service\n" in text, name
        if "fresh" not in name:
            [paths] = re.findall(r"\nReadWritePaths=(.*)\n", text)
            assert "-" + TEXTFILE in paths.split(), name
    # the directory the examples configure is the one the units may write
    assert "metrics-dir = %s\n" % TEXTFILE in _unit("hgrc.example")
    assert any(line.endswith("bundlegen.metrics-dir " + TEXTFILE)
               for line in _readme_lines("git -C "))


@pytest.mark.parametrize("name", SERVICES + TIMERS)
def test_units_parse_and_services_stay_sandboxed(name, tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    for each in SERVICES + TIMERS:
        shutil.copy(os.path.join(CONTRIB, each),
                    tmp_path / each.replace("@.", "@srv-x.git."))
    instance = tmp_path / name.replace("@.", "@srv-x.git.")
    proc = subprocess.run([analyze, "verify", "--man=no", str(instance)],
                          capture_output=True, text=True)
    complaints = [line for line in proc.stderr.splitlines()
                  if line.strip() and not re.search(
                      r"Command /opt/vcsperf/venv/bin/(hg|gitbridge) is not "
                      r"executable", line)]
    assert complaints == [], proc.stderr
    if name.endswith(".service"):
        proc = subprocess.run([analyze, "security", "--offline=true",
                               str(instance)], capture_output=True,
                              text=True)
        found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)",
                          proc.stdout)
        assert found, proc.stdout + proc.stderr
        assert float(found.group(1)) < 5


def test_the_alert_unit_logs_one_error_line():
    argv = _exec_start("vcsperf-alert@.service",
                       i="bundlegen@srv-hg-myrepo.service")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and proc.stdout == ""
    # "<3>": journald logs the line at priority err
    assert proc.stderr == (
        "<3>vcsperf: bundlegen@srv-hg-myrepo.service failed; see systemctl "
        "status bundlegen@srv-hg-myrepo.service and journalctl -u "
        "bundlegen@srv-hg-myrepo.service\n")


def _hg_published(hg, tmp_path):
    repo = tmp_path / "myrepo"
    hg("init", repo)
    (repo / "a").write_text("a\n")
    hg("-R", repo, "commit", "-q", "-A", "-m", "a")
    out = tmp_path / "hg-bundles"
    (repo / ".hg" / "hgrc").write_text(
        "[extensions]\nbundlegen =\nclonebundles =\n[bundlegen]\n"
        "output = %s\nbase-url = file://%s\nformats = gzip\n" % (out, out))
    hg("-R", repo, "bundlegen")
    return repo, out


def _git_published(git, gitbridge, tmp_path, base_url=None):
    """A bare repository whose bundles are published in ``out``, served
    at ``base_url`` (by default ``file://`` of ``out``)."""
    work = tmp_path / "work"
    git("init", "-q", "-b", "main", work)
    git("-C", work, "commit", "-q", "--allow-empty", "-m", "a")
    repo = tmp_path / "myrepo.git"
    git("clone", "-q", "--bare", work, repo)
    out = tmp_path / "git-bundles"
    git("-C", repo, "config", "bundlegen.output", out)
    git("-C", repo, "config", "bundlegen.base-url",
        base_url or "file://%s" % out)
    gitbridge("bundlegen", "--repo", repo)
    return repo, out


def _cron_command(line, repo):
    """The command of a crontab line, on this test's repository."""
    command = line.split(None, 5)[5]
    command = re.sub(r"/srv/(hg|git)/myrepo(\.git)?", str(repo), command)
    return command.replace("/opt/vcsperf/venv", VENV)


@pytest.mark.parametrize("vcs", ["hg", "git"])
def test_freshness_unit_and_cron_line_run(vcs, hg, git, gitbridge, env,
                                          tmp_path):
    if vcs == "hg":
        repo, out = _hg_published(hg, tmp_path)
        unit = "bundlegen-fresh@.service"
        [cron] = [line for line in _readme_lines("45 ") if "/bin/hg " in line]
    else:
        repo, out = _git_published(git, gitbridge, tmp_path)
        unit = "gitbridge-bundlegen-fresh@.service"
        [cron] = [line for line in _readme_lines("50 ")
                  if "/bin/gitbridge " in line]
    argv = _exec_start(unit, f=str(repo))
    cron = _cron_command(cron, repo)
    fresh = subprocess.run(argv, env=env, capture_output=True, text=True)
    assert fresh.returncode == 0 and fresh.stdout.startswith("fresh: ")
    quiet = subprocess.run(["sh", "-c", cron], env=env, capture_output=True,
                           text=True)
    assert quiet.stdout == "" and quiet.stderr == ""

    for name in os.listdir(out):
        if name.endswith((".hg", ".bundle")):
            os.unlink(out / name)
    stale = subprocess.run(argv, env=env, capture_output=True, text=True)
    assert stale.returncode == 1
    assert stale.stdout.startswith("stale: file://%s/" % out)
    assert stale.stdout.endswith(": No such file or directory\n")
    mailed = subprocess.run(["sh", "-c", cron], env=env,
                            capture_output=True, text=True)
    assert mailed.stdout == stale.stdout


def _rule_names(rules):
    return {rule["alert"] for group in rules["groups"]
            for rule in group["rules"]}


def test_alert_rules_name_what_real_runs_write(hg, tmp_path, env):
    """Every metric an alert rule names is in a file that real runs
    wrote; with promtool, the rules load and fire on those files: a
    failed bundlegen run, a failing checkout, and two days without a
    success."""
    with open(os.path.join(CONTRIB, "vcsperf-alerts.yml")) as fh:
        rules = yaml.safe_load(fh)
    repo, _out = _hg_published(hg, tmp_path)
    files = {}
    for what, args in [("ok", ()), ("failed", (
            "--config", "bundlegen.upload-command=exit 3"))]:
        directory = tmp_path / ("bundlegen-" + what)
        directory.mkdir()
        hg.proc("-R", repo, "bundlegen", "--metrics-dir", directory, *args)
        files[what] = directory
        # the failing upload command runs for a new bundle
        hg("-R", repo, "commit", "--config", "ui.allowemptycommit=1", "-m",
           "moved")
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    hg.proc("robustcheckout", "--config", "extensions.robustcheckout=",
            "--metricsdir", checkout, "--networkattempts", "1",
            "--sharebase", tmp_path / "pool", "-r", "a" * 40,
            "http://127.0.0.1:9/r", tmp_path / "dest")
    files["checkout"] = checkout
    written = set()
    for directory in files.values():
        written |= set(read_metrics(directory))
    for group in rules["groups"]:
        for rule in group["rules"]:
            names = set(re.findall(r"\bvcsperf_\w+", rule["expr"]))
            assert names and names <= written, (rule["alert"], names)

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool (Debian's prometheus package) is not "
                    "installed: the rules were not loaded")
    rule_file = os.path.abspath(os.path.join(CONTRIB, "vcsperf-alerts.yml"))
    proc = subprocess.run([promtool, "check", "rules", rule_file],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    def series(directory):
        """The samples of a file, as promtool's input series, constant
        over 73 hours, a sample a minute; Unix times counted from now, so that the test's
        time 0 is the moment the run wrote them."""
        now = time.time()
        found = []
        for name, samples in read_metrics(directory).items():
            for labels, number in samples:
                if name.endswith("_timestamp_seconds"):
                    number -= now
                pairs = ",".join('%s="%s"' % item for item in
                                 sorted(labels.items()))
                found.append({"series": "%s{%s}" % (name, pairs),
                              "values": "%r+0x4400" % round(number, 3)})
        return found

    def alerts(directory, hours):
        names = sorted(_rule_names(rules))
        return [{"eval_time": "%dh" % hours, "alertname": name,
                 "exp_alerts": []} for name in names]

    cases = {
        # a good run: nothing fires a day later, BundlegenNotSucceeding
        # three days later
        ("ok", 24): set(), ("ok", 72): {"BundlegenNotSucceeding"},
        ("failed", 1): {"BundlegenFailed"},
        ("checkout", 0): {"CheckoutsFailing"},
    }
    tests = []
    for (what, hours), firing in cases.items():
        expected = alerts(files[what], hours)
        for entry in expected:
            if entry["alertname"] in firing:
                labels = {"alertname": entry["alertname"],
                          "severity": "warning"}
                sample = read_metrics(files[what])
                key = ("vcsperf_bundlegen_last_run_success"
                       if what != "checkout" else
                       "vcsperf_checkout_last_run_success")
                [(subject, _)] = sample[key]
                labels.update(subject)
                [rule] = [r for group in rules["groups"]
                          for r in group["rules"]
                          if r["alert"] == entry["alertname"]]
                summary = re.sub(r"\{\{ \$labels\.(\w+) \}\}",
                                 lambda m: labels.get(m.group(1), ""),
                                 rule["annotations"]["summary"])
                entry["exp_alerts"] = [{
                    "exp_labels": labels,
                    "exp_annotations": {"summary": summary}}]
        tests.append({"interval": "1m", "input_series": series(files[what]),
                      "alert_rule_test": expected})
    test_file = tmp_path / "alerts-test.yml"
    test_file.write_text(yaml.safe_dump({"rule_files": [rule_file],
                                         "evaluation_interval": "1m",
                                         "tests": tests}))
    proc = subprocess.run([promtool, "test", "rules", str(test_file)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
