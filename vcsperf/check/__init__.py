"""``vcsperf check`` (``runner``, with its hg extension ``checkcmds``) and
``vcsperf demo``.  Imports the core, the harness and the benchmarks'
measurements."""
