# wirezstd.py - zstd with long-distance matching on the wire and in bundles
#
# This software may be used and distributed according to the terms of the
# GNU General Public License version 2 or any later version.
"""zstd with long-distance matching for pulls, clones and bundles

Core Mercurial compresses wire responses with zstd level 3 over HTTP only,
and bundles without long-distance matching.  This extension adds the wire
compression engine ``wirezstd``: zstd with a configurable level, worker
threads and long-distance matching over a 128 MiB window (2^27 bytes, the
most a stock zstd reader accepts).  On both ends it is negotiated through
Mercurial's own ``compression=`` capability, so:

- a server and a client that both have the extension use ``wirezstd``;
- a stock client of such a server gets core zstd or zlib, byte for byte
  what it got before; a client with the extension talking to a stock server
  gets what any client gets.

Over SSH, where core Mercurial compresses nothing, a client with the
extension asks for compression in the ``protocaps`` exchange and a server
with it answers; pull responses then travel as length-framed zstd.  A stock
peer on either side never sends or receives anything new.

Small responses (a pull of a few changesets) are compressed in one shot at
``wirezstd.small-response-level`` with a window fitted to the data: for
them the big window's tables cost more time than the whole compression,
and a higher level costs next to nothing.

Server configuration::

  [extensions]
  wirezstd =

  [wirezstd]
  # responses above small-response: 1 to 22
  level = 7
  # zstd worker threads per response: 0 (none) to 64
  threads = 0
  # long-distance matching, 2^27 window
  long-distance = yes
  # up to this size (0 to 64m): one shot ...
  small-response = 256k
  # ... at this level: 1 to 22
  small-response-level = 12
  # compress over SSH when the peer can
  ssh = yes

Each setting is checked when ``hg serve`` starts (and ``hg bundle``
reads ``bundle-long-distance``): a value outside the ranges above, or not
a number, a size or a boolean, stops it with one error naming the setting.

The defaults were measured on full pulls of real repositories (see
BENCHMARKS.md): level 7 with long-distance matching sends 0.63 to 0.93 of
core zstd's bytes, for 1.07 to 1.2 times core's server CPU on a full pull;
level 9 saves 1% more bytes for 30% more compression time.

Clients only need the extension enabled.  ``server.compressionengines``
still decides what a server offers, in order (engine name ``wirezstd``).

Bundles: with the extension, ``hg bundle -t zstd-v2`` writes its zstd frame
with long-distance matching (``wirezstd.bundle-long-distance``); level and
threads come from core's ``experimental.bundlecomplevel.zstd`` and
``experimental.bundlecompthreads.zstd``.  The result is a plain
``zstd-v2`` bundle that any Mercurial with zstd applies.

A response cut short (a server that died, a dropped connection) stops the
pull with an error and the transaction is rolled back: the repository is
as it was before the pull.

Limits on what a client decodes: a client with the extension decodes
every zstd stream it reads (``wirezstd`` and core ``zstd`` responses over
HTTP and SSH, ``zstd-v2`` bundles, clone bundles) in steps of 256 bytes
of input, each yielding at most 8 MiB (a zstd block of 4 bytes can stand
for 128 KiB), held at most three times over while it is decoded, with a
window of at most 128 MiB (2^27 bytes: every writer in Mercurial and in
this extension stays within it, and stock readers refuse more).  So
decoding holds at most 152 MiB besides what Mercurial asks for at once,
which a bundle2 stream states itself (up to 2 GiB per piece, as for a
stock client, which also decodes up to 2 GiB from each 64 KiB it reads).
A stream that needs a larger window, is corrupt, or frames its SSH
response wrongly stops the pull with one error; nothing is applied.  The
limits are fixed: no legitimate stream comes near them.
"""

import itertools
import re

import zstandard
from mercurial import (
    bundle2,
    commands,
    error,
    extensions,
    registrar,
    sshpeer,
    util,
    wireprotoserver,
    wireprototypes,
    wireprotov1server,
)
from mercurial.i18n import _
from mercurial.utils import compression, stringutil

from hgext3rd import _hgcompat, _hgconfig
from zstdwire import errors as zerrors, streams

testedwith = _hgcompat.TESTEDWITH
minimumhgversion = _hgcompat.MINIMUM_HG
__version__ = _hgcompat.VERSION
buglink = _hgcompat.BUGLINK

configtable = {}
configitem = registrar.configitem(configtable)

# Compression options, by the name of their config item; an engine is
# global while configuration belongs to a ui, so callers pass them along.
_OPT_LEVEL = b'level'
_OPT_THREADS = b'threads'
_OPT_LONG = b'long-distance'
_OPT_SMALL = b'small-response'
_OPT_SMALL_LEVEL = b'small-response-level'

DEFAULT_OPTIONS = {
    _OPT_LEVEL: 7,
    _OPT_THREADS: 0,
    _OPT_LONG: True,
    _OPT_SMALL: 256 * 1024,
    _OPT_SMALL_LEVEL: 12,
}

for _name, _default in DEFAULT_OPTIONS.items():
    configitem(b'wirezstd', _name, default=_default)
configitem(b'wirezstd', b'ssh', default=True)
configitem(b'wirezstd', b'bundle-long-distance', default=True)

#: The engine's name in ``server.compressionengines`` and on the wire.
ENGINE = b'wirezstd'

#: Commands whose SSH responses a client reads through
#: ``_callcompressable``; only these are compressed over SSH.
_SSH_COMPRESSED_COMMANDS = {b'getbundle', b'changegroup',
                            b'changegroupsubset'}

#: An SSH frame header: a length of at most 10 digits, no leading zero.
_SSH_FRAME_HEADER = re.compile(br'(0|[1-9][0-9]{0,9})\n')
_SSH_FRAME_HEADER_MAX = 11


#: Allowed values of the numeric settings, as the help states them.
_LEVELS = (1, zstandard.MAX_COMPRESSION_LEVEL)
#: Each zstd worker holds buffers of a few windows (2^27 bytes each with
#: long-distance matching), per response being sent.
_THREADS = (0, 64)
#: A response up to this size is held whole before it is compressed.
_SMALL_RESPONSE = (0, 64 * 1024 * 1024)


def stream_options(ui):
    """Compression options from ``ui``'s ``[wirezstd]`` section; a bad
    value aborts naming the setting and what it may be."""
    return {
        _OPT_LEVEL: _hgconfig.config_int(ui, b'wirezstd', _OPT_LEVEL,
                                         *_LEVELS),
        _OPT_THREADS: _hgconfig.config_int(ui, b'wirezstd', _OPT_THREADS,
                                           *_THREADS),
        _OPT_LONG: _hgconfig.config_bool(ui, b'wirezstd', _OPT_LONG),
        _OPT_SMALL: _hgconfig.config_bytes(ui, b'wirezstd', _OPT_SMALL,
                                           *_SMALL_RESPONSE),
        _OPT_SMALL_LEVEL: _hgconfig.config_int(
            ui, b'wirezstd', _OPT_SMALL_LEVEL, *_LEVELS),
    }


def check_config(ui):
    """Read every ``wirezstd.*`` setting once, so that a bad one stops the
    command that would serve with it before it starts."""
    stream_options(ui)
    _hgconfig.config_bool(ui, b'wirezstd', b'ssh')
    _hgconfig.config_bool(ui, b'wirezstd', b'bundle-long-distance')


def compress_response(chunks, opts):
    """Yield one zstd frame for ``chunks``, at a level chosen by size.

    Up to ``opts[small-response]`` bytes are buffered; a response that ends
    within them is compressed in one shot at the small-response level, with
    parameters fitted to its size.  A longer one is streamed at the main
    level, with threads and long-distance matching.
    """
    chunks = iter(chunks)
    head, size = [], 0
    for chunk in chunks:
        head.append(chunk)
        size += len(chunk)
        if size > opts[_OPT_SMALL]:
            break
    else:
        cctx = zstandard.ZstdCompressor(level=opts[_OPT_SMALL_LEVEL],
                                        write_checksum=True)
        yield cctx.compress(b''.join(head))
        return
    compressor = streams.StreamCompressor(
        level=opts[_OPT_LEVEL], threads=opts[_OPT_THREADS],
        long_distance=opts[_OPT_LONG])
    yield from compressor.compress_chunks(itertools.chain(head, chunks))


class _BoundedReader:
    """Decodes zstd from a peer or a bundle within the limits stated in
    the help; a cut, corrupt or over-limit stream becomes one ``abort``.
    ``what`` names the data in messages; ``cut_hint`` is the hint for a
    stream cut short."""

    def __init__(self, source, what, cut_hint):
        self._reader = streams.StreamReader(source)
        self._what = what
        self._cut_hint = cut_hint

    def read(self, size=-1):
        try:
            return self._reader.read(size)
        except zerrors.StreamTruncated as err:
            # Core's words first: scripts and robustcheckout retry on
            # "stream ended unexpectedly".
            raise error.Abort(
                _(b'stream ended unexpectedly (%s is incomplete: %s)')
                % (self._what, stringutil.forcebytestr(str(err))),
                hint=self._cut_hint)
        except zerrors.FrameError as err:
            raise error.Abort(
                _(b'%s is unusable: %s')
                % (self._what, stringutil.forcebytestr(str(err))),
                hint=_(b"nothing was applied; 'hg help wirezstd' states "
                       b"what a client decodes"))


def _response_reader(source):
    return _BoundedReader(
        source, _(b'compressed response from the server'),
        _(b'the connection was cut or the server died; nothing was '
          b'applied, pull again'))


def _zstd_decompressorreader(orig, fh, *args, **kwargs):
    # Core's reader decodes each 64 KiB it reads at once: up to 2 GiB.
    return _BoundedReader(
        fh, _(b'zstd stream'),
        _(b'the download or the bundle was cut short; nothing was applied'))


class _WireZstdEngine(compression.compressionengine):
    def name(self):
        return ENGINE

    def available(self):
        return True

    def bundletype(self):
        # Bundles stay core ``zstd-v2`` so that stock clients apply them;
        # see _bundle_compressstream.
        return None

    def wireprotosupport(self):
        # Above core zstd (50) on both sides: peers that both have it
        # prefer it, and a stock peer never sees its name.
        return compression.compewireprotosupport(ENGINE, 60, 60)

    def revlogheader(self):
        return None

    def compressstream(self, it, opts=None):
        return compress_response(it, {**DEFAULT_OPTIONS, **(opts or {})})

    def decompressorreader(self, fh):
        return _response_reader(fh)


# HTTP ------------------------------------------------------------------


def _httpresponsetype(orig, ui, proto, *args, **kwargs):
    mediatype, engine, opts = orig(ui, proto, *args, **kwargs)
    if engine.name() == ENGINE:
        opts = stream_options(ui)
    return mediatype, engine, opts


# SSH -------------------------------------------------------------------
#
# After the handshake a client sends ``protocaps`` with ``comp=`` listing
# the wire engines it decodes.  A server with this extension that finds
# ``wirezstd`` there answers ``OK wirezstd`` instead of ``OK``; from then
# on its responses to the pull commands are zstd cut into frames of
# ``<length>\n<bytes>``, ended by ``0\n``, so the client knows where each
# response ends without reading past it.


def _client_engines(caps):
    for cap in caps.split(b' '):
        if cap.startswith(b'comp='):
            return cap[len(b'comp='):].split(b',')
    return []


def _ssh_offered(ui):
    engines = wireprototypes.supportedcompengines(ui, util.SERVERROLE)
    return (_hgconfig.config_bool(ui, b'wirezstd', b'ssh')
            and any(e.name() == ENGINE for e in engines))


def _protocaps(orig, repo, proto, caps, *args, **kwargs):
    rsp = orig(repo, proto, caps, *args, **kwargs)
    if (proto.name == wireprototypes.SSHV1 and _ssh_offered(repo.ui)
            and ENGINE in _client_engines(caps)):
        proto.wirezstd = stream_options(repo.ui)
        return wireprototypes.bytesresponse(b'OK ' + ENGINE)
    return rsp


def _ssh_frames(chunks):
    for chunk in chunks:
        if chunk:
            yield b'%d\n%s' % (len(chunk), chunk)
    yield b'0\n'


def ssh_options(proto):
    """The compression options of an SSH connection whose client asked for
    ``wirezstd`` responses, or None (stock client, HTTP, extension off)."""
    return getattr(proto, 'wirezstd', None)


def ssh_encode(chunks, opts):
    """A pull response as this extension sends it over SSH: compressed
    with ``opts`` and framed."""
    return _ssh_frames(compress_response(chunks, opts))


def _dispatch(orig, repo, proto, command, *args, **kwargs):
    rsp = orig(repo, proto, command, *args, **kwargs)
    opts = ssh_options(proto)
    if (opts is not None and command in _SSH_COMPRESSED_COMMANDS
            and isinstance(rsp, wireprototypes.streamres)):
        rsp.gen = ssh_encode(rsp.gen, opts)
    return rsp


class _SSHFrames:
    """Reads the payloads of one framed SSH response, never more than a
    read asks for, whatever length a frame header claims."""

    def __init__(self, pipe):
        self._pipe = pipe
        self._left = 0  # bytes of the current frame not read yet
        self._done = False
        self._started = False

    def _frame_length(self):
        # A line, as core reads the length of every SSH response: reading
        # byte by byte cost one pipe call per byte, and frames are small.
        header = self._pipe.readline()
        if not header and not self._started:
            # No response at all (the server refused and said why on
            # stderr): an empty one, which the caller reports as core does.
            return 0
        if not header.endswith(b'\n'):
            raise zerrors.StreamTruncated(
                'ssh response ended before its last frame')
        if not _SSH_FRAME_HEADER.fullmatch(header):
            raise zerrors.FrameError('ssh response frame header %r'
                                     % header[:_SSH_FRAME_HEADER_MAX])
        self._started = True
        return int(header)

    def read(self, size):
        if self._done:
            return b''
        if not self._left:
            self._left = self._frame_length()
            if not self._left:
                self._done = True
                return b''
        data = self._pipe.read(min(size, self._left))
        if not data:
            raise zerrors.StreamTruncated('ssh response ended inside a frame')
        self._left -= len(data)
        return data


def _peer_call(orig, self, cmd, **args):
    if cmd != b'protocaps':
        return orig(self, cmd, **args)
    if not _hgconfig.config_bool(self.ui, b'wirezstd', b'ssh'):
        args['caps'] = b' '.join(
            b'comp=' + b','.join(e for e in _client_engines(cap) if e != ENGINE)
            if cap.startswith(b'comp=') else cap
            for cap in args['caps'].split(b' '))
    rsp = orig(self, cmd, **args)
    self.wirezstd = rsp == b'OK ' + ENGINE
    if self.wirezstd:
        self.ui.debug(b'wirezstd: server compresses ssh responses\n')
    return rsp


def _peer_callcompressable(orig, self, cmd, **args):
    pipe = orig(self, cmd, **args)
    if getattr(self, 'wirezstd', False):
        return _response_reader(_SSHFrames(pipe))
    return pipe


# Bundles ---------------------------------------------------------------


def _writenewbundle(orig, ui, repo, source, filename, bundletype, outgoing,
                    opts, vfs=None, compression=None, compopts=None,
                    *args, **kwargs):
    # Strip backups, amend and rebase pass keywords of their own
    # (``allow_internal`` in 7.x): everything but the options goes through.
    if compression == b'ZS' and _hgconfig.config_bool(
            ui, b'wirezstd', b'bundle-long-distance'):
        compopts = dict(compopts or {})
        compopts[_OPT_LONG] = True
    return orig(ui, repo, source, filename, bundletype, outgoing, opts,
                vfs, compression, compopts, *args, **kwargs)


def _bundle_compressstream(orig, it, opts=None, *args, **kwargs):
    if not (opts and opts.get(_OPT_LONG)):
        return orig(it, opts, *args, **kwargs)
    compressor = streams.StreamCompressor(
        level=opts.get(_OPT_LEVEL, 3), threads=opts.get(_OPT_THREADS, 0),
        long_distance=True)
    return compressor.compress_chunks(it)


def _serve(orig, ui, repo, *args, **opts):
    # Checked before the server starts: read first per response, a bad
    # setting failed every request, with the reason only in the server's
    # log.  ``--web-conf`` serves several repositories: their own hgrc is
    # read per request.
    check_config(repo.ui if repo is not None else ui)
    return orig(ui, repo, *args, **opts)


def extsetup(ui):
    _hgcompat.report_our_crashes()
    extensions.wrapcommand(commands.table, b'serve', _serve)
    if ENGINE not in util.compengines:
        util.compengines.register(_WireZstdEngine())
    extensions.wrapfunction(util.compengines[b'zstd'], 'compressstream',
                            _bundle_compressstream)
    extensions.wrapfunction(util.compengines[b'zstd'], 'decompressorreader',
                            _zstd_decompressorreader)
    extensions.wrapfunction(bundle2, 'writenewbundle', _writenewbundle)
    extensions.wrapfunction(wireprotoserver, '_httpresponsetype',
                            _httpresponsetype)
    extensions.wrapfunction(wireprotov1server, 'dispatch', _dispatch)
    extensions.wrapfunction(wireprotov1server.commands[b'protocaps'], 'func',
                            _protocaps)
    extensions.wrapfunction(sshpeer.sshv1peer, '_call', _peer_call)
    extensions.wrapfunction(sshpeer.sshv1peer, '_callcompressable',
                            _peer_callcompressable)
