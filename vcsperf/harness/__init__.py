"""Real ``hg`` and ``git`` processes, servers on 127.0.0.1 and
real-content histories, for the tests, the benchmarks and the check;
the measurements the benchmarks and the check both take (``measure``).
Imports ``vcsperf.core`` and nothing else of ours."""
