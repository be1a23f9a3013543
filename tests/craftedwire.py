"""Crafted zstd streams and a server that sends them: what a hostile or
broken server can put on the wire, for the tests of the ``wirezstd``
client's limits.

The ``crafted_server`` fixture serves a real repository whose answers to
the pull commands are replaced by the bytes of a file (through a
server-side extension), after the compression was negotiated as usual:
over HTTP a client with ``wirezstd`` gets them as a ``wirezstd`` response
(or ``zstd`` when the server offers only that), a stock client as a
``zstd`` one; over SSH a client with ``wirezstd`` gets them framed.

``run_client`` runs the client with the whole suite enabled, under an
address-space limit, and measures its peak RSS.
"""

import struct
import sys

import pytest

import campaign
from netservers import write_ssh_wrapper

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
BLOCK_MAX = 128 * 1024
_RAW, _RLE = 0, 1


def frame_header(window_log=17, content_size=None):
    """A zstd frame header with no dictionary and no checksum; the window
    is ``2**window_log`` and ``content_size`` (when given) is declared
    in 8 bytes."""
    if content_size is None:
        descriptor, fcs = 0x00, b""
    else:
        descriptor, fcs = 0xC0, struct.pack("<Q", content_size)
    window = bytes([(window_log - 10) << 3])
    return ZSTD_MAGIC + bytes([descriptor]) + window + fcs


def _block_header(kind, size, last):
    return struct.pack("<I", (size << 3) | (kind << 1) | int(last))[:3]


def raw_block(data, last=False):
    return _block_header(_RAW, len(data), last) + data


def rle_blocks(size, byte=0, last=True):
    """RLE blocks that decode to ``size`` copies of ``byte``: 4 bytes of
    input for each 128 KiB of output."""
    out = []
    while size > 0:
        step = min(size, BLOCK_MAX)
        size -= step
        out.append(_block_header(_RLE, step, last and size == 0)
                   + bytes([byte]))
    return b"".join(out)


def bomb(size, prefix=b""):
    """One frame that decodes to ``prefix`` and then zeros, ``size`` bytes
    in all, from about ``size / 32768`` bytes."""
    return (frame_header() + raw_block(prefix)
            + rle_blocks(size - len(prefix)))


def bundle2_asking_for(piece):
    """The start of a bundle2 stream whose changegroup part announces a
    payload piece of ``piece`` bytes."""
    params = b"version" + b"02"
    part = (bytes([len(b"changegroup")]) + b"changegroup"
            + struct.pack(">I", 0) + bytes([1, 0, 7, 2]) + params)
    return (b"HG20" + struct.pack(">i", 0) + struct.pack(">i", len(part))
            + part + struct.pack(">i", piece))


def bundle2_part_unknown(piece=0):
    """The stream of a bundle2 part of an unknown mandatory type, which
    Mercurial refuses with one ``abort``, announcing a payload piece of
    ``piece`` bytes (which Mercurial reads before it refuses the part)."""
    part = bytes([4]) + b"FOOB" + struct.pack(">I", 0) + bytes([0, 0])
    return struct.pack(">i", len(part)) + part + struct.pack(">i", piece)


def zstd_bundle(stream):
    """A bundle2 file whose stream is zstd (``Compression=ZS``) and reads
    as ``stream``, a crafted zstd stream: what ``hg unbundle`` and a
    clone bundle get."""
    params = b"Compression=ZS"
    return b"HG20" + struct.pack(">i", len(params)) + params + stream


def crafted_responses():
    """Crafted responses, by name: each is (bytes, what it is)."""
    return {
        "zeros-4g": (bomb(4 << 30),
                     "131 KB that decode to 4 GiB of zeros"),
        "bundle2-2g-piece": (bomb(3 << 30, bundle2_asking_for(0x7FFFFFFF)),
                             "a bundle2 part announcing a 2 GiB piece, "
                             "then 3 GiB of zeros"),
        "window-2g": (frame_header(window_log=31) + rle_blocks(BLOCK_MAX),
                      "a frame that asks for a 2 GiB window"),
        "content-size-2e62": (frame_header(content_size=1 << 62)
                              + rle_blocks(1 << 30),
                              "a frame declaring 2**62 bytes of content"),
    }


SERVER_EXTENSION = '''\
"""Test server extension: answer the pull commands with the bytes of
the file named by crafted.response, as if a compressor had made them."""
from mercurial import extensions, util


def extsetup(ui):
    path = ui.config(b'crafted', b'response')

    def crafted(orig, *args, **kwargs):
        with open(path, 'rb') as fh:
            data = fh.read()
        return iter([data[i:i + 65536] for i in range(0, len(data), 65536)])

    # HTTP compresses through the engines, SSH through wirezstd's own
    # compress_response.
    for name in (b'wirezstd', b'zstd'):
        extensions.wrapfunction(util.compengines[name], 'compressstream',
                                crafted)
    extensions.wrapfunction(extensions.find(b'wirezstd'),
                            'compress_response', crafted)
'''

#: The extensions users enable, all at once.
SUITE = ("zstdstore", "wirezstd", "bundlegen", "sharepool", "commitid",
         "pastbytes")

#: What a client with the whole suite may hold while decoding a crafted
#: response whose pieces are small: the bound 'hg help wirezstd' states
#: (160 MiB) with room for Mercurial itself.  The address-space limit
#: leaves room for the allocator's per-thread arenas.
CLIENT_PEAK_RSS = 256 << 20
CLIENT_ADDRESS_SPACE = 1 << 30


@pytest.fixture
def crafted_server(hg, hgserve, tmp_path):
    """``crafted_server(data, *serve_args)``: a real ``hg serve`` (with
    wirezstd) of a one-changeset repository that answers the pull commands
    with ``data``, read from the file ``crafted_server.response`` at each
    request.  ``crafted_server.ssh_url`` and ``ssh_args`` reach the same
    repository and answers over SSH (through the ``ssh`` stand-in)."""
    repo = tmp_path / "served"
    hg("init", repo)
    (repo / "a").write_text("a\n")
    hg("commit", "-qAm", "a", cwd=repo)
    extension = tmp_path / "crafted.py"
    extension.write_text(SERVER_EXTENSION)
    response = tmp_path / "response"
    (repo / ".hg" / "hgrc").write_text(
        "[extensions]\nwirezstd =\ncrafted = %s\n[crafted]\nresponse = %s\n"
        % (extension, response))

    def start(data, *serve_args):
        response.write_bytes(data)
        return hgserve(repo, *serve_args)

    start.response = response
    start.ssh_url = "ssh://user@dummy/%s" % repo
    start.ssh_args = ("--config", "ui.ssh=%s" % write_ssh_wrapper(
        str(tmp_path / "ssh")), "--config", "ui.remotecmd=%s" % hg.binary)
    return start


_PEAK_RSS = '''\
import resource, subprocess, sys
proc = subprocess.run(sys.argv[2:])
with open(sys.argv[1], "w") as fh:
    fh.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(proc.returncode)
'''


def peak_rss_argv(argv, report_path):
    """``argv`` run through a wrapper that writes the command's peak RSS
    in KiB to ``report_path`` and exits with the command's status."""
    return [sys.executable, "-c", _PEAK_RSS, str(report_path), *argv]


def run_client(hg, env, args, rss, extensions=SUITE, timeout=120):
    """``hg args`` under ``CLIENT_ADDRESS_SPACE``; returns the
    CompletedProcess and the client's peak RSS in bytes (measured through
    the file ``rss``)."""
    config = [arg for name in extensions
              for arg in ("--config", "extensions.%s=" % name)]
    proc = campaign.run_bounded(
        peak_rss_argv([hg.binary, *config, *map(str, args)], rss),
        env=env, address_space=CLIENT_ADDRESS_SPACE, timeout=timeout)
    return proc, int(rss.read_text()) << 10
