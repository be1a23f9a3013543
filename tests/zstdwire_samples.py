"""Sample data for codec tests: many small, similar chunks like revlog
entries, from the installed Mercurial sources (real text, no network)."""

import functools
import importlib.metadata


@functools.lru_cache(maxsize=None)
def source_lines():
    dist = importlib.metadata.distribution("mercurial")
    lines = []
    for entry in sorted(dist.files, key=str):
        if entry.suffix == ".py" and str(entry).startswith("mercurial/"):
            with open(dist.locate_file(entry), "rb") as fh:
                lines.extend(fh.read().splitlines(keepends=True))
    return lines


def chunks(count=2000, lines_per_chunk=12):
    """``count`` chunks of consecutive source lines, oldest first."""
    lines = source_lines()
    return [b"".join(lines[i * lines_per_chunk:(i + 1) * lines_per_chunk])
            for i in range(count)]
