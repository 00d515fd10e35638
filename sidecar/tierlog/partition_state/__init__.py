"""Who leads each partition and which replicas are in sync, kept in a store that is
already linearizable: the partition-state store.

A partition's state (its replicas, leader, leader epoch, in-sync replicas and partition
epoch, as Kafka's controller keeps them) changes only by compare-and-swap on its
partition epoch. A change that lost the race fails with ``INVALID_UPDATE_VERSION`` and
the caller re-reads: there is no quorum of our own, only the store's. Each broker also
holds a lease in the same store, its liveness: renewed while it runs, taken over (with a
new broker epoch) when it starts again, so an old incarnation that wakes up is fenced.

- ``model``: the values (``PartitionState``, ``BrokerLease``) and their JSON documents;
- ``store``: the interface both stores keep (``PartitionStateStore``);
- ``local_store``: a directory on one machine, updates under file locks;
- ``kube_store``: the Kubernetes API (a ConfigMap per cluster, a ``Lease`` per broker),
  updates with ``resourceVersion`` preconditions;
- ``change_journal``, ``local_changes``, ``kube_watch``: which topics were written since a
  reader last looked, so that ``store_follower`` (a broker's or the controller's view of
  the store) reads only those;
- ``lease_keeper``: a broker holding and renewing its lease (the controller, in
  ``tierlog.controller``, judges the leases).
"""
