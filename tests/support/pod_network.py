"""The pod network of the operator's tests, where there is no kubelet, CNI or DNS.

A ``PodPort`` is the loopback port a broker's Pod object names: it forwards every unary
call to the broker's sidecar, as the cluster's network would, and in a partition plan
the operator pushes (``AdminService.UpdateAssignment``) it resolves the brokers' DNS
names to the sidecars' loopback addresses, as the cluster's DNS would; the same
``resolve`` rewrites the file the test projects for the kubelet. Only unary calls pass:
the operator makes no other kind. It counts the calls it forwards, by method (``calls``):
what the operator asked of the broker.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent import futures
from typing import cast

import grpc

from tierlog.api.v1 import admin_service_pb2

__all__ = ["UPDATE_ASSIGNMENT", "PodPort"]

UPDATE_ASSIGNMENT = "/tierlog.v1.AdminService/UpdateAssignment"
_NOT_FORWARDED = ("grpc-", ":", "user-agent")  # set by each side's gRPC itself


class PodPort:
    """``127.0.0.1:port`` in front of the sidecar at ``target``; ``resolve`` turns a plan's
    document (``assignment.json``) into what the sidecars here can dial."""

    def __init__(self, target: str, resolve: Callable[[str], str]):
        self._channel = grpc.insecure_channel(target)
        self._forward = _Forward(self._channel, resolve)
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=4), handlers=[self._forward]
        )
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    def calls(self) -> Counter[str]:
        """The calls forwarded so far, by method (``/tierlog.v1.AdminService/ListTopics``)."""
        with self._forward.lock:
            return Counter(self._forward.calls)

    def close(self) -> None:
        self._server.stop(None)
        self._channel.close()


class _Forward(grpc.GenericRpcHandler):
    def __init__(self, channel: grpc.Channel, resolve: Callable[[str], str]):
        self.channel, self.resolve = channel, resolve
        self.calls: Counter[str] = Counter()
        self.lock = threading.Lock()

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[bytes, bytes]:
        method = handler_call_details.method
        call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = self.channel.unary_unary(method)

        def forward(request: bytes, context: grpc.ServicerContext) -> bytes:
            with self.lock:
                self.calls[method] += 1
            if method == UPDATE_ASSIGNMENT:
                request = self._resolved(request)
            metadata = _forwarded(context.invocation_metadata())
            try:
                return call(request, timeout=context.time_remaining(), metadata=metadata)
            except grpc.RpcError as error:  # the sidecar's answer, or its absence, as it was
                failed = cast(grpc.Call, error)
                context.set_trailing_metadata(_forwarded(failed.trailing_metadata() or ()))
                context.abort(failed.code(), failed.details() or "")

        return grpc.unary_unary_rpc_method_handler(forward)

    def _resolved(self, request: bytes) -> bytes:
        """The pushed request with the plan's broker names resolved."""
        pushed = admin_service_pb2.UpdateAssignmentRequest.FromString(request)
        resolved = admin_service_pb2.UpdateAssignmentRequest(document=self.resolve(pushed.document))
        return resolved.SerializeToString()


def _forwarded(metadata: Iterable[tuple[str, str | bytes]]) -> tuple[tuple[str, str | bytes], ...]:
    return tuple((key, value) for key, value in metadata if not key.startswith(_NOT_FORWARDED))
