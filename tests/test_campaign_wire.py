"""The adversarial campaign for what a client decodes from a peer: chunk
frames, wire streams and SSH framing as properties, and crafted
responses through the real client (the whole suite enabled) from a real
``hg serve``, each under an address-space limit and a timeout.

Properties:

- chunk frames, any bytes, and truncations or bit flips of valid frames:
  decoded to the original or one ``ZstdWireError``, never another
  exception, never more memory than the frame can stand for;
- wire streams (concatenated frames), any bytes, truncations, bit flips
  and crafted frames (huge output, huge windows, huge claimed sizes):
  decoded to the original or one ``FrameError``; reads of at most 64 KiB
  never hold more than three times a step's output (``STEP_OUTPUT_MAX``)
  besides the read;
- SSH framing of responses, any bytes: decoded or one ``abort``;
- every ``wirezstd.*`` setting, any value: refused with one abort naming
  it, or accepted within its range (checked in process, and by the real
  ``hg serve``, which refuses to start or serves a client).
"""

import re
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from mercurial import error, ui as uimod

import campaign
import craftedwire
import zstdwire
from craftedwire import crafted_server  # noqa: F401 (a fixture)
from hgext3rd import _hgconfig, wirezstd
from vcsperf.harness import servers
from zstdwire import streams

pytestmark = pytest.mark.campaign

EXAMPLES = campaign.size(150, 3000)
# The tally fixture spans every example of a property: that is the point.
PROPERTY = settings(max_examples=EXAMPLES, deadline=None,
                    derandomize=not campaign.FULL,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

READ_MAX = 64 << 10
# Python's own bookkeeping while decoding: the reader, the memoryviews,
# hypothesis' draw of the input.
SLACK = 4 << 20
# One step's output, held three times over while python-zstandard joins
# it (twice by the C backend), one read from the source, and a read
# being assembled.
STREAM_BOUND = (3 * streams.STEP_OUTPUT_MAX + streams.READ_SIZE
                + 2 * READ_MAX + SLACK)


def _peak_of(call):
    """``call()``'s result (or the exception it raised) and the peak of
    Python-allocated memory while it ran."""
    tracemalloc.start()
    try:
        try:
            result = call()
        except Exception as err:  # judged by the caller
            result = err
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# Chunk frames ----------------------------------------------------------

def _chunk_decode(frame, beside=None):
    """Decode ``frame`` alone, or after the valid frame ``beside`` through
    the many-frames path; the result and whether memory stayed within
    what the frames can stand for (128 KiB per 4 of their bytes)."""
    def call():
        decompressor = zstdwire.ChunkDecompressor()
        if beside is None:
            return decompressor.decompress(frame)
        return decompressor.decompress_many([beside, frame])[1]
    result, peak = _peak_of(call)
    size = len(frame) + len(beside or b"")
    return result, peak <= (size // 4 + 2) * (128 << 10) + SLACK


@PROPERTY
@given(st.binary(max_size=512))
def test_chunk_frame_any_bytes(tally, data):
    result, bounded = _chunk_decode(data)
    ok = bounded and (isinstance(result, (bytes, zstdwire.ZstdWireError)))
    tally.case(ok, ("chunk-any-bytes", data.hex(), repr(result)[:200]))
    tally.check()


@PROPERTY
@given(st.binary(max_size=4096), st.data())
def test_chunk_frame_truncated_or_flipped(tally, content, data):
    frame = bytearray(zstdwire.ChunkCompressor().compress(content))
    if data.draw(st.booleans()):
        damaged = bytes(frame[:data.draw(st.integers(0, len(frame) - 1))])
    else:
        position = data.draw(st.integers(0, len(frame) - 1))
        frame[position] ^= 1 << data.draw(st.integers(0, 7))
        damaged = bytes(frame)
    beside = (zstdwire.ChunkCompressor().compress(b"beside")
              if data.draw(st.booleans()) else None)
    result, bounded = _chunk_decode(damaged, beside)
    ok = bounded and (result == content
                      or isinstance(result, zstdwire.ZstdWireError))
    tally.case(ok, ("chunk-damaged", damaged.hex()[:400], repr(result)[:200]))
    tally.check()


# Wire streams ----------------------------------------------------------


class _Pieces:
    """A source that hands out ``data`` in pieces of the given sizes."""

    def __init__(self, data, sizes):
        self._data = memoryview(data)
        self._sizes = list(sizes) or [len(data) or 1]
        self._turn = 0

    def read(self, size):
        step = min(size, self._sizes[self._turn % len(self._sizes)])
        self._turn += 1
        out, self._data = bytes(self._data[:step]), self._data[step:]
        return out


def _stream_decode(data, read_sizes, source_sizes=()):
    """Decode ``data`` in reads of ``read_sizes`` (cycled); the result and
    whether memory stayed within the bound."""
    def call():
        reader = zstdwire.StreamReader(_Pieces(data, source_sizes))
        out, turn = [], 0
        while True:
            piece = reader.read(read_sizes[turn % len(read_sizes)])
            turn += 1
            if not piece:
                return b"".join(out)
            out.append(piece)
    # The decoded output is kept, so it counts once on top of the bound.
    result, peak = _peak_of(call)
    kept = len(result) if isinstance(result, bytes) else 0
    return result, peak <= STREAM_BOUND + 2 * kept


_read_sizes = st.lists(st.integers(1, READ_MAX), min_size=1, max_size=4)
_source_sizes = st.lists(st.integers(1, 200000), max_size=4)


@PROPERTY
@given(st.binary(max_size=2048), _read_sizes, _source_sizes)
def test_wire_stream_any_bytes(tally, data, reads, sources):
    result, bounded = _stream_decode(data, reads, sources)
    ok = bounded and isinstance(result, (bytes, zstdwire.FrameError))
    tally.case(ok, ("wire-any-bytes", data.hex(), repr(result)[:200]))
    tally.check()


def _frames(parts):
    return [b"".join(zstdwire.StreamCompressor(level).compress_chunks(
        [content])) for content, level in parts]


_parts = st.lists(st.tuples(st.binary(max_size=20000), st.integers(1, 9)),
                  min_size=1, max_size=3)


@PROPERTY
@given(_parts, _read_sizes, _source_sizes, st.data())
def test_wire_stream_truncated_or_flipped(tally, parts, reads, sources,
                                          data):
    frames = _frames(parts)
    stream = bytearray(b"".join(frames))
    contents = [content for content, _level in parts]
    if data.draw(st.booleans()):
        cut = data.draw(st.integers(0, len(stream) - 1))
        damaged = bytes(stream[:cut])
        # A cut between frames leaves whole frames: their content.
        ends = [sum(map(len, frames[:k])) for k in range(len(frames))]
        expected = (b"".join(contents[:ends.index(cut)]) if cut in ends
                    else zstdwire.StreamTruncated)
    else:
        position = data.draw(st.integers(0, len(stream) - 1))
        stream[position] ^= 1 << data.draw(st.integers(0, 7))
        damaged, expected = bytes(stream), zstdwire.FrameError
    result, bounded = _stream_decode(damaged, reads, sources)
    if isinstance(expected, bytes):
        right = result == expected
    else:
        right = result == b"".join(contents) or isinstance(result, expected)
    tally.case(bounded and right,
               ("wire-damaged", damaged.hex()[:400], repr(result)[:200]))
    tally.check()


@st.composite
def _crafted_frames(draw):
    """Frames a hostile peer could send: big outputs from few bytes,
    windows up to 2**31, claimed sizes that lie, trailing garbage."""
    # Windows a reader accepts (a 128 KiB block needs 2**17), and any.
    window_log = draw(st.one_of(st.integers(17, 27), st.integers(10, 31)))
    # Small outputs, and outputs well above what one step may hold.
    output = draw(st.one_of(st.integers(0, 1 << 20),
                            st.integers(2 * STREAM_BOUND, 3 * STREAM_BOUND)))
    prefix = draw(st.binary(max_size=64))
    claimed = draw(st.one_of(st.none(), st.just(output + len(prefix)),
                             st.integers(0, 1 << 62)))
    frame = (craftedwire.frame_header(window_log, claimed)
             + craftedwire.raw_block(prefix)
             + craftedwire.rle_blocks(output, draw(st.integers(0, 255))))
    return frame + draw(st.binary(max_size=8))


@settings(PROPERTY, max_examples=campaign.size(25, 400))
@given(_crafted_frames(), st.lists(st.integers(16 << 10, READ_MAX),
                                   min_size=1, max_size=4))
def test_wire_stream_crafted_frames_stay_within_the_bound(tally, frame,
                                                          reads):
    def call():
        reader = zstdwire.StreamReader(_Pieces(frame, ()))
        total, turn = 0, 0
        while True:
            piece = reader.read(reads[turn % len(reads)])
            turn += 1
            if not piece:
                return total
            total += len(piece)
    result, peak = _peak_of(call)
    ok = (peak <= STREAM_BOUND
          and isinstance(result, (int, zstdwire.FrameError)))
    tally.case(ok, ("wire-crafted", frame[:32].hex(), len(frame),
                    repr(result)[:200], peak))
    tally.check()


class _Pipe:
    """What the SSH peer reads a response from: ``read`` and
    ``readline``."""

    def __init__(self, data):
        self._data = data

    def read(self, size):
        out, self._data = self._data[:size], self._data[size:]
        return out

    def readline(self):
        end = self._data.find(b"\n") + 1 or len(self._data)
        return self.read(end)


@PROPERTY
@given(st.one_of(
    st.binary(max_size=300),
    st.builds(lambda body, head: head + body,
              st.binary(max_size=300),
              st.sampled_from([b"12\n", b"-5\n", b"0\n", b"99999999999\n",
                               b"007\n", b" 3\n", b"1_0\n"]))),
    _read_sizes)
def test_ssh_framing_any_bytes(tally, data, reads):
    reader = wirezstd._response_reader(wirezstd._SSHFrames(_Pipe(data)))
    try:
        turn = 0
        while reader.read(reads[turn % len(reads)]):
            turn += 1
        ok = True
    except error.Abort:
        ok = True
    except Exception:
        ok = False
    tally.case(ok, ("ssh-framing", data.hex()))
    tally.check()


# Crafted responses through the real client ---------------------------


def _crafted_response(rng, unbundle):
    """A crafted zstd stream drawn from ``rng``, and what it is.  What it
    decodes to starts with a bundle2 header that Mercurial refuses at once
    (or with garbage, on the wire): the limits under test are the
    decoder's, not the bundle2 parser's."""
    if unbundle:
        prefix = craftedwire.bundle2_part_unknown()
    else:
        prefix = rng.choice([b"", rng.randbytes(40),
                             b"HG20" + bytes(4)
                             + craftedwire.bundle2_part_unknown()])
    kind = rng.choice(["bomb", "window", "claimed", "garbage"]
                      + ([] if unbundle else ["piece"]))
    if kind == "bomb":
        size = rng.randrange(64 << 20, 8 << 30)
        return craftedwire.bomb(size, prefix), (
            "%d bytes of zeros after %r" % (size, prefix))
    if kind == "window":
        log = rng.randrange(28, 32)
        return (craftedwire.frame_header(window_log=log)
                + craftedwire.rle_blocks(1 << 20)), "a window of 2**%d" % log
    if kind == "claimed":
        claimed = rng.randrange(1 << 62)
        return (craftedwire.frame_header(content_size=claimed)
                + craftedwire.raw_block(prefix)
                + craftedwire.rle_blocks(rng.randrange(1 << 30))), (
            "a claimed size of %d after %r" % (claimed, prefix))
    if kind == "garbage":
        data = rng.randbytes(rng.randrange(1, 100000))
        if rng.random() < 0.5:
            data = craftedwire.ZSTD_MAGIC + data
        return data, "%d bytes of garbage" % len(data)
    # A piece of a size Mercurial asks the reader for at once.
    piece = rng.randrange(1, 32 << 20)
    return (craftedwire.bomb(piece + (64 << 20), b"HG20" + bytes(4)
                             + craftedwire.bundle2_part_unknown(piece)),
            "a bundle2 piece of %d bytes" % piece)


@pytest.mark.slow
def test_crafted_responses_through_the_real_client(crafted_server, hg, env,  # noqa: F811 (a fixture)
                                                   hgrepo, tmp_path, tally):
    """Over HTTP (the server naming wirezstd or core's zstd), over SSH,
    and as a zstd bundle given to ``hg unbundle``: one clean abort within
    the memory bound, and nothing written."""
    urls = {engine: crafted_server(b"", "--config",
                                   "server.compressionengines=%s" % engine).url
            for engine in ("wirezstd", "zstd")}
    bundle = tmp_path / "crafted.hg"
    cases = campaign.size(6, 120)
    print("crafted responses: %d cases" % cases)
    for number in range(cases):
        way = tally.rng.choice(["http-wirezstd", "http-zstd", "ssh",
                                "unbundle"])
        data, what = _crafted_response(tally.rng, way == "unbundle")
        crafted_server.response.write_bytes(data)
        dest = tmp_path / ("clone-%d" % number)
        if way == "ssh":
            args = [*crafted_server.ssh_args, "clone", "-U",
                    crafted_server.ssh_url, dest]
        elif way == "unbundle":
            bundle.write_bytes(craftedwire.zstd_bundle(data))
            args = ["unbundle", "-R", hgrepo, bundle]
        else:
            args = ["clone", "-U", urls[way.split("-")[1]], dest]
        proc, peak = craftedwire.run_client(hg, env, args, tmp_path / "rss")
        ok = (campaign.is_clean_abort(proc) and not dest.exists()
              and "out of memory" not in proc.stderr
              and peak < craftedwire.CLIENT_PEAK_RSS)
        tally.case(ok, (way, what, peak >> 20, proc.stderr[-300:]))
    hg("verify", "-q", "-R", hgrepo)
    assert hg("log", "-R", hgrepo, "-T", "x") == ""
    tally.check()


# Server settings ---------------------------------------------------------

#: Each ``wirezstd.*`` setting: (its kind, the range it may hold).
SETTINGS = {
    "level": ("int", (1, 22)),
    "small-response-level": ("int", (1, 22)),
    "threads": ("int", (0, 64)),
    "small-response": ("bytes", (0, 64 << 20)),
    "long-distance": ("bool", None),
    "ssh": ("bool", None),
    "bundle-long-distance": ("bool", None),
}
VALID = {"level": "7", "small-response-level": "12", "threads": "0",
         "small-response": "256k", "long-distance": "yes", "ssh": "yes",
         "bundle-long-distance": "yes"}
BOOLEANS = {"1": True, "yes": True, "true": True, "on": True,
            "always": True, "0": False, "no": False, "false": False,
            "off": False, "never": False}


def setting_value(rng):
    """A value an hgrc line can hold: numbers in and around every range,
    sizes with suffixes, words, comments after a value, other digits."""
    kind = rng.randrange(8)
    if kind == 0:
        return str(rng.randrange(-100, 100))
    if kind == 1:
        return str(rng.choice([-1, 1]) * rng.randrange(10 ** rng.randrange(1,
                                                                        40)))
    if kind == 2:
        return "%s%s" % (rng.choice(["", "-", "1.5", "0.", "64", "65", "3"]),
                         rng.choice(["k", "m", "g", "kb", "mb", "b", "t", ""]))
    if kind == 3:
        return rng.choice(list(BOOLEANS) + ["maybe", "Yes", "TRUE", "2",
                                            "", "nope"])
    if kind == 4:
        return "%s  # %s" % (rng.choice(list(VALID.values())),
                             rng.choice(["comment", "level", "#"]))
    if kind == 5:
        return rng.choice(["\u0663", "\u00b2", "7\u200b", "0x10", "1e3",
                           "1_000", "+5", "nan", "inf", "--"])
    if kind == 6:
        return "".join(rng.choice("0123456789kmgbyesno-+. _#;")
                       for _ in range(rng.randrange(1, 12)))
    return "".join(chr(rng.randrange(33, 0x3000))
                   for _ in range(rng.randrange(1, 8)))


def expected(name, value):
    """What a correct check makes of ``value``: the number or boolean,
    None for a value it must refuse, or ``...`` where the campaign only
    requires an in-range answer or a refusal (sizes: Mercurial's own
    size syntax decides)."""
    kind, limits = SETTINGS[name]
    text = value.strip()
    if kind == "bool":
        return BOOLEANS.get(text.lower())
    if kind == "int":
        if not re.fullmatch(r"[+-]?[0-9]+", text, re.ASCII):
            return None
        number = int(text)
        return number if limits[0] <= number <= limits[1] else None
    if re.fullmatch(r"[0-9]+", text):
        return int(text) if limits[0] <= int(text) <= limits[1] else None
    return ...


def check_in_process(settings_given):
    """``wirezstd.check_config`` and ``stream_options`` on a real ui
    holding ``settings_given``: the options, or the Abort."""
    ui = uimod.ui()
    for name, value in settings_given.items():
        ui.setconfig(b"wirezstd", name.encode(), value.encode("utf-8"),
                     b"campaign")
    try:
        wirezstd.check_config(ui)
        return wirezstd.stream_options(ui), {
            name: _hgconfig.config_bool(ui, b"wirezstd", name.encode())
            for name in ("ssh", "bundle-long-distance")}
    except error.Abort as err:
        return err


def judge(name, value, outcome):
    """True when ``outcome`` (of ``check_in_process`` with ``name`` set
    to ``value``, the others valid) is what the settings promise."""
    want = expected(name, value)
    if isinstance(outcome, error.Abort):
        message = bytes(outcome.message)
        return (want is None or want is ...) and message.startswith(
            b"wirezstd.%s must be " % name.encode()) and bool(outcome.hint)
    options, flags = outcome
    got = {**{k.decode(): v for k, v in options.items()}, **flags}[name]
    kind, limits = SETTINGS[name]
    if want is ...:
        return limits[0] <= got <= limits[1]
    return want is not None and got == want


def test_any_setting_value_is_refused_or_in_range(tally):
    """Every ``wirezstd.*`` setting given any value: one Abort naming it
    (with a hint), or accepted and within its range; never another
    exception."""
    cases = campaign.size(2000, 100000)
    for _ in range(cases):
        name = tally.rng.choice(sorted(SETTINGS))
        value = setting_value(tally.rng)
        try:
            outcome = check_in_process({**VALID, name: value})
            ok = judge(name, value, outcome)
        except Exception as err:  # any other exception is the failure
            outcome, ok = err, False
        tally.case(ok, (name, value, repr(outcome)[:200]))
    tally.check()


@pytest.mark.slow
def test_hg_serve_refuses_or_serves_any_setting_value(tally, hg, hgrc,
                                                      hgrepo, tmp_path):
    """The real ``hg serve`` given a random ``wirezstd.*`` line in its
    hgrc: one ``abort:`` line naming the setting before it listens, or
    it serves a client with the extension."""
    (hgrepo / "f").write_text("content\n" * 100)
    hg("commit", "-A", "-q", "-m", "one", cwd=hgrepo)
    base = hgrc.read_text()
    for number in range(campaign.size(4, 60)):
        name = tally.rng.choice(sorted(SETTINGS))
        value = setting_value(tally.rng).replace("\n", " ")
        hgrc.write_text(base + "[extensions]\nwirezstd =\n[wirezstd]\n"
                        "%s = %s\n" % (name, value))
        if isinstance(check_in_process({name: value, **{
                k: v for k, v in VALID.items() if k != name}}), error.Abort):
            proc = campaign.run_bounded(
                [hg.binary, "serve", "-R", str(hgrepo), "-p", "0", "-a",
                 "127.0.0.1"], env=hg.env, timeout=60)
            ok = (campaign.is_clean_abort(proc) and proc.stderr.startswith(
                "abort: wirezstd.%s must be " % name))
            tally.case(ok, (name, value, proc.stderr[-300:]))
            continue
        dest = tmp_path / ("clone-%d" % number)
        with servers.HgServer(hg.env, str(hgrepo)) as server:
            proc = hg.proc("clone", "-U", server.url, dest)
        tally.case(proc.returncode == 0, (name, value, proc.stderr[-300:]))
    tally.check()
