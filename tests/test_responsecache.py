"""The response cache's store (vcsperf/core/responsecache.py), attacked
directly: entries truncated, swapped for garbage or symbolic links behind
its back, its directory deleted or made a file, a writer killed mid-entry,
thousands of distinct keys under a small bound, and one writer per key
among threads."""

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from vcsperf.core import responsecache
from vcsperf.core.responsecache import Entry, Filling, ResponseCache

MIB = 1 << 20


def cache_at(path, max_size=64 * MIB, min_size=0, wait=5):
    return ResponseCache(str(path), max_size=max_size, min_size=min_size,
                         wait=wait)


def store(cache, key, data, pieces=4):
    filling = cache.acquire(key)
    assert isinstance(filling, Filling)
    step = max(1, len(data) // pieces)
    chunks = [data[i:i + step] for i in range(0, len(data), step)]
    sent = b"".join(filling.fill(iter(chunks), time.thread_time))
    assert sent == data
    return filling


def key(n):
    return responsecache.make_key([b"test", b"%d" % n])


def test_an_entry_is_served_as_stored(tmp_path):
    cache = cache_at(tmp_path)
    data = os.urandom(3 * MIB)
    assert cache.lookup(key(1)) is None
    assert store(cache, key(1), data).stored
    entry = cache.lookup(key(1))
    assert entry.size == len(data) and entry.cpu >= 0
    assert b"".join(entry.chunks()) == data
    # Larger than what is checked whole: checked while it is read.
    big = os.urandom(responsecache.CHECK_WHOLE_UP_TO + 1000)
    store(cache, key(2), big)
    assert b"".join(cache.lookup(key(2)).chunks()) == big


@pytest.mark.parametrize("damage", ["truncated", "garbage", "grown",
                                    "empty", "bit-flip"])
def test_a_damaged_entry_is_never_served(tmp_path, damage):
    cache = cache_at(tmp_path)
    data = os.urandom(100000)
    store(cache, key(1), data)
    path = cache._entry_path(key(1))
    raw = open(path, "rb").read()
    changed = {
        "truncated": raw[:-100],
        "garbage": os.urandom(len(raw)),
        "grown": raw + b"x",
        "empty": b"",
        "bit-flip": raw[:5000] + bytes([raw[5000] ^ 1]) + raw[5001:],
    }[damage]
    with open(path, "wb") as fh:
        fh.write(changed)
    assert cache.lookup(key(1)) is None
    assert not os.path.exists(path)
    # And the key is written again.
    assert store(cache, key(1), data).stored


@pytest.mark.parametrize("size", [100000,
                                  responsecache.CHECK_WHOLE_UP_TO + 1000])
def test_an_entry_under_another_keys_name_is_never_served(tmp_path, size):
    # Whole and sound, but written for another key: renamed, copied from
    # another cache or listed under the wrong name by a shared store.
    cache = cache_at(tmp_path)
    first, second = os.urandom(size), os.urandom(size)
    store(cache, key(1), first)
    store(cache, key(2), second)
    one, two = cache._entry_path(key(1)), cache._entry_path(key(2))
    os.rename(one, one + ".swap")
    os.rename(two, one)
    os.rename(one + ".swap", two)
    for n in (1, 2):
        entry = cache.lookup(key(n))
        assert entry is None or not entry.check_read()
        if entry is not None:
            entry.close()


def test_a_large_entry_damaged_is_cut_before_its_end(tmp_path):
    cache = cache_at(tmp_path)
    data = os.urandom(responsecache.CHECK_WHOLE_UP_TO + 3 * MIB)
    store(cache, key(1), data)
    path = cache._entry_path(key(1))
    with open(path, "r+b") as fh:
        fh.seek(MIB)
        fh.write(b"\0" * 16)
    entry = cache.lookup(key(1))
    sent = []
    with pytest.raises(responsecache.CorruptEntry):
        for chunk in entry.chunks():
            sent.append(chunk)
    assert len(b"".join(sent)) < len(data)


def test_check_read_finds_a_large_entry_damaged_before_any_of_it_is_sent(
        tmp_path):
    # what gitbridge pack-cache asks before it sends a pack: a Git pack
    # cut short cannot be taken back
    cache = cache_at(tmp_path)
    data = os.urandom(responsecache.CHECK_WHOLE_UP_TO + MIB)
    store(cache, key(1), data)
    entry = cache.lookup(key(1))
    assert entry.check_read() and b"".join(entry.chunks()) == data
    path = cache._entry_path(key(1))
    for offset in (0, len(data) - 1):
        with open(path, "r+b") as fh:
            fh.seek(len(responsecache.HEAD_MAGIC) + offset)
            fh.write(b"\xff" if data[offset] != 0xff else b"\0")
        entry = cache.lookup(key(1))
        assert not entry.check_read()
        entry.close()
        os.unlink(path)
        store(cache, key(1), data)


def test_a_symlinked_entry_is_not_followed_nor_its_target_touched(tmp_path):
    cache = cache_at(tmp_path / "cache")
    outside = tmp_path / "outside"
    data = os.urandom(50000)
    store(cache, key(1), data)
    path = cache._entry_path(key(1))
    os.rename(path, outside)
    os.symlink(outside, path)
    before = outside.read_bytes()
    assert cache.lookup(key(1)) is None
    store(cache, key(1), data)
    assert not os.path.islink(path)
    assert outside.read_bytes() == before


def test_a_deleted_or_unusable_directory_makes_the_cache_step_aside(tmp_path):
    cache = cache_at(tmp_path / "cache")
    store(cache, key(1), b"x" * 1000)
    subprocess.run(["rm", "-rf", str(tmp_path / "cache")], check=True)
    assert cache.lookup(key(1)) is None
    assert store(cache, key(1), b"y" * 1000).stored
    blocked = cache_at(tmp_path / "a-file")
    (tmp_path / "a-file").write_text("not a directory\n")
    assert blocked.lookup(key(1)) is None
    assert blocked.acquire(key(1)) is None
    blocked.count(hits=1)  # counting fails quietly too
    assert blocked.counters()["hits"] == 0


def test_thousands_of_keys_stay_within_the_bound(tmp_path):
    bound = MIB
    cache = cache_at(tmp_path, max_size=bound, min_size=2000)
    for n in range(700):
        # Entries and markers of responses too small to store.
        store(cache, key(n), os.urandom(5000 if n % 2 else 100))
        if n % 100 == 0:
            assert sum(s for _, s, _ in cache.scan()) <= bound
    found = cache.scan()
    assert sum(size for _, size, _ in found) <= bound
    assert len(found) <= bound // responsecache.BLOCK
    # The most recently written survive, the oldest went.
    assert cache.lookup(key(699)) is not None
    assert cache.lookup(key(1)) is None
    # And the lock files of the keys that went, once idle.
    locks = list((tmp_path / "locks").glob("*/*"))
    assert len(locks) == 700
    old = time.time() - responsecache.STALE_TMP_SECONDS - 1
    for lock in locks:
        os.utime(lock, (old, old))
    cache.evict()
    # Only those of the keys that still have an entry stay (a key marked
    # too small to store is never locked).
    stored = [path for _, _, path in cache.scan()
              if not path.endswith(".small")]
    assert len(list((tmp_path / "locks").glob("*/*"))) == len(stored)


def test_least_recently_served_goes_first(tmp_path):
    cache = cache_at(tmp_path, max_size=3 * 100 * 1024, min_size=0)
    for n in range(3):
        store(cache, key(n), os.urandom(90 * 1024))
        os.utime(cache._entry_path(key(n)), (n, n))
    cache.lookup(key(0)).close()  # served: now the most recent
    store(cache, key(3), os.urandom(90 * 1024))
    assert cache.lookup(key(1)) is None
    assert all(cache.lookup(key(n)) is not None for n in (0, 2, 3))


def test_files_not_named_as_ours_are_never_removed(tmp_path):
    cache = cache_at(tmp_path, max_size=MIB, min_size=0)
    store(cache, key(0), b"x" * 1000)
    strangers = [tmp_path / "entries" / key(0)[:2] / "README",
                 tmp_path / "tmp" / "notes.txt", tmp_path / "stranger"]
    for path in strangers:
        path.write_bytes(b"z" * (2 * MIB))
    for n in range(1, 5):
        store(cache, key(n), os.urandom(400 * 1024))
    assert all(path.exists() for path in strangers)


WRITER = r"""
import os, sys, time
sys.path[:0] = %(path)r
from vcsperf.core.responsecache import ResponseCache
cache = ResponseCache(%(root)r, 1 << 30, 0, 5)
filling = cache.acquire(%(key)r)
def chunks():
    yield b"half of it"
    print("writing", flush=True)
    time.sleep(60)
    yield b"never"
filling.fill(chunks(), time.thread_time)
"""


def test_a_writer_killed_mid_entry_leaves_nothing_taken_for_complete(
        tmp_path):
    cache = cache_at(tmp_path, wait=0.5)
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER % {
            "path": sys.path, "root": str(tmp_path), "key": key(1)}],
        stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "writing\n"
        # Its lock is held: a request waits, then goes without the cache.
        assert cache.acquire(key(1)) is None
    finally:
        proc.kill()
        proc.wait()
    assert cache.lookup(key(1)) is None
    [left] = os.listdir(tmp_path / "tmp")
    # The kernel released its lock: the key is written again, whole.
    assert store(cache, key(1), b"whole").stored
    assert b"".join(cache.lookup(key(1)).chunks()) == b"whole"
    # Its temporary file goes with the next eviction once it is stale.
    old = time.time() - responsecache.STALE_TMP_SECONDS - 1
    os.utime(tmp_path / "tmp" / left, (old, old))
    cache.evict()
    assert os.listdir(tmp_path / "tmp") == []


def test_one_writer_per_key_among_concurrent_requests(tmp_path):
    cache = cache_at(tmp_path, wait=30)
    produced = []
    results = []

    def request():
        entry = cache.lookup(key(7))
        if entry is None:
            got = cache.acquire(key(7))
            if isinstance(got, Filling):
                def chunks():
                    produced.append(1)
                    time.sleep(0.3)
                    yield b"the response"
                results.append(b"".join(got.fill(chunks(), time.thread_time)))
                return
            entry = got
        assert isinstance(entry, Entry)
        results.append(b"".join(entry.chunks()))

    threads = [threading.Thread(target=request) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert produced == [1]
    assert results == [b"the response"] * 8


def test_counters_survive_a_garbage_stats_file(tmp_path, monkeypatch):
    # Two counts to a record log: the second folds it into stats.json.
    monkeypatch.setattr(responsecache, "STATS_LOG_LIMIT",
                        2 * responsecache._COUNT.size)
    cache = cache_at(tmp_path)
    cache.count(hits=1, bytes_saved=100)
    cache.count(hits=1)
    assert json.loads((tmp_path / "stats.json").read_bytes())["hits"] == 2
    assert (tmp_path / "stats.log").stat().st_size == 0
    (tmp_path / "stats.json").write_bytes(b"\xff{not json")
    assert cache.counters()["hits"] == 0
    cache.count(hits=1)
    assert cache.counters()["hits"] == 1


def test_counts_are_appended_and_folded_exactly_whatever_stats_log_holds(
        tmp_path, monkeypatch):
    """Each count is one record appended to ``stats.log`` (a rewrite of
    stats.json per response cost more CPU than the rest of a cached
    response's own work); the log is folded into stats.json at its bound.
    Counts from several processes at once are all kept, across folds; a
    record that is not one (a partial one, garbage, a negative or
    infinite value) counts nothing and is folded away; a symbolic link,
    a FIFO or a hard link planted as stats.log is neither written nor
    read (nor waited on)."""
    root = tmp_path / "cache"
    cache = cache_at(root)
    cache.count(misses=1)
    # Processes counting at once, the log folded every 8 records.
    script = (
        "import sys\n"
        "from vcsperf.core import responsecache\n"
        "responsecache.STATS_LOG_LIMIT = 8 * responsecache._COUNT.size\n"
        "cache = responsecache.ResponseCache(sys.argv[1], 1 << 20, 0, 1)\n"
        "for _ in range(100):\n"
        "    cache.count(hits=1, bytes_saved=3, cpu_saved=0.5)\n")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(root)])
             for _ in range(4)]
    assert [proc.wait(timeout=60) for proc in procs] == [0] * 4
    counted = cache.counters()
    assert (counted["hits"], counted["bytes_saved"], counted["cpu_saved"],
            counted["misses"]) == (400, 1200, 200.0, 1)
    assert json.loads((root / "stats.json").read_bytes())["hits"] >= 392
    assert (root / "stats.log").stat().st_size < 8 * responsecache._COUNT.size
    # Records that are not counts: skipped, then folded away.
    good = responsecache._COUNT.pack(b"VCSC", 1, *[0.0] * 9)
    bad = [responsecache._COUNT.pack(b"VCSC", -5, *[0.0] * 9),
           responsecache._COUNT.pack(b"VCSC", float("inf"), *[0.0] * 9),
           responsecache._COUNT.pack(b"XXXX", 7, *[0.0] * 9)]
    folded = json.loads((root / "stats.json").read_bytes())["hits"]
    (root / "stats.log").write_bytes(good + b"".join(bad))
    assert cache.counters()["hits"] == folded + 1
    with open(root / "stats.log", "ab") as fh:
        fh.write(b"\x00" * 5)  # a partial record: folded before a count
    cache.count(hits=1)
    assert (root / "stats.log").stat().st_size == responsecache._COUNT.size
    assert cache.counters()["hits"] == folded + 2
    # Planted in stats.log's place (its last count gone with it): never
    # written through, read or waited on.
    victim = tmp_path / "victim"
    victim.write_bytes(good * 3)
    for plant in (lambda path: os.symlink(victim, path),
                  lambda path: os.link(victim, path), os.mkfifo):
        (root / "stats.log").unlink()
        plant(root / "stats.log")
        cache.count(hits=1)
        assert cache.counters()["hits"] == folded + 1
        assert victim.read_bytes() == good * 3


def test_wirecache_counters_never_write_through_a_planted_symlink(tmp_path):
    """Finding: ``ResponseCache.count`` (every response hg serve sends)
    writes ``stats.json.<pid>.tmp`` with a plain ``open(tmp, "w")``,
    which follows a symbolic link planted under that name: the file it
    points to, outside the cache, is truncated and overwritten with the
    counters (the cache's entries and locks use O_NOFOLLOW/O_EXCL; this
    one does not).  A pid is easy to guess on a server that forks one
    ``hg serve --stdio`` per SSH pull."""
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    root = tmp_path / "cache"
    root.mkdir()
    os.symlink(victim, root / ("stats.json.%d.tmp" % os.getpid()))
    cache = cache_at(root, max_size=MIB, wait=1)
    cache.count(hits=1)
    assert victim.read_text() == "precious\n"
    assert cache.counters()["hits"] == 1


def test_a_response_larger_than_the_bound_is_sent_whole_and_not_stored(
        tmp_path):
    """A response that grows past ``max_size`` while it is written stops
    being written at the bound (nothing on disk past it), is still sent
    whole, and leaves a marker: later requests for its key compute it
    without the cache instead of writing and evicting it again."""
    cache = cache_at(tmp_path, max_size=MIB)
    data = os.urandom(3 * MIB)
    sizes = []

    def produced():
        for start in range(0, len(data), 64 * 1024):
            sizes.append(sum(item.stat().st_size
                             for item in (tmp_path / "tmp").iterdir()))
            yield data[start:start + 64 * 1024]

    filling = cache.acquire(key(1))
    assert isinstance(filling, Filling)
    assert b"".join(filling.fill(produced(), time.thread_time)) == data
    assert filling.stored is False
    assert max(sizes) <= MIB
    assert cache.lookup(key(1)) is None
    assert cache.acquire(key(1)) is None
    assert [path for _, _, path in cache.scan()] == [
        str(tmp_path / "entries" / key(1)[:2] / (key(1) + ".large"))]
