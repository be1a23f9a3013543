# engine.py - the zstd-dict compression engine and its dictionaries
#
# This software may be used and distributed according to the terms of the
# GNU General Public License version 2 or any later version.
"""The ``zstd-dict`` revlog compression engine, the dictionaries it reads
and writes with, and how they travel with stream clones and upgrades."""

import json
import os
import threading

import zstandard
from mercurial import (
    error,
    store,
    util,
)
from mercurial.i18n import _
from mercurial.revlogutils import constants as revlogconst
from mercurial.utils import compression, stringutil

import zstdwire
from hgext3rd import _hgcompat, _hgconfig

#: Measured on ipython's history: level 6 stores filelogs in 0.85 of core
#: zstd's bytes against 0.92 at level 3, reads as fast, and compresses
#: about 3 times slower (still over 50 MB/s).
DEFAULT_LEVEL = 6
#: The levels ``zstdstore.level`` may name.
LEVELS = (1, zstandard.MAX_COMPRESSION_LEVEL)

#: The longest delta chain in a ``zstd-dict`` revlog, unless
#: ``format.maxchainlen`` says otherwise.  Core bounds a chain by its
#: compressed bytes (at most twice the revision's text) and by 1,000
#: deltas; the dictionaries shrink small deltas so much that the byte bound
#: let chains grow 1.6x longer than core zstd's on sympy's most revised
#: file, and ``hg annotate`` of it read 1.5x the chunks.  At 500 the mean
#: chain of sympy's 40 most revised files is shorter than core zstd's (206
#: against 245 deltas) for 3% more of their bytes.
MAX_CHAIN_LEN = 500

ENGINE = b'zstd-dict'
REQUIREMENT = b'exp-compression-' + ENGINE
#: The chunk header byte of dictionary chunks.  Not b'(': a frame that
#: needs a dictionary must never reach core's plain zstd decompressor.
HEADER = b'D'
DICTS_DIR = b'zstd-dicts'
ACTIVE_FILE = DICTS_DIR + b'/active'
KINDS = (b'changelog', b'manifest', b'filelog')
_KIND_NAMES = {kind.decode('ascii'): kind for kind in KINDS}

#: Chunks shorter than this are stored raw, as core does.
MIN_CHUNK = 50
#: Above this size a chunk is also compressed without the dictionary and
#: the smaller result is kept: a dictionary matters for the start of a
#: frame, and large chunks pay little for it.
PLAIN_CHECK_SIZE = 16 * 1024



def configured_level(ui):
    """``zstdstore.level``; a bad one aborts naming it and the range."""
    return _hgconfig.config_int(ui, b'zstdstore', b'level', *LEVELS)


_OPT_DICTS = b'zstdstore.dicts'
OPT_KIND = b'zstdstore.kind'
OPT_LEVEL = b'zstdstore.level'
OPT_MAX_CHAIN_LEN = b'zstdstore.maxchainlen'
_KIND_OF_TARGET = {
    revlogconst.KIND_CHANGELOG: b'changelog',
    revlogconst.KIND_MANIFESTLOG: b'manifest',
}


class _DictsDir:
    """A repository's dictionaries, shared by all its revlogs in a process.

    The ``active`` file is re-read when it changes, so a long-running
    server starts using a retrained dictionary for new chunks.
    """

    def __init__(self, path):
        self.path = path
        self.store = zstdwire.DictionaryStore(os.fsdecode(path))
        self._active = {}
        self._active_stat = None
        self._compressors = {}
        self._local = threading.local()

    def active(self):
        """``{kind: dict_id}`` of the dictionaries new chunks use; aborts
        naming the ``active`` file if it is damaged."""
        path = os.path.join(self.path, b'active')
        try:
            st = os.stat(path)
            stat = (st.st_ino, st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            stat = None
        if stat != self._active_stat:
            self._active = read_active(path) if stat else {}
            self._active_stat = stat
        return self._active

    def decompressor(self):
        """This thread's decompressor: its contexts (one per dictionary) are
        shared by all revlogs, and a context serves one thread at a time."""
        decompressor = getattr(self._local, 'decompressor', None)
        if decompressor is None:
            decompressor = self._local.decompressor = \
                zstdwire.ChunkDecompressor(self)
        return decompressor

    def get(self, dict_id):
        """A dictionary by ID, for decompressors; raises ``StorageError``
        naming its file and how to recover."""
        try:
            return self.store.get(dict_id)
        except zstdwire.DictionaryError as err:
            raise _unusable_dictionary(dict_id, err)

    def compressor(self, kind, level):
        dict_id = self.active().get(kind)
        if dict_id is None:
            return None
        key = (dict_id, level)
        if key not in self._compressors:
            try:
                stored = self.store.load(dict_id)
                # A revlog verifies every revision's hash on read, so frames
                # need no checksum of their own (core's zstd chunks have
                # none).
                compressor = zstdwire.ChunkCompressor(
                    stored.dictionary, level, checksum=False)
            except zstandard.ZstdError as err:
                raise _unusable_dictionary(dict_id, zstdwire.DictionaryCorrupt(
                    'not a zstd dictionary (%s)' % err,
                    self.store.path(dict_id)))
            except zstdwire.DictionaryError as err:
                raise _unusable_dictionary(dict_id, err)
            if stored.kind != kind.decode('ascii'):
                raise DamagedActive(
                    os.path.join(self.path, b'active'),
                    b'it names %s dictionary %d for %s'
                    % (stored.kind.encode('ascii'), dict_id, kind))
            self._compressors[key] = compressor
        return self._compressors[key]


_dicts_dirs = {}


def dicts_dir(path):
    if path not in _dicts_dirs:
        _dicts_dirs[path] = _DictsDir(path)
    return _dicts_dirs[path]


#: Far more than ``active`` ever holds; a bigger file is not one.
ACTIVE_MAX_SIZE = 4096


def read_active(path):
    """The ``active`` file at ``path``, checked (see ``parse_active``)."""
    with open(path, 'rb') as fh:
        data = fh.read(ACTIVE_MAX_SIZE + 1)
    try:
        return parse_active(data)
    except ValueError as err:
        raise DamagedActive(path, stringutil.forcebytestr(err))


def parse_active(data):
    """``{kind: dict_id}`` from the contents of an ``active`` file: a JSON
    object mapping some of ``KINDS`` to dictionary IDs.  Anything else
    raises ``ValueError`` saying what is wrong."""
    if len(data) > ACTIVE_MAX_SIZE:
        raise ValueError('more than %d bytes' % ACTIVE_MAX_SIZE)
    try:
        parsed = json.loads(data.decode('ascii'))
    except (ValueError, RecursionError):
        # UnicodeDecodeError and JSONDecodeError are ValueErrors.
        raise ValueError('not a JSON object of dictionary IDs')
    if not isinstance(parsed, dict):
        raise ValueError('not a JSON object of dictionary IDs')
    active = {}
    for name, dict_id in parsed.items():
        kind = _KIND_NAMES.get(name)
        if kind is None:
            raise ValueError('unknown revlog class %s' % ascii(name)[:40])
        # bool is an int to Python, not to JSON.
        if type(dict_id) is not int or not 0 < dict_id < 2 ** 32:
            raise ValueError('the %s entry is not a dictionary ID' % name)
        active[kind] = dict_id
    return active


class DamagedActive(error.Abort):
    def __init__(self, path, reason):
        super().__init__(
            _(b'%s is damaged: %s') % (path, reason),
            hint=_(b'copy it from another clone of this repository, or run '
                   b'hg zstd-train to write a new one'))


def _unusable_dictionary(dict_id, err):
    """A dictionary that chunks need and that cannot be read is a storage
    error, as a revlog's own corruption is: ``hg verify`` reports it per
    revision, commands print it as one ``abort:`` line with its hint."""
    return error.StorageError(
        _(b'zstd dictionary %d unusable: %s')
        % (dict_id, stringutil.forcebytestr(err)),
        hint=_(b'copy %s from another clone of this repository, restore it '
               b'from a backup, or clone the repository again')
        % os.fsencode(err.path))


def _revlog_error(err):
    """A corrupt frame is a revlog error, reported per revision."""
    return error.RevlogError(
        _(b'zstd dictionary chunk: %s') % stringutil.forcebytestr(err))


_plain_compressors = {}


def _plain_compressor(level):
    """One plain zstd compressor per level for the whole process: once
    used, a compression context holds megabytes, and a command such as
    ``hg zstd-recompress`` writes to every revlog of the store (measured:
    1.6 GB for ipython's 7,818 revlogs with one context each)."""
    if level not in _plain_compressors:
        _plain_compressors[level] = zstandard.ZstdCompressor(level=level)
    return _plain_compressors[level]


class _RevlogCodec:
    """The compressor and decompressor of one revlog."""

    def __init__(self, options):
        self._dicts = dicts_dir(options[_OPT_DICTS]) \
            if options.get(_OPT_DICTS) else None
        self._kind = options.get(OPT_KIND, b'filelog')
        self._level = options.get(OPT_LEVEL, DEFAULT_LEVEL)

    def compress(self, data):
        size = len(data)
        if size < MIN_CHUNK:
            return None
        best = None
        compressor = None
        if self._dicts is not None:
            compressor = self._dicts.compressor(self._kind, self._level)
        if compressor is not None:
            best = HEADER + compressor.compress(data)
        if best is None or size > PLAIN_CHECK_SIZE:
            # A core zstd frame, header b'(': readable by any Mercurial.
            plain = _plain_compressor(self._level).compress(data)
            if best is None or len(plain) < len(best):
                best = plain
        if len(best) < size:
            return best
        return None

    def decompress(self, data):
        # try/except, not a context manager: this is the per-chunk hot path.
        try:
            return self._chunk_decompressor().decompress(
                memoryview(data)[1:])
        except zstdwire.FrameError as err:
            raise _revlog_error(err)

    def decompress_segments(self, data, segments):
        """Decode many dictionary frames of ``data`` (without their header
        byte) at once; see ``zstdwire.ChunkDecompressor``."""
        try:
            return self._chunk_decompressor().decompress_segments(
                data, segments)
        except zstdwire.FrameError as err:
            raise _revlog_error(err)

    def _chunk_decompressor(self):
        if self._dicts is None:
            raise error.StorageError(
                _(b'zstd dictionary chunk read outside a repository store'))
        return self._dicts.decompressor()


class ZstdDictEngine(compression.compressionengine):
    def name(self):
        return ENGINE

    def revlogheader(self):
        return HEADER

    def revlogcompressor(self, opts=None):
        return _RevlogCodec(opts or {})


def revlog_init(orig, self, opener, *args, **kwargs):
    """Tell each revlog's codec where its repository's dictionaries are and
    which class it belongs to: the compression engine API passes only the
    revlog's options.  A ``zstd-dict`` revlog also gets its chain cap
    (``MAX_CHAIN_LEN``)."""
    orig(self, opener, *args, **kwargs)
    base = _hgcompat.vfs_base(opener)
    if base is not None:
        options = self.feature_config.compression_engine_options
        options[_OPT_DICTS] = os.path.join(base, DICTS_DIR)
        options[OPT_KIND] = _KIND_OF_TARGET.get(self.target[0], b'filelog')
        if OPT_LEVEL in opener.options:
            options[OPT_LEVEL] = opener.options[OPT_LEVEL]
    cap = opener.options.get(OPT_MAX_CHAIN_LEN)
    if cap and self.feature_config.compression_engine == ENGINE:
        limit = self.delta_config.max_chain_len
        if limit is None or limit > cap:
            self.delta_config.max_chain_len = cap


# Dictionaries travel with the revlogs that need them --------------------


def check_streamed(orig, repo, *args, **kwargs):
    """Refuse a stream clone whose dictionaries its repository could not
    use, before anything reads or writes with them."""
    orig(repo, *args, **kwargs)
    _check_received_dictionaries(repo)


def check_local_copy(orig, src_repo, dest_repo, *args, **kwargs):
    orig(src_repo, dest_repo, *args, **kwargs)
    _check_received_dictionaries(dest_repo)


def _check_received_dictionaries(repo):
    if not repo.svfs.isdir(DICTS_DIR):
        return
    dicts = zstdwire.DictionaryStore(os.fsdecode(repo.svfs.join(DICTS_DIR)))
    without = _(b'; a clone without --stream does not need it')
    kinds = {}
    for dict_id in dicts.ids():
        try:
            kinds[dict_id] = dicts.load(dict_id).kind.encode('ascii')
        except zstdwire.DictionaryError as err:
            raise error.Abort(
                _(b'zstd dictionary %d of the source is unusable: %s')
                % (dict_id, stringutil.forcebytestr(err)),
                hint=_(b'the source needs its %s/%d copied from another '
                       b'clone or a backup') % (DICTS_DIR, dict_id) + without)
    if not repo.svfs.exists(ACTIVE_FILE):
        return
    with repo.svfs(ACTIVE_FILE, b'rb') as fh:
        data = fh.read(ACTIVE_MAX_SIZE + 1)
    try:
        active = parse_active(data)
    except ValueError as err:
        reason = stringutil.forcebytestr(err)
    else:
        wrong = [(kind, dict_id) for kind, dict_id in sorted(active.items())
                 if kinds.get(dict_id) != kind]
        if not wrong:
            return
        reason = b'it names dictionary %d for %s, which the source has ' \
            b'not as a %s dictionary' % (wrong[0][1], wrong[0][0], wrong[0][0])
    raise error.Abort(_(b'%s of the source is damaged: %s')
                      % (ACTIVE_FILE, reason),
                      hint=_(b'the source needs hg zstd-train') + without)


def walkstreamfiles(orig, repo, *args, **kwargs):
    """Send dictionaries with stream clones, stream bundles and local
    clones: without them the copied revlogs cannot be read."""
    yield from orig(repo, *args, **kwargs)
    for name in sorted(repo.svfs.listdir(DICTS_DIR)
                       if repo.svfs.isdir(DICTS_DIR) else []):
        if name.isdigit():
            path = DICTS_DIR + b'/' + name
            yield store.SimpleStoreEntry(
                entry_path=path, is_volatile=False,
                file_size=repo.svfs.stat(path).st_size)
    if repo.svfs.exists(ACTIVE_FILE):
        yield store.SimpleStoreEntry(entry_path=ACTIVE_FILE,
                                     is_volatile=True)


def clone(orig, self, tr, destrevlog, *args, **kwargs):
    """An upgrade to ``zstd-dict`` compresses every chunk again, with the
    dictionaries ``hg zstd-train`` gave the store beforehand: Mercurial
    would copy the chunks it stored uncompressed as they are (measured:
    362 of the pip history's chunks, which the dictionaries shrink)."""
    if (destrevlog.feature_config.compression_engine == ENGINE
            and self.feature_config.compression_engine != ENGINE):
        kwargs.setdefault('reuse_compression', False)
    return orig(self, tr, destrevlog, *args, **kwargs)


def clonerevlogs(orig, ui, srcrepo, dstrepo, *args, **kwargs):
    """Give an upgrade's new store the dictionaries before revlogs are
    copied into it: core copies compressed chunks as they are, and the new
    store must decode them, and keep decoding them after the swap."""
    if srcrepo.svfs.isdir(DICTS_DIR):
        dstrepo.svfs.makedirs(DICTS_DIR)
        for name in srcrepo.svfs.listdir(DICTS_DIR):
            if name.isdigit() or name == b'active':
                path = DICTS_DIR + b'/' + name
                util.copyfile(srcrepo.svfs.join(path), dstrepo.svfs.join(path),
                              hardlink=True)
    return orig(ui, srcrepo, dstrepo, *args, **kwargs)
