"""``vcsperf check``: ``runner`` copies the repository, runs each feature
(one module each: ``store``, ``clones``, ``checkouts``, ``commit_ids``,
``importer``; ``checkcmds`` is the hg extension they call; ``sample`` the
slice ``--quick`` works on) and reports;
and ``vcsperf demo``.  Imports the core, the harness and the benchmarks'
measurements."""
