"""tierlog's gRPC API: the stubs generated from ``proto/`` (``tierlog.api.v1``).

The ``.proto`` files are the source; ``python -m tierlog.api.generate`` (or ``make
stubs``) regenerates the committed stubs, and a test fails when they drift.
"""
