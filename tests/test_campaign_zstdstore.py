"""The adversarial campaign for zstdstore (see tests/campaign.py): the
``active`` file and dictionary files as anything a disk or a peer can
hold, and ``hg zstd-train`` / ``hg zstd-recompress`` killed at seeded
moments."""

import json
import os
import time

import pytest
from hypothesis import given, seed, settings, strategies as st
from mercurial import error

import campaign
import zstdwire
from hgext3rd.zstdstore import engine
from zstdwire import store as dictstore
from zstdwire_samples import chunks

ENABLE = "[extensions]\nzstdstore =\n"

PROPERTY = settings(max_examples=campaign.size(300, 20000), deadline=None,
                    derandomize=not campaign.FULL)

KIND_NAMES = ["changelog", "manifest", "filelog"]

# JSON close to an ``active`` file, so that cases get past the parser
# into the checks of classes and IDs.
json_values = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True)
    | st.integers(min_value=-2 ** 70, max_value=2 ** 70) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8)
active_like = st.dictionaries(
    st.sampled_from(KIND_NAMES) | st.text(max_size=12),
    st.integers(min_value=-5, max_value=2 ** 33) | json_values,
    max_size=4).map(lambda d: json.dumps(d).encode())


@pytest.mark.campaign
def test_active_file_parses_or_aborts_naming_it(tally, tmp_path):
    """Any bytes in ``active``: a map of known classes to dictionary IDs,
    or one ``abort`` naming the file with a hint; never another
    exception."""
    path = os.fsencode(tmp_path / "active")

    @PROPERTY
    @seed(tally.seed)
    @given(data=st.binary(max_size=5000) | active_like)
    def property_(data):
        with open(path, "wb") as fh:
            fh.write(data)
        try:
            active = engine.read_active(path)
        except error.Abort as err:
            ok = (err.message.startswith(b"%s is damaged: " % path)
                  and b"hg zstd-train" in err.hint)
        else:
            ok = (set(active) <= set(engine.KINDS)
                  and all(type(v) is int and 0 < v < 2 ** 32
                          for v in active.values())
                  and json.loads(data) == {k.decode(): v
                                           for k, v in active.items()})
        tally.case(ok, data[:80])
        assert ok, data

    property_()
    tally.check()


@pytest.fixture(scope="module")
def dictionary_file():
    dictionary = zstdwire.train(chunks()[:300], dict_size=4096)
    return dictionary.dict_id(), dictstore.encode(dictionary, "filelog")


def mutations():
    """A damaged dictionary file: bytes changed, cut, inserted."""
    edit = st.tuples(st.sampled_from(["flip", "cut", "insert", "set"]),
                     st.integers(min_value=0), st.binary(min_size=1,
                                                         max_size=8))
    return st.lists(edit, min_size=1, max_size=4)


def mutate(data, edits):
    data = bytearray(data)
    for kind, where, payload in edits:
        at = where % (len(data) + 1)
        if kind == "flip" and at < len(data):
            data[at] ^= payload[0] or 1
        elif kind == "cut":
            del data[at:at + payload[0]]
        elif kind == "insert":
            data[at:at] = payload
        elif kind == "set":
            # The header: magic, version, kind length and payload size.
            data[at % 48:at % 48 + len(payload)] = payload
    return bytes(data)


@pytest.mark.campaign
def test_dictionary_file_loads_or_fails_naming_it(tally, tmp_path,
                                                  dictionary_file):
    """Any bytes in a dictionary file: the dictionary of its name, or one
    ``DictionaryError`` naming the file; never another exception."""
    dict_id, good = dictionary_file
    store = zstdwire.DictionaryStore(str(tmp_path))
    path = store.path(dict_id)

    @PROPERTY
    @seed(tally.seed)
    @given(damage=mutations() | st.binary(max_size=400).map(lambda b: [b]))
    def property_(damage):
        data = damage[0] if isinstance(damage[0], bytes) \
            else mutate(good, damage)
        with open(path, "wb") as fh:
            fh.write(data)
        try:
            loaded = store.load(dict_id)
        except zstdwire.DictionaryError as err:
            ok = err.path == path and path in str(err)
        else:
            # Only a well-formed file loads: the checksum covers the
            # payload, the header is checked field by field.
            ok = loaded.dict_id == dict_id and data == dictstore.encode(
                loaded.dictionary, loaded.kind)
        tally.case(ok, repr(damage)[:120])
        assert ok, damage

    property_()
    tally.check()


# Killed at seeded moments -------------------------------------------------


def leftovers(store_dir):
    """What an interrupted command may leave and a finished rerun must
    not: temporary files, unfinished dictionaries, recompression state,
    a lock, revlogs left inline beside a data file."""
    found = []
    for root, _dirs, files in os.walk(store_dir):
        for name in files:
            path = os.path.join(root, name)
            if name.startswith(".") or ".tmp-" in name or name in (
                    "lock", "zstd-recompress.state"):
                found.append(path)
            elif name.endswith(".i") and os.path.exists(path[:-2] + ".d"):
                with open(path, "rb") as fh:
                    if int.from_bytes(fh.read(4), "big") >> 16 & 1:
                        found.append(path[:-2] + ".d")
    return found


@pytest.mark.slow
@pytest.mark.campaign
def test_killed_train_and_recompress(tally, hg, hgrc, env,
                                     real_hg_repo_cached, tmp_path):
    """``hg zstd-train`` and ``hg zstd-recompress`` killed (SIGKILL to the
    process group) at seeded moments of their run: ``hg verify`` passes,
    the same command run again finishes, and nothing is left behind."""
    hgrc.write_text(ENABLE)
    repo = tmp_path / "repo"
    # The first ten releases: a real history, small enough for many kills.
    hg("clone", "-q", "-U", "-r", "9", real_hg_repo_cached, repo)
    hg("debugupgraderepo", "--run", "-q", "--config",
       "format.revlog-compression=zstd-dict", cwd=repo)
    store_dir = repo / ".hg" / "store"
    active_file = store_dir / "zstd-dicts" / "active"
    train = ["zstd-train", "--sample-budget", "1000000"]
    took = {}
    actives = []
    for size in ("16384", "8192"):
        start = time.monotonic()
        hg(*train, "--dict-size", size, cwd=repo)
        took["zstd-train"] = time.monotonic() - start
        actives.append(active_file.read_bytes())
    start = time.monotonic()
    hg("zstd-recompress", cwd=repo)
    took["zstd-recompress"] = time.monotonic() - start
    points = campaign.size(6, 60)
    print("%d kill points; unkilled runs took %r" % (points, took))
    for point in range(points):
        command = tally.rng.choice(["zstd-train", "zstd-recompress"])
        args = [command]
        if command == "zstd-train":
            args += train[1:] + ["--dict-size",
                                 str(tally.rng.choice([8192, 16384, 32768]))]
        else:
            # The other dictionaries: every chunk has to be rewritten.
            active_file.write_bytes(actives[point % 2])
        delay = tally.rng.uniform(0.1, took[command] * 0.9)
        killed = campaign.kill_after([hg.binary, *args], env, delay,
                                     cwd=repo)
        what = "%s killed after %.2fs (%s)" % (
            command, delay, "killed" if killed else "had finished")
        verify = hg.proc("verify", "-q", cwd=repo)
        rerun = hg.proc(*args, cwd=repo)
        left = leftovers(store_dir)
        tally.case(verify.returncode == 0 and rerun.returncode == 0
                   and not left, what)
        print(what, verify.stderr[-300:], rerun.stderr[-300:], left)
        if command == "zstd-train":
            actives[point % 2] = active_file.read_bytes()
    hg("verify", "-q", cwd=repo)
    tally.check()
