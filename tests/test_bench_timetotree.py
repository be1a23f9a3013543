"""``vcsperf bench timetotree``: run-task's Git checkout beside
``gitbridge checkout``, on a small real history, through the real CLI."""

import json
import os

import pytest

from vcsperf.bench import quietdisk, timetotree
from vcsperf.harness import tools

PATHS = ["full clone (git clone --bare)", "run-task shallow",
         "run-task shallow blobless sparse",
         "run-task cached, 10 behind, purged",
         "run-task cached blobless sparse, 10 behind, purged",
         "gitbridge cold pool",
         "gitbridge warm pool, new dir", "gitbridge ready tree, new dir",
         "gitbridge cold pool from bundles",
         "gitbridge warm pool, reuse 10 behind",
         "gitbridge warm pool, reuse 10 behind, --purge",
         "gitbridge blobless sparse, cold pool",
         "gitbridge blobless sparse, warm pool, new dir",
         "gitbridge blobless sparse, reuse 10 behind, --purge"]


@pytest.mark.slow
def test_timetotree_on_real_history(real_git_repo, env, tmp_path):
    """Every path runs, is timed step by step, counts the origin's bytes
    and its disk, and ends on the target commit with a clean tree; the
    ratios of issue 29 are set and judged; the warm-reuse paths are broken
    down into git's processes and regions; nothing is left behind."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    report = tmp_path / "ttt.json"
    out = tools.run([tools.executable("vcsperf"), "bench", "timetotree",
                     "--repo", str(real_git_repo), "--behind", "10",
                     "--junk-files", "300", "--json", str(report)],
                    dict(env, TMPDIR=str(scratch)), cwd=str(tmp_path))
    figures = json.loads(report.read_text())
    result = figures["results"]
    assert list(result["paths"]) == PATHS
    tip = tools.run(["git", "-C", str(real_git_repo), "rev-parse", "HEAD"],
                    env).strip()
    assert result["tip"] == tip and result["behind"] == 10
    full = result["paths"]["full clone (git clone --bare)"]
    assert full["bytes_from_origin"] > 100000
    for name, row in result["paths"].items():
        assert 0 < row["total"] < 300, name
        assert all(seconds >= 0 for seconds in row["steps"].values()), name
        assert row["disk"] > 0, name
        # a new directory from a warm pool that has the commit asks the
        # origin nothing (robustcheckout's rule); every other path does
        if "warm pool, new dir" in name or "ready tree" in name:
            assert row["requests"] == 0, name
        else:
            assert row["requests"] > 0, name
        if name != PATHS[0]:
            assert row["check"]["passed"], (name, row["check"])
    paths = result["paths"]
    assert set(paths["run-task shallow"]["steps"]) == {
        "config", "clone", "fetch", "checkout", "purge"}
    assert paths["run-task cached, 10 behind, purged"]["purged"] > 0
    assert "set-url" in paths["run-task cached, 10 behind, purged"]["steps"]
    assert paths["run-task shallow blobless sparse"]["bytes_from_origin"] \
        < full["bytes_from_origin"]
    assert paths["gitbridge cold pool"]["cloned"]
    assert paths["gitbridge warm pool, new dir"]["bytes_from_origin"] \
        < 0.01 * full["bytes_from_origin"]
    reuse = paths["gitbridge warm pool, reuse 10 behind"]
    assert reuse["pulled"] and reuse["left_untracked"] == 300
    assert not reuse["check"]["untracked_checked"]
    purged = paths["gitbridge warm pool, reuse 10 behind, --purge"]
    assert purged["pulled"] and purged["left_untracked"] == 0
    assert "purge" in purged["steps"]
    ready = paths["gitbridge ready tree, new dir"]
    assert "take" in ready["steps"] and "clone" not in ready["steps"]
    assert ready["refill_seconds"] > 0 and ready["ready_tree_bytes"] > 0
    seeded = paths["gitbridge cold pool from bundles"]
    assert seeded["cloned"] and seeded["bundles"] == 1
    assert "bundles" in seeded["steps"] and seeded["publish_seconds"] > 0
    assert seeded["bytes_from_bundle_host"] >= seeded[
        "bundle_bytes_published"] // 2 > 0
    assert 0 < seeded["bytes_from_origin"] < 0.5 * paths[
        "gitbridge cold pool"]["bytes_from_origin"]
    assert set(figures["ratios"]) == {"warm_reuse", "warm_new", "ready_new",
                                      "cold_bytes", "cold_time",
                                      "cold_bundle_bytes", "cold_bundle_time",
                                      "sparse_cold", "sparse_warm"}
    assert all(value > 0 for value in figures["ratios"].values())
    assert set(figures["targets"]) == set(figures["ratios"]) - {
        "sparse_cold", "sparse_warm"}
    for phases in result["phases"].values():
        assert phases["processes"] and phases["regions"]
        assert any(name.startswith("git checkout")
                   for name, _ in phases["processes"])
    assert "gitbridge sparse: gitbridge checkout --filter blob:none " \
        "--sparse-dirs " in out and "where the seconds go" in out
    for label, _key, _op, _target in timetotree.TARGETS:
        assert label in out
    assert list(scratch.iterdir()) == []


def test_timetotree_on_a_directory_that_is_no_git_repository(env,
                                                             tmp_path):
    """``--repo`` that is not a Git repository: one ``abort:`` line and
    its hint, before any work."""
    missing = tmp_path / "nothing"
    missing.mkdir()
    proc = tools.completed([tools.executable("vcsperf"), "bench",
                            "timetotree", "--repo", str(missing)], env,
                           cwd=str(tmp_path))
    assert (proc.returncode, proc.stdout) == (255, "")
    assert proc.stderr.splitlines() == [
        "abort: %s is not a Git repository" % missing,
        "(give a bare repository or a checkout's top directory)"]


def test_phases_sums_processes_and_main_thread_regions(tmp_path):
    """A trace2 event file becomes seconds per git process (children
    indented) and per region of the main thread."""
    events = [
        {"event": "start", "sid": "a", "argv": ["git", "-C", "d", "fetch"]},
        {"event": "start", "sid": "a/b", "argv": ["git-remote-http", "o"]},
        {"event": "region_leave", "sid": "a", "thread": "main",
         "t_rel": 0.5, "nesting": 1, "category": "fetch",
         "label": "fetch_refs"},
        {"event": "region_leave", "sid": "a", "thread": "th01",
         "t_rel": 9.0, "nesting": 1, "category": "x", "label": "y"},
        {"event": "exit", "sid": "a/b", "t_abs": 0.25},
        {"event": "exit", "sid": "a", "t_abs": 0.75},
    ]
    trace = tmp_path / "trace.json"
    trace.write_text("".join(json.dumps(e) + "\n" for e in events))
    found = timetotree.phases(str(trace), 1.0)
    assert found["processes"] == [["git fetch", 0.75],
                                  ["  git-remote-http", 0.25]]
    assert found["regions"] == [["git fetch: fetch/fetch_refs (depth 1)",
                                 0.5]]
    assert found["outside_git"] == pytest.approx(0.25)


def test_paths_selects_some_paths_and_judges_their_ratios(real_git_repo,
                                                          env, tmp_path):
    """``--paths refresh,reuse`` runs run-task's cached refresh and both
    gitbridge reuse paths, in that order, and judges only the warm-reuse
    ratio (``--keep``: their checkouts are left); an unknown name is one
    ``abort:`` line naming the paths."""
    report, work = tmp_path / "ttt.json", tmp_path / "work"
    out = tools.run([tools.executable("vcsperf"), "bench", "timetotree",
                     "--repo", str(real_git_repo), "--behind", "3",
                     "--junk-files", "20", "--paths", "refresh,reuse",
                     "--keep", "--workdir", str(work), "--json",
                     str(report)], env, cwd=str(tmp_path))
    # --keep: every path's checkouts and pools are left in the workdir
    [run] = work.iterdir()
    assert sorted(os.listdir(run / "co")) == [
        "pool-reuse", "pool-reuse-purge", "reuse", "reuse-purge",
        "runtask-cached"]
    figures = json.loads(report.read_text())
    assert list(figures["results"]["paths"]) == [
        name.replace("10 behind", "3 behind")
        for name in [PATHS[3]] + PATHS[9:11]]
    assert list(figures["ratios"]) == ["warm_reuse"]
    # the reused checkout was made by gitbridge: its purge reads the
    # record of a clean tree
    assert figures["results"]["paths"][
        "gitbridge warm pool, reuse 3 behind, --purge"]["purge_from_record"]
    assert list(figures["targets"]) == ["warm_reuse"]
    assert timetotree.TARGETS[0][0] in out
    assert timetotree.TARGETS[1][0] not in out
    assert set(figures["results"]["phases"]) == {
        "run-task cached refresh", "gitbridge reuse --purge"}
    proc = tools.completed([tools.executable("vcsperf"), "bench",
                            "timetotree", "--repo", str(real_git_repo),
                            "--paths", "refresh,warm"], env,
                           cwd=str(tmp_path))
    assert (proc.returncode, proc.stdout) == (255, "")
    assert proc.stderr.splitlines() == [
        "abort: unknown path 'warm' in --paths",
        "(paths are %s, and sparse for every sparse path)"
        % ", ".join(timetotree.PATHS)]


def test_selected_paths_keeps_the_run_order():
    assert timetotree.selected_paths(None) == timetotree.PATHS
    assert timetotree.selected_paths("reuse-purge,refresh") == (
        "refresh", "reuse-purge")
    assert timetotree.selected_paths("new") == ("cold", "new")
    assert timetotree.selected_paths("cold-bundle,shallow,cold") == (
        "shallow", "cold", "cold-bundle")
    assert timetotree.selected_paths("sparse") == (
        "blobless-sparse", "sparse-refresh", "sparse-cold", "sparse-new",
        "sparse-reuse")


def test_sparse_paths_run_both_tools_from_blobless_clones(real_git_repo,
                                                         env, tmp_path):
    """run-task's cached blobless cone checkout and gitbridge's reused
    one in a blobless pool, refreshed and purged: each ends on the tip
    with a clean tree and only the cone on disk, and gitbridge fetched
    the cone's new blobs into its pool; the ratio is reported, not
    judged."""
    report = tmp_path / "ttt.json"
    out = tools.run([tools.executable("vcsperf"), "bench", "timetotree",
                     "--repo", str(real_git_repo), "--behind", "3",
                     "--junk-files", "20", "--paths",
                     "sparse-reuse,sparse-refresh", "--json", str(report)],
                    env, cwd=str(tmp_path))
    figures = json.loads(report.read_text())
    paths = figures["results"]["paths"]
    assert list(paths) == [
        name.replace("10 behind", "3 behind") for name in (PATHS[4],
                                                           PATHS[-1])]
    for row in paths.values():
        assert row["check"]["passed"] and row["check"]["untracked_checked"]
        assert row["sparse"] == figures["results"]["sparse"]
    ours = paths["gitbridge blobless sparse, reuse 3 behind, --purge"]
    assert ours["pulled"] and ours["left_untracked"] == 0
    assert "update_sparse" in ours["steps"]
    assert list(figures["ratios"]) == ["sparse_warm"]
    assert figures["targets"] == {}
    assert "sparse, warm reuse: gitbridge --purge / run-task" in out


def test_remove_tree_deletes_only_inside_and_settle_returns(tmp_path,
                                                            monkeypatch):
    """The bench's parallel delete between paths takes a tree of many
    directories, read-only files and links, and never follows a link out
    of it; ``settle`` syncs and waits, bounded, for the disk to go quiet
    (or, with no block device behind the directory, only syncs)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept").write_text("someone's\n")
    top = tmp_path / "checkout"
    for n in range(30):
        sub = top / ("d%d" % n) / "deeper"
        sub.mkdir(parents=True)
        for m in range(200):
            (sub / ("f%d" % m)).write_text("x")
    (top / "d0" / "ro").write_text("read-only")
    os.chmod(top / "d0" / "ro", 0o444)
    os.symlink(outside, top / "to-outside-dir")
    os.symlink(outside / "kept", top / "d1" / "to-outside-file")
    # 6,000 files, the read-only one, and the link to a file
    assert quietdisk.remove_tree(str(top)) == 6002
    assert not os.path.lexists(top)
    assert (outside / "kept").read_text() == "someone's\n"
    assert quietdisk.remove_tree(str(top)) == 0  # already gone
    # the wait for a quiet disk is bounded (CI's disk is never quiet);
    # where no block device is behind the directory, sync is all
    monkeypatch.setattr(quietdisk, "QUIET_DEADLINE", 1.0)
    assert 0 <= quietdisk.settle(str(tmp_path)) < 1.0 + 20
    if os.path.isdir("/dev/shm"):
        assert 0 <= quietdisk.settle("/dev/shm") < 20


def _bytes_read():
    with open("/proc/self/io") as fh:
        return int(next(line for line in fh
                        if line.startswith("rchar:")).split()[1])


def test_dropped_caches_are_read_back_for_what_is_served(tmp_path,
                                                        monkeypatch):
    """``quietdisk.drop_caches``: where the kernel lets it drop its caches
    (root), every file of the served copy is read back, links and all,
    and nothing is changed; where it does not, it says so and reads
    nothing."""
    served = tmp_path / "served"
    (served / "sub").mkdir(parents=True)
    sizes = {"a": 3 << 20, "sub/b": 12345, "sub/empty": 0}
    for name, size in sizes.items():
        (served / name).write_bytes(os.urandom(size))
    os.symlink("/nonexistent", served / "dangling")
    before = {name: (served / name).read_bytes() for name in sizes}
    start = _bytes_read()
    dropped = quietdisk.drop_caches([str(served)])
    if dropped:
        assert _bytes_read() - start >= sum(sizes.values())
    assert {name: (served / name).read_bytes()
            for name in sizes} == before
    monkeypatch.setattr(quietdisk, "DROP_CACHES",
                        str(tmp_path / "no-such-dir" / "drop_caches"))
    start = _bytes_read()
    assert quietdisk.drop_caches([str(served)]) is False
    assert _bytes_read() - start < 1 << 20
