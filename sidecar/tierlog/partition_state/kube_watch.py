"""The Kubernetes store's change journal, fed by a watch of its ConfigMaps.

One list of the cluster's partition-state ConfigMaps (heads, parts, configs), then a
watch from the list's ``resourceVersion``: the API server sends each change after that
version, in order, and the topic each names goes into the journal (``ChangeJournal``).
A watch request the server ended is resumed from the last version seen, which the
server's bookmarks keep recent while nothing changes. Any failure (410 Gone when that
version was compacted away, the server unreachable, a Role without ``watch``) makes the
journal lose track, so every reader reads everything, as it did before any journal,
until a new list and watch start it afresh. The journal only says where to look:
readers then read the objects themselves, with the store's quorum reads.

The watch has a client of its own, and closes each response it opened. It used to share
the store's and leave a refused response open (lightkube's watch does not close it on
an error): each retry then held one more of the client's connections, until the pool
had none for the broker's lease renewals, and the broker was fenced.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable

import httpx2
from lightkube import Client
from lightkube.core.client import LabelSelector
from lightkube.core.exceptions import ApiError
from lightkube.core.generic_client import WatchDriver
from lightkube.core.selector import build_selector
from lightkube.operators import in_
from lightkube.resources.core_v1 import ConfigMap

from tierlog.partition_state.change_journal import ChangeJournal

__all__ = ["RETRY_S", "WATCH_THREAD", "StateWatch"]

log = logging.getLogger(__name__)

RETRY_S = 1.0  # after a failed list or watch
WATCH_THREAD = "state-watch"  # its thread's name
# After a refusal (403: the Role lacks watch or list): an operator's upgrade may grant it,
# and meanwhile each attempt is a list of every state ConfigMap, on top of the polling.
REFUSED_RETRIES_APART = 60
WATCH_S = 60  # the server ends each watch request after this; it is resumed
# No byte for longer than a watch request lasts: the connection died without a word.
SILENCE_S = WATCH_S + 30
_FORBIDDEN = 403


class StateWatch:
    def __init__(
        self,
        connect: Callable[[], Client],
        namespace: str,
        labels: dict[str, str],
        kinds: tuple[str, ...],
        kind_label: str,
        topic_key: str,
        journal: ChangeJournal,
        retry_s: float = RETRY_S,
    ) -> None:
        """Watch the ConfigMaps of ``namespace`` with ``labels`` and ``kind_label`` one
        of ``kinds``; each names its topic under ``data[topic_key]``. ``connect`` makes
        the watch's own client."""
        self._client = connect()
        self._namespace = namespace
        self._labels: LabelSelector = {**labels, kind_label: in_(kinds)}
        self._topic_key = topic_key
        self._journal = journal
        self._retry_s = retry_s
        self.failures = 0  # lists and watches that failed
        self._stopping = threading.Event()
        self._open: httpx2.Response | None = None  # the watch response being read
        self._open_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, from_version: str | None = None) -> None:
        """List once (here: ``ApiError`` when the server cannot be read), then watch in
        a daemon thread. ``from_version``: watch from it instead of a list's (tests
        give one the server no longer keeps)."""
        version = self._list() if from_version is None else from_version
        self._journal.start_afresh()
        self._thread = threading.Thread(
            target=self._follow, args=(version,), name=WATCH_THREAD, daemon=True
        )
        self._thread.start()

    def close(self, timeout_s: float = 10.0) -> None:
        """End the watch: the request being read is cut, not waited out."""
        self._stopping.set()
        with self._open_lock:
            if self._open is not None:
                _cut(self._open)
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._client.close()

    def _list(self) -> str:
        listed = self._client.list(ConfigMap, namespace=self._namespace, labels=self._labels)
        for _ in listed:  # the version is known once the list is read
            pass
        return listed.resourceVersion

    def _follow(self, version: str) -> None:
        while True:
            try:
                self._watch(version)
                return  # closed
            except Exception as error:  # 410 Gone, refused, or the server away
                if self._stopping.is_set():
                    return
                # Before the failure is counted: whoever sees the count sees the
                # journal lost too (a test waiting on the count read a journal
                # still tracking, in the moment the warning took to be logged).
                self._journal.lose_track()
                self._failed("watch", error)
                failure = error
            while not self._stopping.wait(self._retry_after(failure)):
                try:
                    version = self._list()
                    break
                except Exception as error:
                    self._failed("list", error)
                    failure = error
            else:
                return  # closed
            self._journal.start_afresh()

    def _failed(self, what: str, error: Exception) -> None:
        self.failures += 1
        if self.failures == 1 or not _refused(error):  # a refusal lasts: said once
            log.warning(
                "%s of the partition-state store failed (its readers read everything): %s",
                what, error,
            )  # fmt: skip

    def _retry_after(self, error: Exception) -> float:
        return self._retry_s * (REFUSED_RETRIES_APART if _refused(error) else 1)

    def _watch(self, version: str) -> None:
        """Follow changes after ``version`` until the watch fails. With bookmarks: the
        server then tells an idle watch the current version now and then, which each
        request resumes from, so a quiet cluster's watch does not fall behind the
        server's window (410 Gone, and every reader reading everything). lightkube's
        ``watch`` has no such parameter, and does not close a response that failed:
        the requests are built by its generic client and sent here."""
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
        driver = WatchDriver(request, generic._client.build_request)
        timeout = httpx2.Timeout(generic._watch_timeout.connect, read=SILENCE_S)
        while not self._stopping.is_set():
            resumed = driver.get_request(timeout)  # type: ignore[no-untyped-call]
            response = generic.send(resumed, stream=True)
            with self._open_lock:  # close() sees it, or it sees close() was called
                if self._stopping.is_set():
                    response.close()
                    return
                self._open = response
            try:
                self._read(driver, response)
            finally:
                with self._open_lock:
                    self._open = None
                response.close()

    def _read(self, driver: WatchDriver, response: httpx2.Response) -> None:
        if response.is_error:
            response.read()
            raise_as_api_error = self._client._client.raise_for_status
            raise_as_api_error(response)  # type: ignore[no-untyped-call]
        for line in response.iter_lines():  # an ERROR event raises ApiError (410 Gone)
            kind, config_map = driver.process_one_line(line)  # type: ignore[no-untyped-call]
            topic = (config_map.data or {}).get(self._topic_key)
            if kind != "BOOKMARK" and topic is not None:
                self._journal.record(topic)


def _refused(error: Exception) -> bool:
    return isinstance(error, ApiError) and error.status.code == _FORBIDDEN


def _cut(response: httpx2.Response) -> None:
    """Shut the connection a response is read from, so a read blocked on it ends now
    (closing the socket from another thread would not wake it)."""
    stream = response.extensions.get("network_stream")
    sock = None if stream is None else stream.get_extra_info("socket")
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):  # closed already
            sock.shutdown(socket.SHUT_RDWR)
