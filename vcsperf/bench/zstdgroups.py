"""Dictionaries per group of filelogs (by extension or by directory) beside
zstdstore's one filelog dictionary, on the filelog chunks of a repository.

    vcsperf bench zstdgroups /path/to/repo [--groups 8] [--json out.json]

Filelog chunks are split by the changeset that introduced them: the
dictionaries are trained on the older 80% (``hg zstd-train``'s size and
sample budget unless ``--sample-budget`` says otherwise, newest chunks
first) and judged on the newest 20%, as
after deployment.  Each grouping gives a dictionary to each of its
``--groups`` largest groups (by the bytes of their older chunks); the
other files keep the one filelog dictionary.  Every chunk is charged as
zstdstore stores it at its level: the dictionary frame with its header
byte, or plain zstd where that is smaller (chunks over 16 KiB), or raw.
Dictionaries are counted in the bytes.
"""

import os
import sys
import time

import zstandard

import zstdwire
from vcsperf.bench import benchcli, hgchunks

TEST_SHARE = 0.2
#: zstdstore's defaults (``zstdstore.level``, ``PLAIN_CHECK_SIZE``).
LEVEL = 6
PLAIN_CHECK_SIZE = 16 * 1024
MIN_CHUNK = 50


def by_extension(path):
    return os.path.splitext(path)[1].lower() or "(none)"


def by_directory(path):
    """The first two directories: ``sympy/matrices`` for
    ``sympy/matrices/dense.py``."""
    return "/".join(path.split("/")[:-1][:2]) or "(top)"


GROUPINGS = (("extension", by_extension), ("directory", by_directory))


def split_chunks(repo_path):
    """``(older, newest)``: lists of ``(file path, chunk)``, older ones
    newest first (the order training samples them), split at the
    changeset ``1 - TEST_SHARE`` of the way through history."""
    repo = hgchunks.open_repo(repo_path)
    cut = int(len(repo.changelog) * (1 - TEST_SHARE))
    older, newest = [], []
    for path, linkrev, chunk in hgchunks.filelog_chunks(repo):
        (older if linkrev < cut else newest).append((linkrev, path, chunk))
    older.sort(key=lambda item: item[0], reverse=True)
    return ([(p, c) for _, p, c in older], [(p, c) for _, p, c in newest])


def train(chunks, budget):
    return zstdwire.train(zstdwire.select_recent(iter(chunks), budget),
                          level=LEVEL)


class Store:
    """Charges chunks as zstdstore stores them, with one dictionary."""

    def __init__(self, dictionary):
        self.dictionary = dictionary
        self._dict = zstdwire.ChunkCompressor(dictionary, LEVEL,
                                              checksum=False)
        self._plain = zstandard.ZstdCompressor(level=LEVEL)

    def stored(self, chunk):
        if len(chunk) < MIN_CHUNK:
            return len(chunk) + 1
        size = 1 + len(self._dict.compress(chunk))
        if len(chunk) > PLAIN_CHECK_SIZE:
            size = min(size, len(self._plain.compress(chunk)))
        return min(size, len(chunk) + 1)


def group_stores(older, grouping, count, budget):
    """``{group: Store}`` for the ``count`` groups with the most bytes of
    ``older`` chunks, each with a dictionary trained on its own chunks."""
    sizes = {}
    for path, chunk in older:
        group = grouping(path)
        sizes[group] = sizes.get(group, 0) + len(chunk)
    largest = sorted(sizes, key=sizes.get, reverse=True)[:count]
    stores = {}
    for group in largest:
        try:
            stores[group] = Store(train(
                (c for p, c in older if grouping(p) == group), budget))
        except zstdwire.TrainingError:
            pass
    return stores


def run(repo_path, workdir, groups=8,
        sample_budget=zstdwire.training.DEFAULT_SAMPLE_BUDGET):
    start = time.perf_counter()
    older, newest = split_chunks(repo_path)
    read_seconds = time.perf_counter() - start
    one = Store(train((c for _, c in older), sample_budget))
    dict_bytes = len(one.dictionary.as_bytes())
    baseline = sum(one.stored(c) for _, c in newest)
    results = {"chunks": {"older": len(older), "newest": len(newest)},
               "raw_bytes": sum(len(c) for _, c in newest),
               "read_seconds": read_seconds,
               "one": {"bytes": baseline, "dict_bytes": dict_bytes},
               "groupings": {}}
    for name, grouping in GROUPINGS:
        stores = group_stores(older, grouping, groups, sample_budget)
        per_group = {}
        total = 0
        for path, chunk in newest:
            group = grouping(path)
            size = stores.get(group, one).stored(chunk)
            total += size
            if group in stores:
                per_group.setdefault(group, [0, 0])
                per_group[group][0] += size
                per_group[group][1] += one.stored(chunk)
        extra = sum(len(s.dictionary.as_bytes()) for s in stores.values())
        results["groupings"][name] = {
            "bytes": total, "dict_bytes": dict_bytes + extra,
            "groups": {g: {"bytes": b, "one_dict_bytes": o}
                       for g, (b, o) in per_group.items()}}
    ratios = {name: (g["bytes"] + g["dict_bytes"])
              / (baseline + dict_bytes)
              for name, g in results["groupings"].items()}
    return results, ratios


def format_report(source, results, ratios):
    one = results["one"]
    lines = ["repository: %s  (filelog chunks: %d older, %d newest, %.0f KiB "
             "raw newest; read in %.0f s)"
             % (source, results["chunks"]["older"],
                results["chunks"]["newest"], results["raw_bytes"] / 1024,
                results["read_seconds"]),
             "%-24s %12s %10s %12s" % ("dictionaries", "stored KiB",
                                       "dict KiB", "vs one dict"),
             "%-24s %12.0f %10.0f %12.3f" % ("one for all filelogs",
                                             one["bytes"] / 1024,
                                             one["dict_bytes"] / 1024, 1.0)]
    for name, g in results["groupings"].items():
        lines.append("%-24s %12.0f %10.0f %12.3f"
                     % ("per " + name, g["bytes"] / 1024,
                        g["dict_bytes"] / 1024, ratios[name]))
        for group, figures in sorted(g["groups"].items(),
                                     key=lambda kv: -kv[1]["one_dict_bytes"]):
            lines.append("  %-22s %12.0f %10s %12.3f"
                         % (group, figures["bytes"] / 1024, "",
                            figures["bytes"] / figures["one_dict_bytes"]))
    return "\n".join(lines)


def main(argv=None):
    return benchcli.main(sys.modules[__name__], [
        ("groups", dict(type=int, default=8,
                        help="dictionaries per grouping (the largest "
                             "groups get one each)")),
        ("sample-budget", dict(type=int,
                               default=zstdwire.training.DEFAULT_SAMPLE_BUDGET,
                               help="bytes of chunks each dictionary is "
                                    "trained on (hg zstd-train's default)")),
    ], argv)
