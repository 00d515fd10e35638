"""The ``tierlog-spark`` jobs: ``export`` (a topic to Parquet) and ``audit`` (a tier)."""
