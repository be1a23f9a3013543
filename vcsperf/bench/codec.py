"""Codec benchmark: core Mercurial's zlib-6 and zstd-3 against zstd-3 with
a trained dictionary, on the revlog chunks of any Mercurial repository.

    vcsperf bench codec /path/to/repo [--json out.json]

The chunks of each revlog class are ordered oldest first.  The dictionary
is trained on the oldest 80% and every codec is measured on the newest
20%, so the dictionary is judged on history it has not seen, as it would be
after deployment.  Each chunk is charged as a revlog stores it: compressed
when that is smaller, otherwise raw with a one-byte header.
"""

import json
import sys
import time
import zlib

import zstandard

import zstdwire
from vcsperf.bench import benchcli, hgchunks

TEST_SHARE = 0.2
REPEATS = 3


class Codec:
    """A named pair of one-chunk compress and decompress functions."""

    def __init__(self, name, compress, decompress):
        self.name = name
        self.compress = compress
        self.decompress = decompress


def core_codecs():
    """zlib-6 and zstd-3 as core Mercurial stores revlog chunks."""
    zcctx = zstandard.ZstdCompressor(level=3)
    zdctx = zstandard.ZstdDecompressor()
    return [
        Codec("zlib-6", lambda d: zlib.compress(d, 6), zlib.decompress),
        Codec("zstd-3", zcctx.compress, zdctx.decompress),
    ]


def dictionary_codec(dictionary, level=3):
    # No frame checksum: a revlog verifies every revision's hash on read,
    # as it does for core's zstd chunks, which carry none either.
    compressor = zstdwire.ChunkCompressor(dictionary, level, checksum=False)
    decompressor = zstdwire.ChunkDecompressor(dictionaries=[dictionary])
    # One header byte marks a dictionary chunk in a revlog.
    return Codec("zstd-%d+dict" % level, lambda d: b"D" + compressor.compress(d),
                 lambda c: decompressor.decompress(c[1:]))


class Measure:
    __slots__ = ("codec", "stored", "compressed", "seconds")

    def __init__(self, codec, stored, compressed, seconds):
        self.codec = codec
        self.stored = stored
        self.compressed = compressed
        self.seconds = seconds


def measure(codec, chunks):
    """Stored bytes and best-of-REPEATS decompression time of ``chunks``."""
    frames = []
    stored = 0
    for chunk in chunks:
        frame = codec.compress(chunk)
        if len(frame) < len(chunk) + 1:
            frames.append(frame)
            stored += len(frame)
        else:
            stored += len(chunk) + 1
    best = float("inf")
    decompress = codec.decompress
    for _ in range(REPEATS):
        start = time.perf_counter()
        for frame in frames:
            decompress(frame)
        best = min(best, time.perf_counter() - start)
    return Measure(codec, stored, frames, best)


class ClassResult:
    """Figures for one revlog class (changelog, manifest, filelog)."""

    def __init__(self, name, train_count, test_chunks, dict_id, measures,
                 train_seconds):
        self.name = name
        self.train_count = train_count
        self.test_count = len(test_chunks)
        self.raw = sum(len(c) for c in test_chunks)
        self.compressed_raw = sum(
            len(c) for c, m in zip(test_chunks, measures[0].compressed))
        self.dict_id = dict_id
        self.measures = measures
        self.train_seconds = train_seconds


def compare(name, chunks, dict_size=zstdwire.training.DEFAULT_DICT_SIZE,
            level=3):
    """Train on the older chunks of one class and measure every codec on
    the newest ``TEST_SHARE``.  ``chunks`` is a list of bytes, oldest
    first."""
    split = len(chunks) - max(1, int(len(chunks) * TEST_SHARE))
    older, newest = chunks[:split], chunks[split:]
    start = time.perf_counter()
    samples = zstdwire.select_recent(reversed(older))
    dictionary = zstdwire.train(samples, dict_size=dict_size, level=level)
    train_seconds = time.perf_counter() - start
    codecs = core_codecs() + [dictionary_codec(dictionary, level)]
    measures = [measure(codec, newest) for codec in codecs]
    return ClassResult(name, len(older), newest, dictionary.dict_id(),
                       measures, train_seconds)


def format_table(results):
    """A plain-text table: core Mercurial's codecs first, then ours, with
    the ratios that matter."""
    header = ("%-9s %7s %9s | %9s %9s %9s | %6s %6s | %7s %7s %7s | %6s %6s"
              % ("class", "chunks", "raw KiB", "zlib-6", "zstd-3",
                 "zstd+dict", "d/zlib", "d/zstd", "zlibMB/s", "zstdMB/s",
                 "dictMB/s", "xzlib", "xzstd"))
    lines = [header, "-" * len(header)]
    for r in results:
        zl, zs, zd = r.measures
        rates = [r.raw / m.seconds / 1e6 if m.seconds else float("inf")
                 for m in (zl, zs, zd)]
        lines.append(
            "%-9s %7d %9.0f | %9.0f %9.0f %9.0f | %6.3f %6.3f | %7.0f %7.0f "
            "%7.0f | %6.2f %6.2f"
            % (r.name, r.test_count, r.raw / 1024, zl.stored / 1024,
               zs.stored / 1024, zd.stored / 1024, zd.stored / zl.stored,
               zd.stored / zs.stored, rates[0], rates[1], rates[2],
               rates[2] / rates[0], rates[2] / rates[1]))
    return "\n".join(lines)


def as_dict(results):
    out = {}
    for r in results:
        out[r.name] = {
            "train_chunks": r.train_count, "test_chunks": r.test_count,
            "raw_bytes": r.raw, "dict_id": r.dict_id,
            "train_seconds": round(r.train_seconds, 3),
            "codecs": {m.codec.name: {
                "stored_bytes": m.stored,
                "decompress_seconds": round(m.seconds, 6)}
                for m in r.measures},
        }
    return out


def main(argv=None):
    parser = benchcli.command_line(sys.modules[__name__])
    parser.add_argument("repo")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    classes = hgchunks.chunks_by_class(benchcli.hg_repository(args.repo))
    read_seconds = time.perf_counter() - start
    results = [compare(name, chunks)
               for name, chunks in classes.items() if len(chunks) >= 50]
    print("repository: %s  (read %d chunks in %.1fs; zstandard %s, %s backend)"
          % (args.repo, sum(len(c) for c in classes.values()), read_seconds,
             zstandard.__version__, zstandard.backend))
    print(format_table(results))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"repo": args.repo, "zstandard": zstandard.__version__,
                       "backend": zstandard.backend,
                       "classes": as_dict(results)}, fh, indent=2)
