"""Apache Kafka's log storage, in Python: record formats, segments, indexes, logs.

Everything here is byte-compatible with Kafka's on-disk format, so Kafka's own tools
read what we write and we read what a Kafka broker wrote.
"""
