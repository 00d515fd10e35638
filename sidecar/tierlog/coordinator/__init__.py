"""The coordinators' state in Kafka's own schemas: the records of ``__consumer_offsets``.

Issue 19's first building block. A group coordinator keeps committed offsets and group
membership as records of the compacted topic ``__consumer_offsets``, in exactly the
bytes Kafka 4.1 writes, so Kafka's tools read our segments and ours read Kafka's:

- ``protocol_types``: Kafka's message primitives (classic and flexible versions);
- ``record_type``: the int16 record type in front of every key;
- ``offset_records``: committed offsets (``OffsetCommitKey``/``OffsetCommitValue``);
- ``classic_group_records``: a classic group (``GroupMetadataKey``/``GroupMetadataValue``);
- ``consumer_group_records``: a KIP-848 consumer group's epoch, members, target and
  current assignments, regular expressions and (4.0's) partition metadata;
- ``group_records``: any record's key and value to bytes and back (``CoordinatorRecord``);
- ``offsets_topic``: ``__consumer_offsets`` and which of its partitions holds a group;
- ``errors``: unknown record types and value versions.

Nothing here touches a log or the network: these are pure functions over bytes.
"""
