"""The broker core: what every front door of a broker reads and writes through.

Which topics and partitions exist (``topics``), who serves each (``ownership``; with
replication, the replica manager as ``partitions.Leaders``), the lookup from a request to
its log with the leader-epoch check (``partitions``, ``leader_epoch_check``), and the
watch that wakes readers when a partition grows (``watch``). It sits above storage and
below replication, the coordinators and the servers (docs/ARCHITECTURE.md).
"""
