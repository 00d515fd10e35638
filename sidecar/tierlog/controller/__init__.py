"""The controller: decides who leads each partition from the brokers' leases.

It reads the partition-state store (``tierlog.partition_state``) and changes it only by
compare-and-swap, as Kafka's KRaft controller does through its metadata log:

- ``liveness``: which brokers are alive, judged by this process's own clock from how
  long each broker's lease has gone unchanged;
- ``elections``: pure functions from a partition's state and the live brokers to its
  next state (fencing, offline partitions, unclean election, controlled shutdown,
  preferred leaders);
- ``changes``: a change that landed, and its log line;
- ``controller``: one pass over every partition (``Controller.step``) and the thread
  that runs passes until stopped;
- ``local_election``: one controller per machine, whoever holds a file lock;
- ``controlled_shutdown``: a stopping broker handing its leaderships over;
- ``leader_elections``: elections an administrator asks for (Kafka's ElectLeaders).
"""
