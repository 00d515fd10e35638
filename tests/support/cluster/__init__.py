"""A one-node Kubernetes cluster on this machine: ``make cluster`` / ``make cluster-down``.

Everything runs as host processes started by ``python -m tests.support.cluster up``:
etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd (Debian's,
with runc and the CNI bridge plugin), a kubelet, kube-proxy (iptables) and CoreDNS, all
built or installed by ``tests/tools/bootstrap.py --cluster``. Pods live on a bridge of
the host's own (``layout.BRIDGE``) that is cut off from the outside; the images they run
are built here (``images.py``) and imported into containerd, as no registry is reachable.
State, logs and pid files go to ``.cache/cluster/`` of the checkout; ``down`` stops what
``up`` started and removes it. ``docs/KUBERNETES.md`` says why each piece is what it is.
"""
