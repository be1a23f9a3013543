"""Issue 32, item 2: ``hg robustcheckout`` and ``gitbridge checkout``
write their per-step timings and outcome as a metrics file
(``--metricsdir`` or ``sharepool.metrics-dir``), read here with
Prometheus' own parser: the same steps as the ``--timings`` line, updated
by each run, the last failure kept after a later success; the
``--timings`` line stays as it was."""

import os
import subprocess

import checkout_drivers
from test_bundlegen_monitoring import read_metrics, value
from vcsperf.harness import tools

# The fixtures of the checkout suites.
git_served, hg_served, hg_source, hgrc, module_hgserve = (
    checkout_drivers.git_served, checkout_drivers.hg_served,
    checkout_drivers.hg_source, checkout_drivers.hgrc,
    checkout_drivers.module_hgserve)


def _check_runs(run, url, metrics, timings_name, vcs, good, bad):
    """Three runs of ``run(revision, dest)``: a checkout, one that fails
    (an unknown revision), one more checkout; the file after each."""
    proc = run(good, "job1")
    assert proc.returncode == 0, proc.stderr
    facts = checkout_drivers.timings(proc, timings_name)
    first = read_metrics(metrics)
    subject = {"vcs": vcs, "repository": url}
    steps = {labels["step"]: number for labels, number in
             first["vcsperf_checkout_step_duration_seconds"]
             if all(labels[k] == v for k, v in subject.items())}
    assert set(steps) == set(facts["steps"]) and "clone" in steps
    assert value(first, "vcsperf_checkout_last_run_cloned") == 1
    assert value(first, "vcsperf_checkout_runs_total",
                 outcome="success") == 1
    assert value(first, "vcsperf_checkout_last_run_duration_seconds") >= \
        sum(steps.values()) * 0.99

    proc = run(bad, "job2")
    assert proc.returncode == 255
    failed = read_metrics(metrics)
    stamp = value(failed, "vcsperf_checkout_last_failure_timestamp_seconds")
    assert value(failed, "vcsperf_checkout_last_run_success") == 0
    assert value(failed, "vcsperf_checkout_runs_total",
                 outcome="failure") == 1

    assert run(good, "job3").returncode == 0
    third = read_metrics(metrics)
    assert value(third, "vcsperf_checkout_last_run_cloned") == 0
    assert value(third,
                 "vcsperf_checkout_last_failure_timestamp_seconds") == stamp
    assert value(third, "vcsperf_checkout_runs_total",
                 outcome="success") == 2


def test_robustcheckout_metrics(hg, hg_served, hg_source,
                                tmp_path):
    metrics = tmp_path / "textfile"
    metrics.mkdir()
    url = hg_served.url

    def run(revision, dest):
        return hg.proc("robustcheckout", "--sharebase", tmp_path / "pool",
                       "--metricsdir", metrics, "-r", revision, "--timings",
                       url, tmp_path / dest)
    _check_runs(run, url, metrics, "robustcheckout", "hg",
                hg_source.nodes[-1], "f" * 40)


def test_gitbridge_checkout_metrics(git, git_served, home,
                                    env, tmp_path):
    metrics = tmp_path / "textfile"
    metrics.mkdir()
    (home / ".gitconfig").write_text(
        checkout_drivers.GITCONFIG + "[sharepool]\n\tmetrics-dir = %s\n" % metrics)
    binary = tools.executable("gitbridge")
    url = git_served.repo_url

    def run(revision, dest):
        return subprocess.run(
            [binary, "checkout", "--sharebase", str(tmp_path / "pool"),
             "-r", revision, "--timings", url, str(tmp_path / dest)],
            env=env, capture_output=True, text=True)
    _check_runs(run, url, metrics, "checkout", "git",
                git_served.commits[-1], "f" * 40)


def test_a_user_and_password_stay_out_of_the_file(hg, tmp_path):
    """The file's name and label come from the URL without its user and
    password; a run that fails on the network writes it too."""
    metrics = tmp_path / "textfile"
    metrics.mkdir()
    proc = hg.proc("robustcheckout", "--sharebase", tmp_path / "pool",
                   "--metricsdir", metrics, "--networkattempts", "1", "-r",
                   "a" * 40, "http://ci:secret@127.0.0.1:9/repo",
                   tmp_path / "dest")
    assert proc.returncode == 255
    [name] = [n for n in os.listdir(metrics) if n.endswith(".prom")]
    text = (metrics / name).read_text()
    assert "secret" not in text + " ".join(os.listdir(metrics))
    assert "ci@" not in text
    found = read_metrics(metrics)
    assert value(found, "vcsperf_checkout_runs_total", outcome="failure",
                 repository="http://127.0.0.1:9/repo") == 1


def test_checkout_metrics_keep_no_part_of_a_password_holding_an_at_sign(
        hg, hgserve, tmp_path):
    """Finding: ``--metricsdir`` strips the user and password with
    ``(?<=//)[^/@]*@``, i.e. up to the first ``@``; Mercurial (and git)
    split the user information at the last one, so a password holding
    ``@`` (``http://ci:s3cr@tpassword@host/``: hg accepts and uses it)
    leaves its tail in the label and in the file name of a world-readable
    (0644) file that Prometheus scrapes and keeps."""
    src = tmp_path / "src"
    hg("init", src)
    (src / "f").write_text("1\n")
    hg("-R", src, "commit", "-q", "-A", "-m", "one", "-u", "t")
    server = hgserve(src)
    url = server.url.replace("://", "://ci:s3cr@tpassword@", 1)
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    hg("--config", "extensions.sharepool=", "robustcheckout",
       "--sharebase", tmp_path / "pool", "-b", "default", "--metricsdir",
       metrics_dir, url, tmp_path / "co")
    [prom] = metrics_dir.glob("*.prom")
    assert "tpassword" not in prom.name
    assert "tpassword" not in prom.read_text()


def test_robustcheckout_metrics_of_a_non_utf8_source_path(
        hg, non_utf8_hgrepo, tmp_path):
    """Finding: ``hg robustcheckout --metricsdir`` from a source whose path
    is not UTF-8 checks the tree out, then dies writing the metrics file
    (UnicodeEncodeError; ``write_quietly`` catches only OSError): exit 1
    and a traceback for a checkout that succeeded, so the CI task fails;
    "monitoring never fails the work it watches"."""
    src = non_utf8_hgrepo
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    proc = hg.proc("--config", "extensions.sharepool=", "robustcheckout",
                   "--sharebase", tmp_path / "pool", "-b", "default",
                   "--metricsdir", metrics_dir, src, tmp_path / "co")
    assert (tmp_path / "co" / "a").exists()  # the work is done
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 0, proc.stderr[-500:]
