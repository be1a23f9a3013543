"""What the adapters share, in plain Python: commit-ID rules and series,
pooled-checkout primitives, the bytes-literal importer, the user error.
Imports the standard library and ``zstdwire`` only."""
