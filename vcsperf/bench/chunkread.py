"""An hg extension for the benchmarks: ``hg bench-chunkread`` reads and
decompresses every stored chunk of every revlog, the way a revision read
does (the revlog's batch chunk read), and prints JSON figures per class:
chunks, decompressed bytes and the best wall time of ``--repeat`` runs.

    hg --config extensions.chunkread=vcsperf/bench/chunkread.py \\
       bench-chunkread --repeat 5
"""

import json
import time

from mercurial import registrar

from vcsperf.bench import hgchunks

cmdtable = {}
command = registrar.command(cmdtable)


@command(b'bench-chunkread', [(b'', b'repeat', 5, b'runs per class')],
         b'hg bench-chunkread [--repeat N]')
def bench_chunkread(ui, repo, repeat=5):
    by_class = {}
    for name, rl in hgchunks.revlogs(repo.unfiltered()):
        by_class.setdefault(name, []).append(rl)
    figures = {}
    for name, revlogs in by_class.items():
        best = float("inf")
        chunks = size = 0
        for _ in range(repeat):
            chunks = size = 0
            start = time.perf_counter()
            for rl in revlogs:
                rl.clearcaches()
                with rl.reading():
                    decoded = rl._inner._chunks(list(range(len(rl))))
                chunks += len(decoded)
                size += sum(len(c) for c in decoded)
            best = min(best, time.perf_counter() - start)
        figures[name] = {"chunks": chunks, "bytes": size, "seconds": best}
    ui.write(json.dumps(figures).encode("ascii") + b"\n")
