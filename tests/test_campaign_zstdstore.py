"""The adversarial campaign for zstdstore (see tests/campaign.py): the
``active`` file and dictionary files as anything a disk or a peer can
hold, and ``hg zstd-train`` / ``hg zstd-recompress`` killed at seeded
moments, and retrained again and again with any settings."""

import json
import os
import re
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


@pytest.mark.slow
@pytest.mark.campaign
def test_killed_conversion_in_place(tally, hg, hgrc, env, real_hg_repo_cached,
                                    tmp_path):
    """``hg zstd-recompress --convert`` killed at seeded moments on a
    trained copy of a real history: before its requirement changes a stock
    Mercurial still reads the repository, after it a stock Mercurial
    refuses it by that requirement; ``hg verify`` passes either way, the
    history reads the same, and the same command run again finishes the
    conversion with nothing left behind."""
    hgrc.write_text(ENABLE)
    base = tmp_path / "base"
    hg("clone", "-q", "-U", "-r", "9", real_hg_repo_cached, base)
    hg("zstd-train", "--sample-budget", "1000000", "--dict-size", "16384",
       cwd=base)
    history = hg("log", "-T", "{node}\n", "-r", "all()", cwd=base)
    copy = tmp_path / "first"
    hg("clone", "-q", "-U", base, copy)
    start = time.monotonic()
    hg("zstd-recompress", "--convert", cwd=copy)
    took = time.monotonic() - start
    points = campaign.size(6, 60)
    print("%d kill points; an unkilled run took %.2fs" % (points, took))
    for point in range(points):
        repo = tmp_path / ("point%d" % point)
        hg("clone", "-q", "-U", base, repo)
        delay = tally.rng.uniform(0.05, took * 0.9)
        killed = campaign.kill_after(
            [hg.binary, "zstd-recompress", "--convert"], env, delay, cwd=repo)
        names = (repo / ".hg" / "store" / "requires").read_text().split()
        converted = "exp-compression-zstd-dict" in names
        stock = hg.proc("log", "-r", "tip", "-T", "{node}",
                        "--config", "extensions.zstdstore=!", cwd=repo)
        stock_ok = ("requires features unknown" in stock.stderr
                    if converted else stock.stdout == history.split()[-1])
        verify = hg.proc("verify", "-q", cwd=repo)
        rerun = hg.proc("zstd-recompress", "--convert", cwd=repo)
        names = (repo / ".hg" / "store" / "requires").read_text().split()
        left = leftovers(repo / ".hg" / "store")
        same = hg.proc("log", "-T", "{node}\n", "-r", "all()", cwd=repo)
        what = "killed after %.2fs (%s, %s)" % (
            delay, "killed" if killed else "had finished",
            "converted" if converted else "not converted yet")
        tally.case(stock_ok and verify.returncode == 0
                   and rerun.returncode == 0
                   and "exp-compression-zstd-dict" in names and not left
                   and same.stdout == history, what)
        print(what, stock.stderr[-200:], verify.stderr[-300:],
              rerun.stderr[-300:], left)
    tally.check()


#: The ``zstdstore.*`` settings a retrain reads, their command-line
#: options, and their ranges.
TRAIN_SETTINGS = {
    "level": (None, 1, 22),
    "dict-size": ("--dict-size", 256, 16 << 20),
    "sample-budget": ("--sample-budget", 1024, 1 << 30),
}


def train_setting(rng, name):
    """A value for ``name``: mostly in range, else anything."""
    low, high = TRAIN_SETTINGS[name][1:]
    roll = rng.random()
    if roll < 0.6:
        if name == "level":
            return str(rng.randint(low, high))
        return str(rng.choice([rng.randint(low, 64 << 10),
                               rng.randint(low, 4 << 20)]))
    if roll < 0.8:
        return str(rng.choice([low - 1, high + 1, 0, -5, -(1 << 40),
                               1 << 70, rng.randrange(-1000, 1000)]))
    return rng.choice(["abc", "12k", "1m", "1.5k", "-5k", "", " 7 ",
                       "7 # comment", "\u0663", "0x10", "1e3", "yes"])


def _train_outcome(name, value):
    """None when ``value`` must be refused, else True (taken as given,
    or, for a size with a suffix, however Mercurial reads it)."""
    low, high = TRAIN_SETTINGS[name][1:]
    text = value.strip()
    if re.fullmatch(r"[+-]?[0-9]+", text):
        return True if low <= int(text) <= high else None
    if name == "level" or re.fullmatch(r"[0-9.]+[kmg]b?", text) is None:
        return None
    return ...


@pytest.mark.slow
@pytest.mark.campaign
def test_retraining_with_any_settings_keeps_the_store(tally, hg, hgrc,
                                                      tmp_path):
    """``hg zstd-train`` run again and again with random levels, budgets
    and sizes (in the hgrc, with ``--config`` or as options), commits in
    between: each run trains or aborts with one line naming the setting
    and changes nothing; dictionaries are never replaced; ``hg verify``
    passes throughout and after ``hg zstd-recompress``."""
    hgrc.write_text(ENABLE)
    repo = tmp_path / "repo"
    hg("init", "--config", "format.revlog-compression=zstd-dict", repo)
    hg("debugbuilddag", "--mergeable-file", "--new-file", "+30", cwd=repo)
    dicts = repo / ".hg" / "store" / "zstd-dicts"

    def files():
        if not dicts.exists():
            return {}
        return {name: (dicts / name).read_bytes()
                for name in os.listdir(dicts)}

    hg("update", "-q", "tip", cwd=repo)
    for number in range(campaign.size(5, 80)):
        name = tally.rng.choice(sorted(TRAIN_SETTINGS))
        value = train_setting(tally.rng, name)
        option = TRAIN_SETTINGS[name][0]
        way = tally.rng.choice(["hgrc", "config"] + (["option"] * bool(
            option and re.fullmatch(r"-?[0-9]+", value))))
        args = ["zstd-train"]
        if way == "option":
            args += [option, value]
        elif way == "config":
            args += ["--config", "zstdstore.%s=%s" % (name, value)]
        hgrc.write_text(ENABLE + ("[zstdstore]\n%s = %s\n" % (name, value)
                                  if way == "hgrc" else ""))
        before = files()
        proc = hg.proc(*args, cwd=repo)
        after = files()
        hgrc.write_text(ENABLE)
        want = _train_outcome(name, value)
        if way == "option" and int(value) == 0:
            want = True  # 0: the option is not given
        kept = all(after.get(n) == data for n, data in before.items()
                   if n != "active")
        if proc.returncode == 0:
            ok = want is not None and kept and "Traceback" not in proc.stderr
        else:
            setting = option if way == "option" else "zstdstore." + name
            ok = (want is not True and campaign.is_clean_abort(proc)
                  and proc.stderr.startswith("abort: %s must be " % setting)
                  and after == before)
        verify = hg.proc("verify", "-q", cwd=repo)
        tally.case(ok and verify.returncode == 0,
                   (way, name, value, proc.returncode, proc.stderr[-300:],
                    verify.stderr[-300:]))
        if tally.rng.random() < 0.5:
            (repo / "mf").write_text("run %d\n" % number * (number + 3))
            hg("commit", "-q", "-m", "after run %d" % number, cwd=repo)
    hg("zstd-recompress", cwd=repo)
    hg("verify", "-q", cwd=repo)
    tally.check()
