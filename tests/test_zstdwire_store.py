import multiprocessing
import os

import pytest
import zstandard

import zstdwire
from zstdwire import store as storemod
from zstdwire_samples import chunks


@pytest.fixture(scope="module")
def dictionaries():
    return [zstdwire.train(chunks()[i * 300:(i + 1) * 300], dict_size=4096)
            for i in range(4)]


def test_add_load_round_trip(tmp_path, dictionaries):
    store = zstdwire.DictionaryStore(str(tmp_path / "dicts"))
    assert store.ids() == []
    ids = [store.add(d, kind) for d, kind in
           zip(dictionaries, ["changelog", "manifest", "filelog", "filelog"])]
    assert store.ids() == sorted(ids)
    loaded = store.load(ids[1])
    assert loaded.kind == "manifest"
    assert loaded.dictionary.as_bytes() == dictionaries[1].as_bytes()
    assert store.get(ids[0]) is store.get(ids[0])
    # Adding the same dictionary again is a no-op.
    assert store.add(dictionaries[0], "changelog") == ids[0]
    assert sorted(os.listdir(store.directory)) == sorted(map(str, ids))


def test_existing_file_is_never_replaced(tmp_path, dictionaries):
    store = zstdwire.DictionaryStore(str(tmp_path))
    dict_id = store.add(dictionaries[0], "filelog")
    impostor = zstandard.ZstdCompressionDict(
        dictionaries[1].as_bytes()[:8] + b"\0" * 4 +
        dictionaries[1].as_bytes()[12:])
    assert impostor.dict_id() != dict_id
    path = store.path(dict_id)
    before = open(path, "rb").read()
    os.rename(path, path + ".keep")
    store.add(dictionaries[1], "filelog")  # unrelated ID: fine
    os.rename(path + ".keep", path)
    # Forge a different dictionary with the same ID: refused, file intact.
    forged = bytearray(dictionaries[1].as_bytes())
    forged[4:8] = dict_id.to_bytes(4, "little")
    with pytest.raises(zstdwire.DictionaryError, match="different dictionary"):
        store.add(zstandard.ZstdCompressionDict(bytes(forged)), "filelog")
    assert open(path, "rb").read() == before


@pytest.mark.parametrize("damage", [
    "truncate-header", "truncate-payload", "magic", "version", "checksum",
    "payload", "empty", "rename"])
def test_corrupt_files_raise_naming_the_file(tmp_path, dictionaries, damage):
    store = zstdwire.DictionaryStore(str(tmp_path))
    dict_id = store.add(dictionaries[0], "filelog")
    path = store.path(dict_id)
    data = bytearray(open(path, "rb").read())
    if damage == "truncate-header":
        data = data[:10]
    elif damage == "truncate-payload":
        data = data[:-100]
    elif damage == "magic":
        data[0:6] = b"NOTDIC"
    elif damage == "version":
        data[6] = 99
    elif damage == "checksum":
        data[20] ^= 0xFF
    elif damage == "payload":
        data[-50] ^= 0x01
    elif damage == "empty":
        data = b""
    elif damage == "rename":
        other = store.add(dictionaries[1], "filelog")
        data = open(store.path(other), "rb").read()
    with open(path, "wb") as fh:
        fh.write(data)
    with pytest.raises(zstdwire.DictionaryCorrupt) as info:
        store.load(dict_id)
    assert info.value.path == path
    assert path in str(info.value)
    # A frame that needs it fails with the same error, never wrong data.
    frame = zstdwire.ChunkCompressor(dictionaries[0]).compress(chunks()[5])
    with pytest.raises(zstdwire.DictionaryCorrupt):
        zstdwire.ChunkDecompressor(store).decompress(frame)


def test_missing_file(tmp_path):
    store = zstdwire.DictionaryStore(str(tmp_path / "nowhere"))
    assert store.ids() == []
    with pytest.raises(zstdwire.DictionaryMissing) as info:
        store.load(1234)
    assert info.value.path == str(tmp_path / "nowhere" / "1234")


def _writer(directory, payloads, rounds):
    store = zstdwire.DictionaryStore(directory)
    for _ in range(rounds):
        for payload in payloads:
            store.add(zstandard.ZstdCompressionDict(payload), "filelog")


def _reader(directory, ids, rounds, errors):
    for _ in range(rounds):
        for dict_id in ids:
            path = os.path.join(directory, str(dict_id))
            try:
                data = open(path, "rb").read()
            except FileNotFoundError:
                continue
            try:
                storemod.decode(data, path)
            except zstdwire.DictionaryError as err:
                errors.put(str(err))


def test_concurrent_writers_never_leave_partial_files(tmp_path, dictionaries):
    directory = str(tmp_path / "dicts")
    payloads = [d.as_bytes() for d in dictionaries]
    ctx = multiprocessing.get_context("spawn")
    errors = ctx.Queue()
    ids = [d.dict_id() for d in dictionaries]
    procs = [ctx.Process(target=_writer, args=(directory, payloads, 30))
             for _ in range(4)]
    procs.append(ctx.Process(target=_reader,
                             args=(directory, ids, 300, errors)))
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    assert errors.empty()
    assert sorted(os.listdir(directory)) == sorted(map(str, ids))
    store = zstdwire.DictionaryStore(directory)
    assert [store.load(i).dictionary.as_bytes() for i in ids] == payloads


def test_unused_id_is_in_zstds_free_range_and_names_no_stored_file(
        tmp_path, dictionaries):
    store = zstdwire.DictionaryStore(str(tmp_path / "dicts"))
    # IDs zstd chose, as every store written before the store chose them.
    old = {store.add(d, "filelog") for d in dictionaries}
    for _ in range(200):
        dict_id = store.unused_id()
        assert storemod.MIN_ID <= dict_id <= storemod.MAX_ID
        assert dict_id not in old
    trained = zstdwire.train(chunks()[:300], dict_size=4096, level=9,
                             dict_id=store.unused_id())
    new = store.add(trained, "filelog")
    assert new not in old and set(store.ids()) == old | {new}
    for dict_id in old | {new}:
        store.load(dict_id)
