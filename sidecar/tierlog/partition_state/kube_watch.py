"""The Kubernetes store's change journal, fed by a watch of its ConfigMaps.

One list of the cluster's partition-state ConfigMaps (heads, parts, configs), then a
watch from the list's ``resourceVersion``: the API server sends each change after that
version, in order, and the topic each names goes into the journal (``ChangeJournal``).
lightkube resumes a watch the server ended from the last version it saw, which the
server's bookmarks keep recent while nothing changes. Any failure (410 Gone when that
version was compacted away, the server unreachable) makes the journal lose track, so
every reader reads everything, until a new list and watch start it afresh. The journal
only says where to look: readers then read the objects themselves, with the store's
quorum reads.
"""

from __future__ import annotations

import logging
import threading
import time

from lightkube import Client
from lightkube.core.client import LabelSelector
from lightkube.core.selector import build_selector
from lightkube.operators import in_
from lightkube.resources.core_v1 import ConfigMap

from tierlog.partition_state.change_journal import ChangeJournal

__all__ = ["StateWatch"]

log = logging.getLogger(__name__)

RETRY_S = 1.0  # after a failed list or watch
WATCH_S = 60  # the server ends each watch request after this; lightkube resumes it
# No byte for longer than a watch request lasts: the connection died without a word
# (lightkube reads watches with no timeout, and the journal would go stale unnoticed).
SILENCE_S = WATCH_S + 30


class StateWatch:
    def __init__(
        self,
        client: Client,
        namespace: str,
        labels: dict[str, str],
        kinds: tuple[str, ...],
        kind_label: str,
        topic_key: str,
        journal: ChangeJournal,
    ) -> None:
        """Watch the ConfigMaps of ``namespace`` with ``labels`` and ``kind_label`` one
        of ``kinds``; each names its topic under ``data[topic_key]``."""
        self._client = client
        self._namespace = namespace
        self._labels: LabelSelector = {**labels, kind_label: in_(kinds)}
        self._topic_key = topic_key
        self._journal = journal
        self._thread = threading.Thread(target=self._follow, name="state-watch", daemon=True)
        client._client._watch_timeout.read = SILENCE_S

    def start(self) -> None:
        """List once (here: ``ApiError`` when the server cannot be read), then watch in
        a daemon thread."""
        version = self._list()
        self._journal.start_afresh()
        self._version = version
        self._thread.start()

    def _list(self) -> str:
        listed = self._client.list(ConfigMap, namespace=self._namespace, labels=self._labels)
        for _ in listed:  # the version is known once the list is read
            pass
        return listed.resourceVersion

    def _follow(self) -> None:
        while True:
            try:
                self._watch(self._version)
            except Exception as error:  # 410 Gone, or the server away
                log.warning("watch of the partition-state store ended: %s", error)
            self._journal.lose_track()
            failures = 0
            while True:
                time.sleep(RETRY_S)
                try:
                    self._version = self._list()
                    break
                except Exception as error:
                    failures += 1
                    if failures == 1:  # once a streak: the server may be gone for good
                        log.warning("cannot list the partition-state store: %s", error)
            self._journal.start_afresh()

    def _watch(self, version: str) -> None:
        """Follow changes after ``version``. With bookmarks: the server then tells an
        idle watch the current version now and then, which lightkube resumes from, so a
        quiet cluster's watch does not fall behind the server's window (410 Gone, and
        every reader reading everything). lightkube's ``watch`` has no such parameter:
        the request is built by its generic client."""
        generic = self._client._client
        request = generic.prepare_request(
            "list",
            res=ConfigMap,
            namespace=self._namespace,
            watch=True,
            params={
                "timeoutSeconds": WATCH_S,
                "resourceVersion": version,
                "labelSelector": build_selector(self._labels),
                "allowWatchBookmarks": "true",
            },
        )
        for kind, config_map in generic.watch(request):
            topic = (config_map.data or {}).get(self._topic_key)
            if kind != "BOOKMARK" and topic is not None:
                self._journal.record(topic)
