# wirecache.py - getbundle responses computed once, served many times
#
# This software may be used and distributed according to the terms of the
# GNU General Public License version 2 or any later version.
"""serve repeated pulls from a cache of compressed responses

After a push, every CI worker asks ``hg serve`` for the same new
changesets, and the server computes and compresses the same response each
time.  With this extension the first such request computes it, compressed
harder than usual, and stores the bytes it sends on local disk; later
requests for the same response are sent those bytes, over HTTP and SSH.
Requests for a response being computed wait for it rather than compute
it again (up to ``wirecache.wait`` seconds, then they compute it
themselves).  A response larger than ``wirecache.max-size`` is not
stored: its writing stops at the bound, the rest is sent as it is
produced, and later requests for it are computed as without the cache.  The first request computes the whole response before it
sends any of it, so that a slow client, or one that goes away, never
holds up the others.

A response is stored under a key made of everything it depends on: the
repository's state (its changesets, which of them are visible, their
phases, obsolescence markers and bookmarks, its last transaction and its
``.hg/pullbundles.manifest``, whose bundles core sends instead), the
request (its ``common`` and ``heads``, bundle capabilities and every other
argument, what the client said it can decode), the compression the server
chose for the client, and the server's configuration.  A push, a strip, a
phase change, new obsolescence markers, ``hg serve`` with hidden
changesets, a client with other capabilities: each makes other keys, so a
response is only ever served to a request that would get the same bytes
from a server without the cache.  Entries of former states are removed by
the size bound, least recently used first.

Responses sent with zstd (core ``zstd`` over HTTP, and ``wirezstd`` when
that extension is enabled) are compressed for the cache at
``wirecache.level``, which any zstd reader decodes.  Level 17 was chosen
by measurement on a real history (the pip releases): the new changesets of
one and five releases compress to 0.86 and 0.83 of level 3's bytes, a full
pull to 0.75, for 100 times level 3's compression time, paid once; level
19 saves 1 to 2 percent more for twice the time.  A response up to 8 MB
is compressed in one piece, its size known, so that zstd fits its tables
to it (a 5-changeset response of a Firefox-scale repository, 142 KB: 22
ms instead of 52).  One up to ``wirecache.bzip2-up-to`` is also
compressed with bzip2, which every Mercurial client since 4.1 decodes
and lists (unless ``server.compressionengines`` names engines and not
``bz2``), and the smaller is stored: the responses to small pulls of a
large repository are mostly manifest lines, whose hashes bzip2 packs
tighter (pulls of 1, 5 and 20 changesets of a Firefox-scale repository:
3.7, 2.5 and 1.3 percent fewer bytes than zstd at level 17, in half its
time), for 3 to 6 ms more decoding on the client.  When bzip2's bytes
are at most 0.92 of zstd's at level 3 (a millisecond to find out), zstd
at ``wirecache.level``, which rarely does better than that on such
responses, is not tried: the response costs half the CPU to store.  zlib and uncompressed responses are stored as they are
sent, in one piece up to 8 MB.

Server configuration::

  [extensions]
  wirecache =

  [wirecache]
  # on or off
  enabled = yes
  # the cache directory: absolute, or relative to the repository's .hg
  path = cache/wirecache
  # total size of the entries: 1m to 1024g
  max-size = 2g
  # responses smaller than this are not stored: 0 to 64m
  min-size = 4k
  # zstd level of stored responses: 1 to 22
  level = 17
  # seconds a request waits for another computing the same response
  wait = 120
  # responses up to this size are also tried with bzip2: 0 (never) to 8m
  bzip2-up-to = 1m

Several ``hg serve`` heads behind a load balancer, each serving its own
copy of one repository, can share one cache on S3-compatible object
storage (AWS S3, MinIO, versitygw...; needs boto3, the ``s3`` extra of
your vcsperf checkout, and credentials the way boto3 finds them, as
``hg bundlegen`` does)::

  [wirecache]
  # entries as objects under this bucket and prefix
  store = s3://hg-wirecache/mozilla-central
  # as a bundlegen destination's region, endpoint (not AWS) and profile
  store.region = us-west-2
  store.endpoint = https://s3.internal.example.com:7070
  # seconds each request to the store may take: 1 to 600
  store.timeout = 10

``wirecache.store.profile`` names a profile of boto3's configuration
files to take the credentials from, as a bundlegen destination's
``profile`` does.

The key is the same as on local disk, but for the repository's last
transaction, which counts by the lengths it recorded rather than by the
time it was written: a head serves only what its own repository would
produce, and heads whose repositories hold the same changesets, phases,
markers and bookmarks, after the same transactions, share their entries.
An entry is downloaded whole and checked against its digest before any
of it is sent; one that fails (truncated, changed, of another length) is
computed again and replaced.  A head writing an entry first creates a
``writing/KEY`` object with a conditional PUT; other heads wait for the
entry up to ``wirecache.wait`` seconds, then compute it themselves.  A
store that fails, answers with errors, stalls or trickles is given up
after ``wirecache.store.timeout`` seconds: the head computes the response
and serves it, logs one line (``ui.log``, event ``wirecache``) and leaves
the store alone for 30 seconds.  ``wirecache.max-size`` bounds the
store's entries too: after each upload the writer lists the prefix and
deletes the oldest written first.  Locks, markers of small responses and
counters stay in ``wirecache.path``, per head.  Heads that share a store
must apply the same changes: ``hg censor`` on one head changes what its
responses hold without changing its changesets, and a later transaction
identical on every head would give it the others' keys again (run it on
every head, or give that head a store of its own).  For the same reason
each repository needs a store (a prefix) of its own: the keys of a store
hold no repository's path, as each head's copy has its own.

Pulls that the cache leaves alone: stream clones, responses the server
sends uncompressed (errors, pull bundles), narrow pulls (core
``narrow``'s ``[narrowacl]`` decides what a narrow response holds by the
user, who is not part of the key, and a cached response would skip that
check), and every pull while an ``outgoing``, ``preoutgoing``,
``listkeys`` or ``prelistkeys`` hook is configured (a cached response
would not run it).  A cache directory that is missing, read-only or full
is skipped: the response is computed as without the extension.  A stored
entry that is truncated or changed is found by its checksum and removed;
one too large to check before sending is checked as it is sent, and cut
short before its end if it fails, so the client's pull fails and applies
nothing.

``hg serve`` can also keep whole HTTP answers in memory, off unless
``wirecache.memory`` gives their size (each at most an eighth of it,
least recently sent dropped first)::

  [wirecache]
  # whole answers hg serve keeps in memory: 0 (none, the default) to 1g
  memory = 32m

Turn it on only for a server where no extension decides per request
what a client may see or ask (by its address, its user, or a file the
extension reads): such an answer is sent before hgweb parses the
request, so nothing an extension does there runs for it, and its key
holds the repository's state, the configuration and the request alone.
Core's permissions (``web.allow-pull``, ``web.deny_read``...) depend on
the configuration alone, which is in the key.  Memory answers are also
off while an extension adds a permission hook or wraps a function
hgweb's permission checks or its choice of the visible changesets go
through, but an extension can decide elsewhere (in a command's own
function, say).

The answers kept are those to ``capabilities``, to the discovery a pull
sends in a ``batch`` (``heads``, ``known``, ``branchmap``, and
``listkeys`` of bookmarks, phases and obsolescence markers) and to a
``getbundle`` the disk cache serves, each under a key made of the
repository's state, its requirements, the files core's answers read
beside it (``.hg/clonebundles.manifest``, ``.hg/pullbundles.manifest``,
the bookmark files), the server's whole configuration (permissions
included) and the whole request (method, path, every header).  A later
request with that key is answered before hgweb parses it, in one
write: a pull whose three answers are all there costs the server about
half the CPU of hgweb's answers (1.6 ms instead of 2.8 on the pip
history), and 32 clients pulling a Firefox-scale push cost 0.17 of
core's CPU instead of 0.33 with the disk cache alone.  An answer is kept only when it is a
success (a 200, not an error or a refusal hgweb sends with it), when
the commands hgweb ran for it were those alone, and no transaction ran
meanwhile.  Nothing is answered from memory (hgweb answers it) for a
request other than a GET of HTTP/1.0 or 1.1 to ``hg serve`` of one
repository, for one with a body or a header announcing one
(``Content-Length`` other than 0, ``Transfer-Encoding``, ``Expect``,
``X-HgArgs-Post``), a header name holding ``_``, or headers over 64
KB.  Removing the cache directory
forgets them all, and a getbundle answer whose disk entry was replaced
or removed is forgotten too.

``hg wirecache`` reports hits, misses, uncached responses, bytes sent
from the cache, the CPU seconds they cost when computed, and the number
and size of the entries (``-T json`` for scripts).  Each response is also
logged through ``ui.log`` (event ``wirecache``, shown by the ``blackbox``
extension).
"""

import bz2
import collections
import hashlib
import itertools
import os
import threading
import time
import urllib.parse
import weakref

import zstandard
from mercurial import (
    cmdutil,
    commands,
    error,
    extensions,
    pycompat,
    registrar,
    scmutil,
    ui as uimod,
    util,
    wireprotoserver,
    wireprototypes,
    wireprotov1server,
)
from mercurial.hgweb import (
    common as hgwebcommon,
    hgweb_mod,
    server as hgwebserver,
)
from mercurial.i18n import _
from mercurial.utils import stringutil

from hgext3rd import _hgcompat, _hgconfig, wirezstd
from vcsperf.core import (
    bundlestore,
    errors,
    responsecache,
    sharedresponsecache,
)

testedwith = _hgcompat.TESTEDWITH
minimumhgversion = _hgcompat.MINIMUM_HG
__version__ = _hgcompat.VERSION
buglink = _hgcompat.BUGLINK

cmdtable = {}
command = registrar.command(cmdtable)
configtable = {}
configitem = registrar.configitem(configtable)

configitem(b'wirecache', b'enabled', default=True)
configitem(b'wirecache', b'path', default=b'cache/wirecache')
configitem(b'wirecache', b'max-size', default=b'2g')
configitem(b'wirecache', b'min-size', default=b'4k')
configitem(b'wirecache', b'level', default=17)
configitem(b'wirecache', b'wait', default=120)
configitem(b'wirecache', b'bzip2-up-to', default=b'1m')
configitem(b'wirecache', b'memory', default=b'0')
configitem(b'wirecache', b'store', default=b'')
configitem(b'wirecache', b'store.region', default=b'')
configitem(b'wirecache', b'store.endpoint', default=b'')
configitem(b'wirecache', b'store.profile', default=b'')
configitem(b'wirecache', b'store.timeout', default=10)

_MAX_SIZE = (1 << 20, 1024 << 30)
_MIN_SIZE = (0, 64 << 20)
_LEVELS = (1, 22)
_WAIT = (0, 3600)
_STORE_TIMEOUT = (1, 600)
_BZIP2_UP_TO = (0, 8 << 20)
_MEMORY = (0, 1 << 30)

#: Engines whose stored responses are compressed at ``wirecache.level``.
_ZSTD_ENGINES = (b'zstd', wirezstd.ENGINE)
#: Hooks a response from the cache would not run: a getbundle runs the
#: outgoing ones, and the listkeys ones for its bookmarks and phases part
#: (a ``prelistkeys`` hook may refuse a client, by its address say).
_PULL_HOOKS = (b'outgoing', b'preoutgoing', b'listkeys', b'prelistkeys')


def _store(ui):
    """The shared store of ``wirecache.store`` (with the settings of a
    bundlegen destination), or None for local disk alone."""
    url = ui.config(b'wirecache', b'store')
    if not url:
        return None
    settings = {'url': pycompat.sysstr(url)}
    for name in ('region', 'endpoint', 'profile'):
        value = ui.config(b'wirecache', b'store.' + pycompat.sysbytes(name))
        if value:
            settings[name] = pycompat.sysstr(value)
    try:
        return bundlestore.Destination('wirecache.store', settings)
    except errors.Abort as err:
        raise error.Abort(pycompat.bytestr(str(err)),
                          hint=err.hint and pycompat.bytestr(err.hint))


#: The local cache of each ``ui`` (of a repository hgweb serves): its
#: settings read once, as hgweb reads its configuration once per
#: repository object.
_local_caches = weakref.WeakKeyDictionary()


def _cache(repo):
    ui = repo.ui
    cache = _local_caches.get(ui)
    if cache is not None:
        return cache
    path = util.expandpath(ui.config(b'wirecache', b'path'))
    if not os.path.isabs(path):
        path = repo.vfs.join(path)
    settings = dict(
        max_size=_hgconfig.config_bytes(ui, b'wirecache', b'max-size',
                                        *_MAX_SIZE),
        min_size=_hgconfig.config_bytes(ui, b'wirecache', b'min-size',
                                        *_MIN_SIZE),
        wait=_hgconfig.config_int(ui, b'wirecache', b'wait', *_WAIT))
    store = _store(ui)
    if store is None:
        cache = responsecache.ResponseCache(pycompat.fsdecode(path),
                                            **settings)
        _local_caches[ui] = cache
        return cache

    def warn(line):
        ui.log(b'wirecache', b'%s\n', pycompat.bytestr(line))
    return sharedresponsecache.SharedResponseCache(
        pycompat.fsdecode(path), destination=store,
        timeout=_hgconfig.config_int(ui, b'wirecache', b'store.timeout',
                                     *_STORE_TIMEOUT),
        warn=warn, **settings)


def _level(ui):
    return _hgconfig.config_int(ui, b'wirecache', b'level', *_LEVELS)


def _bzip2_up_to(ui):
    """Responses up to this size are also tried with bzip2; 0 when
    ``server.compressionengines`` lists engines and not bzip2 (the
    server's operator chose them)."""
    up_to = _hgconfig.config_bytes(ui, b'wirecache', b'bzip2-up-to',
                                   *_BZIP2_UP_TO)
    chosen = ui.configlist(b'server', b'compressionengines')
    # the setting names engines: bzip2's is bz2
    if chosen and _ENGINE_BZIP2 not in chosen:
        return 0
    return up_to


def check_config(ui, repo):
    """Read every setting once, so that ``hg serve`` refuses a bad one
    before it listens."""
    _hgconfig.config_bool(ui, b'wirecache', b'enabled')
    _level(ui)
    _bzip2_up_to(ui)
    _memory(ui)
    if repo is not None:
        _cache(repo)


# The key ---------------------------------------------------------------


def _stat_part(path):
    # The store's last transaction: it covers what the rest of the state
    # does not (``hg censor``, a rollback), at the cost of one stat.
    try:
        st = os.stat(path)
    except OSError:
        return b'-'
    return b'%d:%d:%d' % (st.st_ino, st.st_size, st.st_mtime_ns)


#: A file's path -> its (inode, size, mtime) and digest when last read.
_digests = {}


def _content_part(path):
    # A file by what it holds: the same on servers of one repository
    # that applied the same transactions (the store's ``undo`` has the
    # same lengths), unlike the file's inode and time.
    try:
        with open(path, 'rb') as fh:
            st = os.fstat(fh.fileno())
            known = (st.st_ino, st.st_size, st.st_mtime_ns)
            last = _digests.get(path)
            if last is not None and last[0] == known:
                return last[1]
            digest = hashlib.sha256(fh.read()).digest()
            _digests[path] = (known, digest)
    except OSError:
        return b'-'
    return digest


def _bookmark_files(unfi):
    # Every file bookmarks are read from: the repository's own (or its
    # store's), and in a share made with ``hg share -B`` the source's.
    return (unfi.vfs.join(b'bookmarks'), unfi.svfs.join(b'bookmarks'),
            os.path.join(unfi.sharedpath, b'bookmarks'))


def _fresh_bookmarks(unfi):
    """Have ``unfi`` read its bookmarks again when a file they are read
    from changed since it last did; returns those files' identities.

    A repository keeps its bookmarks once read, and hgweb opens it again
    only when the files it checks changed by the second: in a share made
    with ``hg share -B`` neither sees the source's file (its file cache
    stats the share's own, missing), so bookmarks read in the second of a
    transaction's lock (a stream clone takes it) stayed those until the
    next one.  hgweb alone reads them only for a request that needs them;
    the keys read them for every request, which left such old bookmarks
    in place far more often (a listkeys or ``clone -r BOOKMARK`` got
    them).  Files are replaced by a rename: a new inode for each change."""
    seen = tuple(_stat_part(path) for path in _bookmark_files(unfi))
    if unfi.__dict__.get('_wirecache_bookmark_files') != seen:
        unfi.__dict__.pop('_bookmarks', None)
        unfi._filecache.pop(b'_bookmarks', None)
        unfi.__dict__['_wirecache_bookmark_files'] = seen
    return seen


def state_parts(repo, shared=False):
    """What the repository (as ``repo``'s view shows it) holds that a
    pull response depends on, read from the objects the response is
    computed from.  ``shared``: for a cache several servers share, each
    with its own copy of the repository."""
    unfi = repo.unfiltered()
    cl = unfi.changelog
    tiprev = len(cl) - 1
    # The heads name the whole history (a node hashes its parents); the
    # length and tip alone were the same for two histories a strip, a
    # commit and an unbundle apart.
    heads = hashlib.sha256(b''.join(sorted(cl.heads()))).digest()
    parts = [repo.filtername or b'', b'%d' % len(cl), cl.node(tiprev),
             heads]
    hidden = scmutil.combined_filtered_and_obsolete_hash(
        repo, tiprev, needobsolete=True)
    parts.append(hidden or b'')
    # Phase roots by phase (revisions in 6.9 and 7.x alike), named by
    # node: the same numbers name other changesets after a strip
    roots = unfi._phasecache._phaseroots
    parts.append(repr(sorted((phase, sorted(cl.node(rev) for rev in revs))
                             for phase, revs in roots.items())).encode())
    markers = unfi.obsstore
    count = len(markers)
    parts.append(b'%d' % count)
    if count:
        parts.append(repr(markers._all[-1]).encode())
    _fresh_bookmarks(unfi)
    parts.append(repr(sorted(unfi._bookmarks.items())).encode())
    undo = unfi.svfs.join(b'undo')
    parts.append(_content_part(undo) if shared else _stat_part(undo))
    # Two repositories with the same changesets can hold other file data
    # (one with a revision censored; local clones have no undo file to
    # tell them apart) and share an absolute ``wirecache.path``: the
    # store's own path sets their keys apart.  A shared store's heads
    # keep copies of one repository at paths of their own.
    if not shared:
        parts.append(os.path.realpath(unfi.spath))
    if repo.ui.configbool(b'server', b'pullbundle'):
        # Core sends a bundle this file lists instead of computing one: a
        # file written after a response was stored makes other keys.
        manifest = unfi.vfs.join(b'pullbundles.manifest')
        parts.append(_content_part(manifest) if shared
                     else _stat_part(manifest))
    return parts


#: Sections that change how a server presents itself and what it logs,
#: not the bytes of a pull response; hgweb also sets some of them per
#: request (``bundle.mainreporoot`` on the first only).  ``[wirecache]``
#: is left out too: the level a response is stored at is part of its
#: encoding, and a new size bound should not empty the cache.
_PRESENTATION = {b'alias', b'annotate', b'auth', b'blackbox', b'bundle',
                 b'color', b'commands', b'defaults', b'diff', b'hostsecurity',
                 b'merge', b'merge-tools', b'pager', b'paths', b'progress',
                 b'revsetalias', b'templatealias', b'templates', b'ui',
                 b'web', b'wirecache'}


def config_parts(ui):
    """The server's configuration (levels, extensions, experimental
    switches: any may change a response) but for how it presents itself,
    and the software."""
    return [util.version(), _hgcompat.VERSION,
            repr(sorted(item for item in ui.walkconfig()
                        if item[0] not in _PRESENTATION)).encode()]


def request_parts(proto, others):
    caps = sorted(proto.getprotocaps())
    return [proto.name, b' '.join(caps),
            repr(sorted(others.items())).encode()]


# Encodings: how a response travels, and what is stored -------------------


class _Stored:
    """Stands for the engine a stored response was compressed with: the
    response is sent as it is, under that engine's name."""

    def __init__(self, engine):
        self._engine = engine

    def name(self):
        return self._engine.name()

    def wireprotosupport(self):
        return self._engine.wireprotosupport()

    def compressstream(self, it, opts=None):
        return it


#: A response up to this size is compressed in one piece, its size known:
#: zstd then fits its window and tables to it instead of setting up
#: level 17's 8 MB window (a 142 KB Firefox-scale response took 22 ms
#: instead of 52, in 0.4% fewer bytes).  Larger ones are streamed.
WHOLE_UP_TO = 8 << 20
#: bzip2's level: its largest block (900 KB).
_BZIP2_LEVEL = 9
_WIRE_BZIP2 = b'bzip2'
_ENGINE_BZIP2 = b'bz2'
#: Bytes of a stored response that hold the name of its engine, at most.
_HEAD = 256


def _named(name, data):
    """A stored HTTP response: its engine's name, as the wire's
    ``application/mercurial-0.2`` frames it, then its bytes."""
    return b'%c%s%s' % (len(name), name, data)


#: bzip2 wins clearly when its bytes are at most this share of zstd's at
#: ``_PROBE_LEVEL``: zstd at ``wirecache.level`` is then not tried (the
#: Firefox-scale pulls of 1 to 20 changesets, mostly manifest lines: zstd
#: at level 17 makes 0.92 of level 3's bytes in 20 ms, bzip2 0.90 in 10).
_BZIP2_CLEAR_WIN = 0.92
_PROBE_LEVEL = 3


def compress_http(chunks, engine, opts, bzip2_up_to, chosen=None):
    """A response compressed by ``engine`` for the cache, prefixed with
    the name of the engine it is sent with: in one piece, its size known,
    up to ``WHOLE_UP_TO``, then, if it is at most ``bzip2_up_to`` bytes
    (0: never), compressed with bzip2 too and the smaller kept; bzip2
    alone when it wins clearly over zstd at ``_PROBE_LEVEL``.  ``chosen``
    (a dict) is given ``engine``, ``size`` and ``probe`` (zstd's bytes
    at that level, when tried)."""
    chosen = {} if chosen is None else chosen
    chunks = iter(chunks)
    head, size = [], 0
    for chunk in chunks:
        head.append(chunk)
        size += len(chunk)
        if size > WHOLE_UP_TO:
            break
    else:
        data = b''.join(head)
        del head[:]
        name = engine.name()
        other = None
        if size <= bzip2_up_to:
            other = bz2.compress(data, _BZIP2_LEVEL)
            probe = len(zstandard.ZstdCompressor(
                level=_PROBE_LEVEL).compress(data))
            chosen['probe'] = probe
            if len(other) <= _BZIP2_CLEAR_WIN * probe:
                chosen.update(engine=_WIRE_BZIP2, size=len(other))
                yield _named(_WIRE_BZIP2, other)
                return
        if name == b'zstd':
            # Core's engine streams without the size; one frame either
            # way, decoded by any zstd reader.
            compressed = zstandard.ZstdCompressor(
                level=opts.get(b'level', 3)).compress(data)
        else:
            compressed = b''.join(engine.compressstream(iter([data]), opts))
        if other is not None and len(other) < len(compressed):
            name, compressed = _WIRE_BZIP2, other
        chosen.update(engine=name, size=len(compressed))
        yield _named(name, compressed)
        return
    chosen.update(engine=engine.name())
    yield _named(engine.name(), b'')
    yield from engine.compressstream(itertools.chain(head, chunks), opts)


def _accepts(proto, name):
    """Whether the client listed engine ``name`` in its ``comp=``."""
    return name in wireprotov1server.clientcompressionsupport(proto)


def _harder(name, opts, level):
    if name not in _ZSTD_ENGINES:
        return opts
    opts = dict(opts)
    for item in (b'level', b'small-response-level'):
        if item == b'level' or item in opts:
            opts[item] = max(level, opts.get(item) or 0)
    return opts


class _Encoding:
    """The encoding the server chose for this request: ``parts`` for the
    key, ``compress`` for a response computed now, ``respond`` for the
    bytes to send."""

    def __init__(self, repo, proto):
        level = _level(repo.ui)
        #: What ``compress_http`` chose, once it has compressed.
        self.chosen = {}
        if proto.name == wireprototypes.SSHV1:
            opts = wirezstd.ssh_options(proto)
            if opts is None:
                self.parts = [b'ssh-raw']
                self.compress = lambda chunks: chunks
            else:
                opts = _harder(wirezstd.ENGINE, opts, level)
                self.parts = [b'ssh-wirezstd', repr(sorted(opts.items()))
                              .encode()]
                self.compress = lambda chunks: wirezstd.ssh_encode(chunks,
                                                                   opts)
            self.sendable = lambda head: True
            # A legacy stream is written as it is: wirezstd compresses
            # only ``streamres``.
            self.respond = lambda body: wireprototypes.streamreslegacy(
                gen=body)
            return
        mediatype, engine, opts = wireprotoserver._httpresponsetype(
            repo.ui, proto, False)
        opts = _harder(engine.name(), opts, level)
        bzip2_up_to = 0
        if (engine.name() in _ZSTD_ENGINES
                and mediatype == wireprotoserver.HGTYPE2
                and _accepts(proto, _WIRE_BZIP2)):
            bzip2_up_to = _bzip2_up_to(repo.ui)
        # Stored with the name of the engine they are sent with (any of
        # ``engines``): the parts name that layout.
        engines = {engine.name(): engine}
        if bzip2_up_to:
            engines[_WIRE_BZIP2] = util.compengines.forwiretype(_WIRE_BZIP2)
        self.parts = [b'http', mediatype, engine.name(),
                      repr(sorted(opts.items())).encode(),
                      b'named %s' % b','.join(sorted(engines)),
                      b'bzip2 up to %d' % bzip2_up_to]
        self.compress = lambda chunks: compress_http(chunks, engine, opts,
                                                     bzip2_up_to, self.chosen)

        # An entry written by another hand (its digest is keyed by its
        # name, which anyone who can write the cache knows) may name any
        # engine: only those of ``engines`` are sent.
        self.sendable = lambda head: _engine_name(head) in engines

        def respond(body):
            name, body = _unnamed(body)
            proto.wirecache_sent = (mediatype, engines[name])
            return wireprototypes.streamres(gen=body)
        self.respond = respond


def _engine_name(head):
    """The engine a stored HTTP response names in its first bytes."""
    if not head or len(head) < 1 + head[0]:
        return None
    return head[1:1 + head[0]]


def _unnamed(chunks):
    """The engine's name and the bytes of a stored HTTP response."""
    chunks = iter(chunks)
    first = b''
    for first in chunks:
        if first:
            break
    return (_engine_name(first),
            itertools.chain([first[1 + first[0]:]], chunks))


def _httpresponsetype(orig, ui, proto, *args, **kwargs):
    sent = getattr(proto, 'wirecache_sent', None)
    if sent is not None:
        return sent[0], _Stored(sent[1]), {}
    return orig(ui, proto, *args, **kwargs)


# getbundle -------------------------------------------------------------


#: getbundle arguments of a narrow pull (core ``narrow``).
_NARROW_ARGS = (b'narrow', b'includepats', b'excludepats',
                b'oldincludepats', b'oldexcludepats', b'depth')


def _narrow(proto, others):
    # ``[narrowacl]`` makes a narrow response depend on the user, who is
    # not in the key: such pulls are computed as core does, ACL and all.
    if any(others.get(name, b'0') not in (b'0', b'')
           for name in _NARROW_ARGS):
        return True
    caps = b' '.join(proto.getprotocaps()) + others.get(b'bundlecaps', b'')
    return b'narrow' in caps


def _uncacheable(ui, proto, others):
    if others.get(b'stream', b'0') not in (b'0', b''):
        return True
    if _narrow(proto, others):
        return True
    return _runs_pull_hooks(ui)


def _runs_pull_hooks(ui):
    return any(name.split(b'.')[0] in _PULL_HOOKS
               for name, _value in ui.configitems(b'hooks'))


def _getbundle(orig, repo, proto, others):
    ui = repo.ui
    if (not _hgconfig.config_bool(ui, b'wirecache', b'enabled')
            or _uncacheable(ui, proto, others)):
        return orig(repo, proto, others)
    start_cpu = time.thread_time()
    cache = _cache(repo)
    encoding = _Encoding(repo, proto)
    shared = isinstance(cache, sharedresponsecache.SharedResponseCache)
    key = responsecache.make_key(
        state_parts(repo, shared) + config_parts(ui) + request_parts(proto, others)
        + encoding.parts)
    fingerprint_cpu = time.thread_time() - start_cpu
    entry = cache.lookup(key)
    if entry is None:
        got = cache.acquire(key)
        if got is None:
            _account(ui, cache, key, b'uncached', 0, 0.0, fingerprint_cpu)
            return orig(repo, proto, others)
        if isinstance(got, responsecache.Entry):
            entry = got
        else:
            return _compute(orig, repo, proto, others, cache, got, encoding,
                            fingerprint_cpu)
    if not encoding.sendable(entry.head(_HEAD)):
        entry.close()
        responsecache.remove_if_ours(entry.path)
        ui.log(b'wirecache', b'entry %s names no engine this request '
               b'accepts; removed\n', pycompat.fsencode(entry.path))
        _account(ui, cache, key, b'corrupt', 0, 0.0, fingerprint_cpu)
        return orig(repo, proto, others)
    return encoding.respond(_send_entry(ui, cache, key, entry,
                                        fingerprint_cpu))


def _send_entry(ui, cache, key, entry, fingerprint_cpu):
    outcome = b'hit'
    try:
        yield from entry.chunks()
    except responsecache.CorruptEntry as err:
        responsecache.remove_if_ours(err.path)
        outcome = b'corrupt'
        raise error.Abort(_(b'wirecache entry %s is corrupt; removed')
                          % pycompat.fsencode(err.path))
    finally:
        if outcome == b'hit':
            _account(ui, cache, key, b'hit', entry.size, entry.cpu,
                     fingerprint_cpu)
        else:
            _account(ui, cache, key, outcome, 0, 0.0, fingerprint_cpu)


def _compute(orig, repo, proto, others, cache, filling, encoding,
             fingerprint_cpu):
    start = time.thread_time()
    try:
        # A copy: core takes the arguments out of the dict it is given.
        rsp = orig(repo, proto, dict(others))
    except BaseException:
        filling.release()
        raise
    if (not isinstance(rsp, wireprototypes.streamres)
            or rsp.prefer_uncompressed):
        # An error part, a pull bundle: sent as without the cache.
        filling.release()
        return rsp
    filling.cpu = time.thread_time() - start
    try:
        body = filling.fill(encoding.compress(rsp.gen), time.thread_time)
    except OSError as err:
        # The cache's disk failed: computed again, without it.
        repo.ui.log(b'wirecache', b'cache unusable: %s\n',
                    stringutil.forcebytestr(err))
        _account(repo.ui, cache, filling.key, b'uncached', 0, 0.0,
                 fingerprint_cpu)
        return orig(repo, proto, dict(others))
    chosen = encoding.chosen
    if 'probe' in chosen:
        repo.ui.log(b'wirecache', b'compressed with %s: %d bytes; zstd at '
                    b'level %d: %d\n', chosen['engine'], chosen['size'],
                    _PROBE_LEVEL, chosen['probe'])
    _account(repo.ui, cache, filling.key,
             b'miss' if filling.stored else b'uncached', filling.size,
             filling.cpu, fingerprint_cpu)
    return encoding.respond(body)


def _account(ui, cache, key, outcome, size, cpu, fingerprint_cpu):
    if outcome in (b'hit', b'miss'):
        watch = getattr(_watching, 'answer', None)
        if watch is not None:
            # The whole answer may be kept in memory: it is one the
            # cache serves.
            watch.getbundle = (key, size, cpu)
    counters = {b'hit': {'hits': 1, 'bytes_saved': size, 'cpu_saved': cpu},
                b'miss': {'misses': 1},
                b'uncached': {'uncached': 1},
                b'corrupt': {'uncached': 1}}[outcome]
    cache.count(**counters)
    ui.log(b'wirecache',
           b'getbundle %s key %s: %d bytes, %.3f s CPU computing, '
           b'%.4f s CPU keying\n', outcome, key[:12].encode(), size, cpu,
           fingerprint_cpu)


# Whole answers in memory ---------------------------------------------------
#
# A pull is three requests (capabilities, a batch of discovery commands,
# getbundle); answering the first two, and a getbundle from the disk cache,
# costs hgweb more than reading the answer does.  hg serve keeps the whole
# HTTP answers (status, headers, body) to GET requests of commands that
# only read the repository, under a key made of the repository's state, the
# whole configuration and the whole request, and sends them again from
# memory before hgweb parses the request.


#: Commands whose answer is a function of the repository's state (the
#: parts of ``state_parts`` and its requirements), the configuration and
#: the request; ``listkeys`` only for the namespaces of core named in
#: ``_READ_NAMESPACES``.  (``lookup`` is not: it reads local tags.)
_READ_COMMANDS = {b'capabilities', b'heads', b'known', b'branchmap',
                  b'listkeys'}
_READ_NAMESPACES = {b'bookmarks', b'phases', b'obsolete', b'namespaces'}
#: Bytes of a request's headers beyond which it is not looked up.
_REQUEST_UP_TO = 64 << 10

_watching = threading.local()


def _memory(ui):
    return _hgconfig.config_bytes(ui, b'wirecache', b'memory', *_MEMORY)


class _Answer:
    """A whole HTTP answer; ``getbundle``: the disk cache's key, size and
    CPU seconds of the response it holds, counted as a hit when sent;
    ``cache_dir`` and ``entry``: what ``_still_valid`` checks."""

    __slots__ = ('key', 'cmd', 'status', 'headers', 'body', 'getbundle',
                 'cache_dir', 'entry')

    def __init__(self, cmd, status, headers, body, getbundle, cache_dir,
                 entry):
        self.key = None
        self.cmd = cmd
        self.status = status
        self.headers = headers
        self.body = body
        self.getbundle = getbundle
        self.cache_dir = cache_dir
        self.entry = entry


#: Bytes an answer costs beyond its key, status, headers and body: its
#: objects and its place in the table (20,000 answers with empty bodies
#: grew hg serve by 20 MB, about 1 KB each).
_ANSWER_OVERHEAD = 1024


def _answer_size(answer):
    return (_ANSWER_OVERHEAD + len(answer.key) + len(answer.status)
            + len(answer.body)
            + sum(len(name) + len(value) for name, value in answer.headers))


class _Answers:
    """Answers by key, least recently sent first, at most ``limit``
    bytes together (``_answer_size``: an empty body costs too); one
    answer at most an eighth of it."""

    def __init__(self):
        self._lock = threading.Lock()
        self._answers = collections.OrderedDict()
        self._size = 0

    def get(self, key):
        with self._lock:
            answer = self._answers.get(key)
            if answer is not None:
                self._answers.move_to_end(key)
            return answer

    def forget(self, answer):
        with self._lock:
            if self._answers.get(answer.key) is answer:
                del self._answers[answer.key]
                self._size -= _answer_size(answer)

    def put(self, key, answer, limit):
        answer.key = key
        size = _answer_size(answer)
        if size > limit // 8:
            return
        with self._lock:
            old = self._answers.pop(key, None)
            if old is not None:
                self._size -= _answer_size(old)
            self._answers[key] = answer
            self._size += size
            while self._size > limit:
                _, dropped = self._answers.popitem(last=False)
                self._size -= _answer_size(dropped)


_answers = _Answers()


class _Watch:
    """What hgweb's handling of one request saw: the answer's key parts
    before and after it (equal when no transaction ran meanwhile), the
    status, headers and body it sent; the commands it ran (``ran``: the
    top-level one first, ``top``: how many top-level ones) and the
    namespaces ``listkeys`` read."""

    def __init__(self):
        self.before = self.after = None
        self.ran = []
        self.top = 0
        self.namespaces = []
        self.status = None
        self.headers = None
        self.chunks = []
        self.size = 0
        self.getbundle = None


def _parse(query):
    # latin-1: each byte one character, whatever a request holds.
    return urllib.parse.parse_qs(query, keep_blank_values=True,
                                 encoding='latin-1')


def _ran(name):
    watch = getattr(_watching, 'answer', None)
    if watch is not None:
        watch.ran.append(name)
    return watch


def _dispatch(orig, repo, proto, command, *args, **kwargs):
    watch = _ran(command)
    if watch is not None:
        watch.top += 1
    return orig(repo, proto, command, *args, **kwargs)


def _batch(orig, repo, proto, cmds, others):
    # The commands as batch splits them (it fails on any other form).
    for pair in cmds.split(b';'):
        _ran(pair.split(b' ', 1)[0])
    return orig(repo, proto, cmds, others)


def _listkeys(orig, repo, proto, namespace):
    watch = getattr(_watching, 'answer', None)
    if watch is not None:
        watch.namespaces.append(namespace)
    return orig(repo, proto, namespace)


def _only_read(watch):
    """The command hgweb ran for the request if its answer may be kept:
    one top-level command, and every command it ran (a batch's too) one
    of ``_READ_COMMANDS``, its ``listkeys`` namespaces all in
    ``_READ_NAMESPACES``; or a getbundle (kept only when the disk cache
    served it).  Read from what hgweb ran, not from the request: hgweb
    reads arguments in ways a second reading could miss."""
    if watch.top != 1:
        return None
    cmd = watch.ran[0]
    if cmd == b'getbundle':
        return cmd if len(watch.ran) == 1 else None
    ran = watch.ran[1:] if cmd == b'batch' else watch.ran
    if (not ran or any(name not in _READ_COMMANDS for name in ran)
            or ran.count(b'listkeys') != len(watch.namespaces)
            or any(namespace not in _READ_NAMESPACES
                   for namespace in watch.namespaces)):
        return None
    return cmd


#: Set by opening a repository, on some of hgweb's copies and not others;
#: only bundle repositories read it.
_MAIN_REPO_ROOT = (b'bundle', b'mainreporoot')


#: Changes of any ``ui``'s configuration so far: each change counts one
#: before it and one after it (``_config_changing``).
_config_changes = [0]
#: ``ui`` -> (``_config_changes`` when it was read, its configuration).
_configs = weakref.WeakKeyDictionary()


_config_changes_lock = threading.Lock()


def _count_config_change():
    with _config_changes_lock:
        _config_changes[0] += 1


def _config_changing(orig, ui, *args, **kwargs):
    _count_config_change()
    try:
        return orig(ui, *args, **kwargs)
    finally:
        _count_config_change()


def _whole_config(ui):
    """The whole configuration of ``ui``, read again only after a change
    to any configuration (reading it is half the cost of a key)."""
    changes = _config_changes[0]
    known = _configs.get(ui)
    if known is not None and known[0] == changes:
        return known[1]
    # Both views: hgweb reads some settings as trusted only and others
    # (web.*, the permissions among them) from untrusted files too.
    config = repr([sorted(item for item in ui.walkconfig(untrusted=untrusted)
                          if item[:2] != _MAIN_REPO_ROOT)
                   for untrusted in (False, True)]).encode()
    if _config_changes[0] == changes:
        _configs[ui] = (changes, config)
    return config


def _answer_state(repo):
    """The parts of the repository an answer of ``_READ_COMMANDS`` depends
    on, and the server's whole configuration (permissions included)."""
    parts = state_parts(repo)
    # The bookmark files read by state_parts: a bookmark moved while
    # hgweb answered makes its key after the answer another.
    unfi = repo.unfiltered()
    bookmark_files = unfi.__dict__['_wirecache_bookmark_files']
    # Core's clonebundles advertises clone bundles in the capabilities
    # while this file exists (written by ``hg bundlegen`` or clonebundles'
    # auto-generation after a transaction).
    clonebundles = _stat_part(unfi.vfs.join(b'clonebundles.manifest'))
    return (parts + [b' '.join(bookmark_files), clonebundles,
                     b' '.join(sorted(repo.requirements)),
                     util.version(), _hgcompat.VERSION,
                     _whole_config(repo.ui)])


def _request_parts(handler):
    parts = [handler.command.encode('latin-1'),
             handler.request_version.encode('latin-1'),
             handler.path.encode('latin-1')]
    for name, value in handler.headers.items():
        parts.append(b'%s: %s' % (name.lower().encode('latin-1'),
                                  value.encode('latin-1')))
    return parts


#: Headers of a request that may carry a body or arguments hgweb reads
#: from it (``X-HgArgs-Post`` even without a ``Content-Length``).
_BODY_HEADERS = ('content-length', 'transfer-encoding', 'expect',
                 'x-hgargs-post')


def _permission_path():
    """Every function hg serve's handling of a wire protocol request goes
    through up to its permission checks, these included, and the one
    choosing the view a command sees (an extension wrapping any may decide
    from what is not in an answer's key, the client's address say).  A
    command's own function is not among them: memory answers are opt-in
    for servers where no extension decides per request."""
    return ((hgwebserver._httprequesthandler, 'do_GET'),
            (hgwebserver._httprequesthandler, 'do_POST'),
            (hgwebserver._httprequesthandler, 'do_write'),
            (hgwebserver._httprequesthandler, 'do_hgweb'),
            (hgweb_mod.hgweb, '__call__'),
            (hgweb_mod.hgweb, 'run_wsgi'), (hgweb_mod.hgweb, '_runwsgi'),
            (hgweb_mod.hgweb, 'check_perm'),
            (wireprotoserver, 'handlewsgirequest'),
            (wireprotoserver, '_callhttp'),
            (wireprotoserver.httpv1protocolhandler, 'checkperm'),
            (wireprotov1server, 'dispatch'),
            (wireprotov1server, 'getdispatchrepo'),
            (hgwebcommon, 'checkauthz'), (hgwebcommon, 'hashiddenaccess'))


#: Core's functions of ``_permission_path``, as this module found them.
_CORE_PERMISSION_PATH = [getattr(container, name)
                         for container, name in _permission_path()]


def _core_permissions():
    """Whether hgweb's permission checks are core's alone: its hooks
    core's one, and each function of ``_permission_path`` core's, or
    core's wrapped by this module only."""
    if hgwebcommon.permhooks != [hgwebcommon.checkauthz]:
        return False
    for (container, name), core in zip(_permission_path(),
                                       _CORE_PERMISSION_PATH):
        if getattr(core, '_origfunc', None) is not None:
            return False  # wrapped before this module was loaded
        function = getattr(container, name)
        while getattr(function, '_unboundwrapper', None) in _OWN_WRAPPERS:
            function = function._origfunc
        if function is not core:
            return False
    return True


def _may_answer(handler):
    """Whether ``handler``'s request may be answered from memory, as far
    as cheap checks tell: a GET without a body or any header announcing
    one, no header name hg serve would read otherwise than it is spelt
    (``X_HgArg_1`` is ``X-HgArg-1`` to hgweb), to hg serve's single
    repository, whose permissions core decides from the configuration
    alone (``_core_permissions``).  Whether its commands only read
    (``_only_read``) is checked before an answer is kept: an answer found
    in memory is one to a request that did."""
    app = handler.server.application
    if (handler.command != 'GET' or not isinstance(app, hgweb_mod.hgweb)
            or handler.request_version not in ('HTTP/1.0', 'HTTP/1.1')
            or not _core_permissions()):
        return False
    size = 0
    for name, value in handler.headers.items():
        size += len(name) + len(value)
        lowered = name.lower()
        if '_' in name or (lowered in _BODY_HEADERS
                           and (lowered, value) != ('content-length', '0')):
            return False
    if size > _REQUEST_UP_TO:
        return False
    path = handler.path.partition('?')[0]
    prefix = pycompat.sysstr(handler.server.prefix)
    return path in (prefix, prefix + '/') or (prefix == '' and path == '/')


def _do_get(orig, self):
    if not _may_answer(self):
        return orig(self)
    with self.server.application._obtainrepo() as repo:
        ui = repo.ui
        limit = _memory(ui)
        # No key is made where no answer may be kept (hgweb's repository
        # checks again, for the answer it keeps).
        enabled = limit and _hgconfig.config_bool(
            ui, b'wirecache', b'enabled') and _may_keep(ui)
        if enabled:
            cache = _cache(repo)
            key = responsecache.make_key(_answer_state(repo)
                                         + _request_parts(self))
            answer = _answers.get(key)
            if answer is not None and _still_valid(answer, cache):
                ui.log(b'wirecache', b'%s answered from memory\n',
                       answer.cmd)
                _send_answer(self, answer)
                if answer.getbundle is not None:
                    disk_key, size, cpu = answer.getbundle
                    _account(ui, cache, disk_key, b'hit', size, cpu, 0.0)
                return None
    if not enabled or 'cmd' not in _parse(self.path.partition('?')[2]):
        return orig(self)
    return _answer_and_keep(orig, self, cache, limit)


def _cache_dir_id(cache, make=False):
    """The cache directory's identity (``make``: made if missing), None
    when it is missing or cannot be made."""
    try:
        if make:
            os.makedirs(cache.root, exist_ok=True)
        st = os.stat(cache.root)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _entry_id(cache, disk_key):
    """The identity of the disk entry of a getbundle answer (replaced
    whole, by a rename, when it changes), None when it is missing."""
    try:
        st = os.stat(cache.entry_path(disk_key))
    except OSError:
        return None
    return st.st_ino, st.st_size


def _still_valid(answer, cache):
    """Whether the cache directory an answer was kept beside is still
    there (removing it empties the memory too) and, for a getbundle, its
    disk entry still the one it was read from; one that is not is
    forgotten.  A hit marks the disk entry as used, for the size
    bound."""
    valid = answer.cache_dir == _cache_dir_id(cache)
    if valid and answer.getbundle is not None:
        disk_key = answer.getbundle[0]
        valid = answer.entry == _entry_id(cache, disk_key)
        if valid:
            try:
                os.utime(cache.entry_path(disk_key))
            except OSError:
                pass  # read-only: the order of eviction is older
    if not valid:
        _answers.forget(answer)
    return valid


def _send_answer(handler, answer):
    """``answer`` sent as hg serve sends one (status line, its
    ``Server`` and ``Date`` headers and access log line), its length
    given, in one write."""
    code, message = answer.status.split(' ', 1)
    handler.send_response(int(code), message)
    for name, value in answer.headers:
        handler.send_header(name, value)
    handler.send_header('Content-Length', str(len(answer.body)))
    handler._headers_buffer.append(b'\r\n' + answer.body)
    handler.flush_headers()


def _answer_and_keep(orig, handler, cache, limit):
    """hgweb answers the request; the answer is kept if it was a whole 200
    computed while the repository did not change, before its last bytes
    are sent (the client's next request may ask for it again)."""
    watch = _watching.answer = _Watch()
    start_response = handler._start_response
    write = handler._write
    done = handler._done
    held = []

    def watched_start_response(status, headers, exc_info=None):
        watch.status = status
        watch.headers = [(name, value) for name, value in headers
                         if name.lower() != 'content-length']
        return start_response(status, headers, exc_info)

    def watched_write(data):
        if watch.size <= limit // 8:
            watch.chunks.append(data)
            watch.size += len(data)
        if held:
            write(held.pop())
        held.append(data)

    def watched_done():
        try:
            _keep(handler, watch, cache, limit)
        finally:
            if held:
                write(held.pop())
            done()

    handler._start_response = watched_start_response
    handler._write = watched_write
    handler._done = watched_done
    try:
        orig(handler)
    finally:
        del handler._start_response, handler._write, handler._done
        _watching.answer = None


#: The content type of a wire protocol error sent with a 200 (core's
#: ``ooberror``: an extension refusing a client, a command failing).
_ERROR_TYPE = pycompat.sysstr(wireprotoserver.HGERRTYPE)


def _success(watch):
    """Whether hgweb's answer was a success: a 200 that is not an error
    sent with it (an extension's refusal of one client must reach the
    next client no more than its answer to another would)."""
    if watch.status is None or not watch.status.startswith('200 '):
        return False
    return not any(name.lower() == 'content-type'
                   and value.split(';')[0].strip().lower() == _ERROR_TYPE
                   for name, value in watch.headers)


def _keep(handler, watch, cache, limit):
    cmd = _only_read(watch)
    if cmd is None:
        return
    cache_dir = _cache_dir_id(cache, make=True)
    if (watch.before is None or watch.before != watch.after
            or not _success(watch)
            or watch.size > limit // 8 or cache_dir is None
            or (cmd == b'getbundle') != (watch.getbundle is not None)):
        return
    entry = None
    if watch.getbundle is not None:
        entry = _entry_id(cache, watch.getbundle[0])
        if entry is None:
            return
    key = responsecache.make_key(watch.before + _request_parts(handler))
    _answers.put(key, _Answer(cmd, watch.status, watch.headers,
                              b''.join(watch.chunks), watch.getbundle,
                              cache_dir, entry),
                 limit)


def _runwsgi(orig, self, req, res, repo):
    # Bookmarks read by an earlier key are read again if they changed,
    # for requests never looked up too (hgweb would have read them now).
    _fresh_bookmarks(repo.unfiltered())
    watch = getattr(_watching, 'answer', None)
    if watch is None or not _may_keep(repo.ui):
        return orig(self, req, res, repo)  # never kept: no state before
    watch.before = _answer_state(repo)

    def answer():
        yield from orig(self, req, res, repo)
        watch.after = _answer_state(repo)
    return answer()


def _may_keep(ui):
    """Whether answers may be kept in memory under this configuration: no
    hook an answer from memory would not run (``listkeys`` runs for the
    discovery batch, and ``prelistkeys`` may refuse one client), and no
    Content-Security-Policy nonce, which is new in every answer."""
    return not (_runs_pull_hooks(ui)
                or b'%nonce%' in (ui.config(b'web', b'csp') or b''))


#: This module's wrappers of ``_permission_path``'s functions.
#: wirezstd's compresses SSH answers alone.
_OWN_WRAPPERS = {_do_get, _runwsgi, _dispatch, wirezstd._dispatch}


# The command -----------------------------------------------------------


@command(
    b'wirecache',
    cmdutil.formatteropts,
    _(b'hg wirecache [-T TEMPLATE]'),
    helpcategory=command.CATEGORY_MAINTENANCE,
)
def wirecache(ui, repo, **opts):
    """report what the cache of pull responses saved

    Hits are responses sent from the cache, misses responses computed and
    stored, uncached ones computed without being stored (too small, their
    writer took too long, the cache unusable, or a stored entry found
    corrupt, or too large for ``wirecache.max-size``).  Bytes saved are
    the bytes sent from the cache, and CPU seconds saved what computing
    them took the first time.  Entries are the responses the cache
    directory holds now; their size includes the markers of responses too
    small or too large to store.

    With ``wirecache.store``, entries are those of the shared store (a
    listing of it, bounded by ``wirecache.store.timeout``), and a line
    ``store:`` gives what this server's requests to it found: entries
    downloaded (store hits) or not there (store misses), failed requests
    and entries that failed their check (errors), bytes downloaded and
    uploaded.
    """
    cache = _cache(repo)
    counters = cache.counters()
    entries = cache.scan()
    shared = isinstance(cache, sharedresponsecache.SharedResponseCache)
    fm = ui.formatter(b'wirecache', pycompat.byteskwargs(opts))
    fm.startitem()
    fm.write(b'path', _(b'cache: %s\n'), pycompat.fsencode(cache.root))
    fm.data(backend=pycompat.bytestr(cache.url) if shared else b'disk')
    fm.write(b'hits misses uncached',
             _(b'responses: %d hits, %d misses, %d uncached\n'),
             int(counters['hits']), int(counters['misses']),
             int(counters['uncached']))
    fm.write(b'bytes_saved cpu_saved',
             _(b'saved: %d bytes sent from the cache, %.3f CPU seconds\n'),
             int(counters['bytes_saved']), counters['cpu_saved'])
    fm.write(b'entries size max_size', _(b'entries: %d, %d of %d bytes\n'),
             len([path for _, _, path in entries
                  if not path.endswith(responsecache.MARKER_SUFFIXES)]),
             sum(size for _, size, _ in entries),
             cache.max_size)
    if shared:
        fm.plain(_(b'store: %s\n') % pycompat.bytestr(cache.url))
        fm.write(b'store_hits store_misses store_errors',
                 _(b'store requests: %d hits, %d misses, %d errors\n'),
                 *(int(counters[name]) for name in (
                     'store_hits', 'store_misses', 'store_errors')))
        fm.write(b'store_bytes_read store_bytes_written',
                 _(b'store bytes: %d downloaded, %d uploaded\n'),
                 int(counters['store_bytes_read']),
                 int(counters['store_bytes_written']))
        if cache.scan_error:
            fm.write(b'store_error', _(b'store not listed: %s\n'),
                     pycompat.bytestr(cache.scan_error))
    fm.end()


def _serve(orig, ui, repo, *args, **opts):
    check_config(repo.ui if repo is not None else ui, repo)
    # Loaded now, before hg serve's threads: demandimport loads a module
    # at its first use, and a thread using it while another loads it
    # found it without its classes.
    for module, name in ((sharedresponsecache, 'SharedResponseCache'),
                         (responsecache, 'ResponseCache'),
                         (zstandard, 'ZstdCompressor'), (bz2, 'compress')):
        getattr(module, name)
    return orig(ui, repo, *args, **opts)


def extsetup(ui):
    _hgcompat.report_our_crashes()
    extensions.wrapcommand(commands.table, b'serve', _serve)
    extensions.wrapfunction(wireprotov1server.commands[b'getbundle'], 'func',
                            _getbundle)
    extensions.wrapfunction(wireprotoserver, '_httpresponsetype',
                            _httpresponsetype)
    extensions.wrapfunction(hgwebserver._httprequesthandler, 'do_GET',
                            _do_get)
    extensions.wrapfunction(hgweb_mod.hgweb, '_runwsgi', _runwsgi)
    extensions.wrapfunction(wireprotov1server, 'dispatch', _dispatch)
    extensions.wrapfunction(wireprotov1server.commands[b'batch'], 'func',
                            _batch)
    extensions.wrapfunction(wireprotov1server.commands[b'listkeys'], 'func',
                            _listkeys)
    # Every way core changes a configuration: setconfig and readconfig
    # end in fixconfig, configoverride restores by restoreconfig.
    for name in ('setconfig', 'fixconfig', 'restoreconfig'):
        extensions.wrapfunction(uimod.ui, name, _config_changing)
