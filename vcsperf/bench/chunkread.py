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
    # Each run opens the revlogs again and drops each once read: held all
    # at once, with their chunk caches, the 463,000 revlogs of a
    # Firefox-scale store took 23 GB before the kernel killed the run.
    figures = {}
    for _ in range(repeat):
        run = {}
        for name, rl in hgchunks.revlogs(repo.unfiltered()):
            figure = run.setdefault(name, {"chunks": 0, "bytes": 0,
                                           "seconds": 0.0})
            rl.clearcaches()
            start = time.perf_counter()
            with rl.reading():
                decoded = rl._inner._chunks(list(range(len(rl))))
            figure["seconds"] += time.perf_counter() - start
            figure["chunks"] += len(decoded)
            figure["bytes"] += sum(len(c) for c in decoded)
        for name, figure in run.items():
            best = figures.get(name)
            if best is None or figure["seconds"] < best["seconds"]:
                figures[name] = figure
    ui.write(json.dumps(figures).encode("ascii") + b"\n")
