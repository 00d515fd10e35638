"""The offline tools' cores: ``dump-log``'s checks and lines, ``tier verify``, progress.

Pure over files and object stores, below both the CLI (their argparse adapters) and the
Spark jobs (``tierlog-spark audit`` runs ``tier_verify`` on executors).
"""
