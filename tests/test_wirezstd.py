"""wirezstd: every mix of stock and extended client and server, over real
``hg serve`` (behind a recording proxy) and over SSH (through an ``ssh``
stand-in), on the real-content repository; cut responses; bundles that a
stock Mercurial applies."""

import os

import pytest
import zstandard
from hypothesis import given, settings, strategies as st

import campaign
import craftedwire
from craftedwire import crafted_server  # noqa: F401 (a fixture)
from hgext3rd import wirezstd
from netservers import write_ssh_wrapper

EXT = ("--config", "extensions.wirezstd=")
MIXES = [(client, server) for client in (False, True)
         for server in (False, True)]


def _mix_id(mix):
    return "%s-client-%s-server" % tuple("ext" if m else "stock" for m in mix)


def _serve_config(repo, enabled):
    hgrc = os.path.join(repo, ".hg", "hgrc")
    with open(hgrc, "w") as fh:
        if enabled:
            fh.write("[extensions]\nwirezstd =\n")


@pytest.fixture
def ssh(tmp_path, hg, env):
    """``ssh(client_ext, *args)`` runs hg with the ssh stand-in; the
    returned record file holds what the server sent."""
    wrapper = write_ssh_wrapper(str(tmp_path / "ssh"))
    record = tmp_path / "ssh-record"

    def run(client_ext, *args, cut=None, check=True):
        env.pop("VCSPERF_SSH_CUT", None)
        env["VCSPERF_SSH_RECORD"] = str(record)
        if cut is not None:
            env["VCSPERF_SSH_CUT"] = str(cut)
        config = ("--config", "ui.ssh=%s" % wrapper,
                  "--config", "ui.remotecmd=%s" % hg.binary)
        full = config + (EXT if client_ext else ()) + args
        if check:
            return hg(*full)
        return hg.proc(*full)

    run.record = record
    return run


def _getbundle_engine(body):
    """The engine name a ``application/mercurial-0.2`` response names."""
    length = body[0]
    return body[1:1 + length]


# The quick lane keeps the mix where both sides have the extension.
@pytest.mark.parametrize("mix", [
    pytest.param(mix, marks=() if all(mix) else pytest.mark.slow)
    for mix in MIXES], ids=_mix_id)
def test_http_every_mix_of_client_and_server(mix, real_hg_repo, hg, hgserve,
                                             proxy, tmp_path):
    client_ext, server_ext = mix
    _serve_config(real_hg_repo, server_ext)
    recorder = proxy(hgserve(real_hg_repo).url)
    dest = tmp_path / "clone"
    hg("clone", "-U", *(EXT if client_ext else ()), recorder.url, dest)
    hg("verify", "-q", "-R", dest)
    assert (hg("log", "-R", dest, "-r", "tip", "-T", "{node}")
            == hg("log", "-R", real_hg_repo, "-r", "tip", "-T", "{node}"))

    [body] = recorder.bodies("cmd=getbundle")
    expected = b"wirezstd" if all(mix) else b"zstd"
    assert _getbundle_engine(body) == expected

    if not client_ext:
        # A stock client gets exactly what a stock server sends it.
        _serve_config(real_hg_repo, False)
        stock = proxy(hgserve(real_hg_repo).url)
        hg("clone", "-U", stock.url, tmp_path / "stock-clone")
        assert stock.bodies("cmd=getbundle") == [body]


@pytest.mark.slow
def test_http_wirezstd_is_smaller_and_server_config_is_obeyed(
        real_hg_repo, hg, hgserve, proxy, tmp_path):
    _serve_config(real_hg_repo, True)
    recorder = proxy(hgserve(real_hg_repo).url)
    hg("clone", "-U", *EXT, recorder.url, tmp_path / "ours")
    restricted = proxy(hgserve(real_hg_repo, "--config",
                               "server.compressionengines=zstd").url)
    hg("clone", "-U", *EXT, restricted.url, tmp_path / "core")
    [ours] = recorder.bodies("cmd=getbundle")
    [core] = restricted.bodies("cmd=getbundle")
    assert _getbundle_engine(core) == b"zstd"
    assert len(ours) < 0.95 * len(core)


@pytest.mark.slow
@pytest.mark.parametrize("mix", MIXES, ids=_mix_id)
def test_ssh_every_mix_of_client_and_server(mix, real_hg_repo, hg, ssh,
                                            tmp_path):
    client_ext, server_ext = mix
    _serve_config(real_hg_repo, server_ext)
    url = "ssh://user@dummy/%s" % real_hg_repo
    out = ssh(client_ext, "clone", "-U", "--debug", url, tmp_path / "clone")
    hg("verify", "-q", "-R", tmp_path / "clone")
    compressed = b"wirezstd: server compresses ssh responses" in out.encode()
    assert compressed == all(mix)
    sent = ssh.record.read_bytes()
    assert (zstandard.FRAME_HEADER in sent) == all(mix)

    if not all(mix):
        # Without both extensions the server sends exactly what a stock
        # server sends a stock client.
        _serve_config(real_hg_repo, False)
        ssh(False, "clone", "-U", url, tmp_path / "stock-clone")
        assert ssh.record.read_bytes() == sent


def test_ssh_compression_can_be_declined_by_the_client(real_hg_repo, ssh,
                                                       tmp_path):
    _serve_config(real_hg_repo, True)
    out = ssh(True, "clone", "-U", "--debug", "--config", "wirezstd.ssh=no",
              "ssh://user@dummy/%s" % real_hg_repo, tmp_path / "clone")
    assert "wirezstd: server compresses" not in out
    assert zstandard.FRAME_HEADER not in ssh.record.read_bytes()


def _partial_clone(hg, source, dest):
    hg("clone", "-U", "-r", "20", source, dest)
    return hg("log", "-R", dest, "-r", "tip", "-T", "{node}")


@pytest.mark.slow
def test_http_server_dying_mid_response_leaves_client_intact(
        real_hg_repo, hg, hgserve, proxy, tmp_path):
    _serve_config(real_hg_repo, True)
    recorder = proxy(hgserve(real_hg_repo).url)
    dest = tmp_path / "client"
    tip = _partial_clone(hg, real_hg_repo, dest)
    recorder.cut = ("cmd=getbundle", 50000)
    proc = hg.proc("pull", *EXT, "-R", dest, recorder.url)
    assert proc.returncode != 0
    assert ("abort: stream ended unexpectedly (compressed response from "
            "the server is incomplete" in proc.stderr)
    assert "Traceback" not in proc.stderr
    hg("verify", "-q", "-R", dest)
    assert hg("log", "-R", dest, "-r", "tip", "-T", "{node}") == tip
    recorder.cut = None
    hg("pull", *EXT, "-R", dest, recorder.url)
    hg("verify", "-q", "-R", dest)


@pytest.mark.slow
def test_ssh_server_dying_mid_response_leaves_client_intact(
        real_hg_repo, hg, ssh, tmp_path):
    _serve_config(real_hg_repo, True)
    url = "ssh://user@dummy/%s" % real_hg_repo
    dest = tmp_path / "client"
    tip = _partial_clone(hg, real_hg_repo, dest)
    # Handshake and discovery take a few kilobytes; cut inside the bundle.
    proc = ssh(True, "pull", "-R", dest, url, cut=60000, check=False)
    assert proc.returncode != 0
    assert "abort: " in proc.stderr and "Traceback" not in proc.stderr
    assert "compressed response from the server is incomplete" in proc.stderr
    hg("verify", "-q", "-R", dest)
    assert hg("log", "-R", dest, "-r", "tip", "-T", "{node}") == tip
    ssh(True, "pull", "-R", dest, url)
    hg("verify", "-q", "-R", dest)


def test_bad_server_config_stops_the_ssh_server_with_one_abort(
        real_hg_repo, ssh, tmp_path):
    with open(os.path.join(real_hg_repo, ".hg", "hgrc"), "w") as fh:
        fh.write("[extensions]\nwirezstd =\n[wirezstd]\nlevel = 99\n")
    proc = ssh(True, "clone", "-U", "ssh://user@dummy/%s" % real_hg_repo,
               tmp_path / "clone", check=False)
    assert proc.returncode != 0
    assert ("remote: abort: wirezstd.level must be a whole number from 1 "
            "to 22" in proc.stdout + proc.stderr)
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (tmp_path / "clone").exists()


#: Values ``hg serve`` must refuse, and the range its abort must state.
BAD_SERVER_SETTINGS = [
    ("level", "99", "a whole number from 1 to 22"),
    ("level", "abc", "a whole number from 1 to 22"),
    ("level", "0", "a whole number from 1 to 22"),
    ("level", "1_0", "a whole number from 1 to 22"),
    ("level", "7  # responses above small-response",
     "a whole number from 1 to 22"),
    ("small-response-level", "-1", "a whole number from 1 to 22"),
    ("threads", "-3", "a whole number from 0 to 64"),
    ("threads", "1000", "a whole number from 0 to 64"),
    ("small-response", "-5", "a size from 0 to 64m"),
    ("small-response", "lots", "a size from 0 to 64m"),
    ("long-distance", "maybe", "a boolean"),
    ("long-distance", "yes   # long-distance matching", "a boolean"),
    ("ssh", "2", "a boolean"),
    ("ssh", "yes please", "a boolean"),
    ("bundle-long-distance", "perhaps", "a boolean"),
]


def serve_refusal(hg, hgrc, repo, name, value):
    """``hg serve`` of ``repo`` with ``wirezstd.NAME = VALUE`` in the
    hgrc: the CompletedProcess of a server that refused to start (one that
    starts fails the test when it is stopped after 60 s)."""
    with open(hgrc, "a") as fh:
        fh.write("[extensions]\nwirezstd =\n[wirezstd]\n%s = %s\n"
                 % (name, value))
    return campaign.run_bounded(
        [hg.binary, "serve", "-R", str(repo), "-p", "0", "-a", "127.0.0.1"],
        env=hg.env, timeout=60)


@pytest.mark.parametrize("name, value, allowed", BAD_SERVER_SETTINGS)
def test_hg_serve_refuses_to_start_on_a_bad_setting(hg, hgrc, hgrepo, name,
                                                   value, allowed):
    proc = serve_refusal(hg, hgrc, hgrepo, name, value)
    assert campaign.is_clean_abort(proc), proc.stderr
    assert proc.stderr.startswith(
        "abort: wirezstd.%s must be %s" % (name, allowed)), proc.stderr
    # The hint quotes the value and the line that set it.
    assert proc.stderr.splitlines()[-1] == (
        "(it is '%s', set at %s:6)" % (value, hgrc)), proc.stderr
    assert "listening at" not in proc.stdout


def test_settings_at_the_ends_of_their_ranges_serve(real_hg_repo, hg, hgrc,
                                                    hgserve, tmp_path):
    hgrc.write_text(hgrc.read_text() + (
        "[extensions]\nwirezstd =\n[wirezstd]\nlevel = 1\nthreads = 64\n"
        "small-response = 64m\nsmall-response-level = 22\n"
        "long-distance = off\nssh = 0\nbundle-long-distance = true\n"))
    hg("clone", "-U", hgserve(real_hg_repo).url, tmp_path / "clone")
    hg("verify", "-q", "-R", tmp_path / "clone")


def test_bad_bundle_setting_aborts_hg_bundle(hg, hgrepo, tmp_path):
    (hgrepo / "f").write_text("x\n")
    hg("commit", "-A", "-q", "-m", "one", cwd=hgrepo)
    proc = hg.proc("bundle", "-a", "-t", "zstd-v2", *EXT, "--config",
                   "wirezstd.bundle-long-distance=sometimes",
                   tmp_path / "b.hg", cwd=hgrepo)
    assert campaign.is_clean_abort(proc), proc.stderr
    assert "wirezstd.bundle-long-distance must be a boolean" in proc.stderr


@pytest.mark.slow
def test_zstd_bundle_uses_long_distance_and_stock_hg_applies_it(
        real_hg_repo, hg, tmp_path):
    level = ("--config", "experimental.bundlecomplevel.zstd=19")
    ours, core = tmp_path / "ours.hg", tmp_path / "core.hg"
    hg("bundle", "-q", "-a", "-t", "zstd-v2", *EXT, *level, "-R",
       real_hg_repo, ours)
    hg("bundle", "-q", "-a", "-t", "zstd-v2", *level, "-R", real_hg_repo,
       core)
    assert os.path.getsize(ours) < os.path.getsize(core)
    assert hg("debugbundle", "--spec", ours).strip() == "zstd-v2"
    data = ours.read_bytes()
    frame = data.index(zstandard.FRAME_HEADER)
    params = zstandard.get_frame_parameters(data[frame:frame + 18])
    assert params.window_size == 1 << 27
    # Stock hg, no extension, applies it.
    hg("init", tmp_path / "applied")
    hg("unbundle", "-q", "-R", tmp_path / "applied", ours)
    hg("verify", "-q", "-R", tmp_path / "applied")
    assert (hg("log", "-R", tmp_path / "applied", "-T", "{node}\n")
            == hg("log", "-R", real_hg_repo, "-T", "{node}\n"))


def test_help_documents_the_config(hg):
    out = hg("help", *EXT, "wirezstd")
    for item in ("level", "threads", "long-distance", "small-response",
                 "small-response-level", "ssh", "bundle-long-distance"):
        assert item in out


# The response compressor itself.

OPTIONS = dict(wirezstd.DEFAULT_OPTIONS)


def _decode(chunks):
    reader = wirezstd._response_reader(_Chunks(chunks))
    return reader.read()


class _Chunks:
    def __init__(self, chunks):
        self._chunks = iter(chunks)

    def read(self, size):
        return next(self._chunks, b"")


def _window(frame):
    return zstandard.get_frame_parameters(frame[:18]).window_size


def test_small_responses_get_a_fitted_window_large_ones_the_long_one():
    small = [b"changeset %d\n" % i * 20 for i in range(200)]
    large = [os.urandom(64) * 1024 for _ in range(8)]
    small_frame = b"".join(wirezstd.compress_response(small, OPTIONS))
    large_frame = b"".join(wirezstd.compress_response(large, OPTIONS))
    assert _window(small_frame) <= 1 << 18
    assert _window(large_frame) == 1 << 27
    assert _decode([small_frame]) == b"".join(small)
    assert _decode([large_frame]) == b"".join(large)


def test_cut_response_raises_abort():
    from mercurial import error
    frame = b"".join(wirezstd.compress_response(
        [os.urandom(1000) * 300], OPTIONS))
    with pytest.raises(error.Abort) as excinfo:
        _decode([frame[:len(frame) // 2]])
    assert b"incomplete" in excinfo.value.message


@settings(max_examples=40, deadline=None)
@given(st.lists(st.binary(max_size=5000), max_size=20),
       st.integers(min_value=0, max_value=30000), st.data())
def test_any_response_round_trips_in_any_read_sizes(chunks, small, data):
    opts = {**OPTIONS, b"small-response": small}
    frame = b"".join(wirezstd.compress_response(chunks, opts))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(frame)),
                                     max_size=5)))
    pieces = [frame[a:b] for a, b in zip([0] + cuts, cuts + [len(frame)])
              if a < b]
    reader = wirezstd._response_reader(_Chunks(pieces))
    out = b""
    while True:
        piece = reader.read(data.draw(st.integers(1, 4096)))
        if not piece:
            break
        out += piece
    assert out == b"".join(chunks)


def test_ssh_server_refusing_a_pull_reads_as_with_stock_hg(
        real_hg_repo, hg, ssh, tmp_path):
    # The server aborts before its response (bundle1 pulls refused): the
    # client says what a stock client says, as Mercurial's
    # test-bundle2-exchange.t expects.
    _serve_config(real_hg_repo, True)
    with open(os.path.join(real_hg_repo, ".hg", "hgrc"), "a") as fh:
        fh.write("[server]\nbundle1 = false\n")
    url = "ssh://user@dummy/%s" % real_hg_repo
    args = ("--config", "devel.legacy.exchange=bundle1", "clone", "-U", url)
    stock = ssh(False, *args, tmp_path / "stock", check=False)
    ours = ssh(True, *args, tmp_path / "ours", check=False)
    assert stock.returncode == ours.returncode == 255
    assert "abort: stream ended unexpectedly (got 0 bytes, expected 4)" \
        in stock.stderr
    assert ours.stderr == stock.stderr


# Crafted responses: the client's memory stays within its documented bound.

@pytest.mark.slow
@pytest.mark.parametrize("transport", ["http-wirezstd", "http-zstd", "ssh"])
@pytest.mark.parametrize("name", ["zeros-4g", "window-2g",
                                  "content-size-2e62"])
def test_crafted_response_aborts_within_the_memory_bound(
        name, transport, crafted_server, hg, env, tmp_path):  # noqa: F811 (a fixture)
    data, what = craftedwire.crafted_responses()[name]
    if transport == "ssh":
        crafted_server.response.write_bytes(data)
        source, extra = crafted_server.ssh_url, crafted_server.ssh_args
    else:
        # With "zstd" the server names core's engine: the client must not
        # fall back to core's unbounded reader.
        server = crafted_server(data, "--config", "server.compressionengines="
                                + transport.split("-")[1])
        source, extra = server.url, ()
    dest = tmp_path / "clone"
    proc, peak = craftedwire.run_client(
        hg, env, [*extra, "clone", "-U", source, dest], tmp_path / "rss")
    assert campaign.is_clean_abort(proc), (what, proc.stderr)
    assert "out of memory" not in proc.stderr, what
    assert peak < craftedwire.CLIENT_PEAK_RSS, (what, peak >> 20)
    assert not dest.exists()


def test_crafted_zstd_bundle_aborts_within_the_memory_bound(hg, env, hgrepo,
                                                           tmp_path):
    bundle = tmp_path / "crafted.hg"
    bundle.write_bytes(craftedwire.zstd_bundle(
        craftedwire.bomb(4 << 30, craftedwire.bundle2_part_unknown())))
    proc, peak = craftedwire.run_client(
        hg, env, ["unbundle", "-R", hgrepo, bundle], tmp_path / "rss")
    assert campaign.is_clean_abort(proc), proc.stderr
    assert "out of memory" not in proc.stderr
    assert peak < craftedwire.CLIENT_PEAK_RSS, peak >> 20
    hg("verify", "-q", "-R", hgrepo)
