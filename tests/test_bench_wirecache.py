"""``vcsperf bench wirecache`` at a tiny scale: the first releases of the
real-content history, a few clients, run as a user runs it; and its
correctness check against a real wirecache server that sends a wrong
response (two stored entries written under each other's key)."""

import glob
import json
import os
import re
import time

import pytest

from vcsperf.bench import wirecache
from vcsperf.core import responsecache
from vcsperf.core.errors import Abort
from vcsperf.harness import tools

pytestmark = pytest.mark.slow

#: The history the bench is given: the first releases of pip.
RELEASES = 8


@pytest.fixture
def source(real_hg_repo_cached, hg, tmp_path):
    repo = tmp_path / "source"
    hg("clone", "-q", "-U", "-r", str(RELEASES - 1), real_hg_repo_cached,
       repo)
    return repo


def test_the_bench_measures_both_servers_and_checks_every_answer(
        source, env, tmp_path):
    report = tmp_path / "out.json"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    out = tools.run([tools.executable("vcsperf"), "bench", "wirecache",
                     str(source), "--clients", "3", "--push", "2",
                     "--max-depth", "2", "--stream-pulls", "3",
                     "--stream-clients", "2", "--server-threads", "2",
                     "--repeat", "2", "--memory-answers",
                     "--json", str(report)],
                    dict(env, TMPDIR=str(scratch)), cwd=str(tmp_path))
    figures = json.loads(report.read_text())
    results, ratios = figures["results"], figures["ratios"]
    rounds = results["rounds"]
    assert list(rounds) == ["3 clients after the push",
                            "stream of 3 pulls, depth 1-2"]
    for name, sides in rounds.items():
        for side in ("core", "wirecache"):
            assert sides[side]["rounds"] == 2
            for key in ("server_cpu_per_client", "bytes_per_client",
                        "p50_seconds", "p95_seconds"):
                assert sides[side][key] > 0, (name, side, key)
            # the line of the table shows the figures of the JSON
        line = next(line for line in out.splitlines()
                    if line.startswith(name))
        assert "%.0f / %.0f" % (sides["core"]["bytes_per_client"],
                                sides["wirecache"]["bytes_per_client"]) \
            in line
    push = rounds["3 clients after the push"]["wirecache"]
    # the three clients asked for one response: computed once (in the
    # last round, which the counters are of)
    assert (push["hits"], push["misses"], push["uncached"]) == (2, 1, 0)
    # stored at level 17, sent by core at zstd's default level 3
    assert ratios["bytes_3"] < 0.95 and ratios["bytes_stream"] < 0.95
    # every answer on both sides, against references a real client got
    assert results["checked"]["responses"] == 2 * 2 * (3 + 3)
    assert results["checked"]["real_pulls"] >= 3
    assert re.search(r"^checked: 24 answers", out, re.M)
    assert "2 round(s) of each measurement per side; memory answers on" \
        in out
    assert results["memory_answers"] is True
    assert "(the targets are at 32 clients, not measured)" in out
    assert os.listdir(str(scratch)) == []


def test_a_wrong_response_from_the_cache_fails_the_bench(source, tmp_path):
    """Two stored responses swapped under each other's key by renaming
    are misses (an entry's digest is keyed by its key) and the answers
    stay right; the same two written by the cache's own writer under each
    other's key (a key mix-up in the server) are served by the real
    server, and the bench's check finds the client that got one."""
    work = tmp_path / "work"
    work.mkdir()
    with wirecache.Fleet(str(source), str(work), 2, 2) as fleet:
        fleet.push()
        pulls = [fleet.capture(depth) for depth in (1, 2)]
        fleet.round("wirecache", "the first round", pulls, 1)
        root = os.path.join(fleet.served, ".hg", "cache", "wirecache")
        entries = sorted(glob.glob(os.path.join(root, "entries", "*", "*")))
        assert len(entries) == 2
        first, second = entries
        os.rename(first, first + ".swap")
        os.rename(second, first)
        os.rename(first + ".swap", second)
        misses = fleet.counters()["misses"]
        fleet.round("wirecache", "a round after the renames", pulls, 1)
        assert fleet.counters()["misses"] == misses + 2
        cache = responsecache.ResponseCache(root, 1 << 30, 0, 5.0)
        keys = [os.path.basename(path) for path in entries]
        payloads = [b"".join(cache.lookup(key).chunks()) for key in keys]
        for path in entries:
            os.unlink(path)
        for key, payload in zip(keys, reversed(payloads)):
            filling = cache.acquire(key)
            assert isinstance(filling, responsecache.Filling)
            list(filling.fill([payload], time.process_time))
        with pytest.raises(Abort) as caught:
            fleet.round("wirecache", "the second round", pulls[:1], 1)
        assert str(caught.value).startswith(
            "client 1 of the second round (wirecache, a pull of depth 1) "
            "received a response a cacheless server would not "
            "have sent: its bundle decompresses to other bytes")
        # the cacheless server still answers as the reference says
        fleet.round("core", "a core round", pulls, 2)
        assert fleet.counters()["hits"] >= 1
