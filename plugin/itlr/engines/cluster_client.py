"""The cluster client layer: each read (and the few writes that go with it) a cluster is asked
for, written once as an *operation*, and two faces that send it.

An operation is a generator (sans-I/O, like h11): it yields each `ClusterRead` it needs
(a request: method, path, body), receives the `ClusterAnswer` (status, body), and returns a typed
value, raising `ClusterRefused` on an answer it cannot use. The operations themselves are in
itlr.engines.cluster_reads. None touches a client, so the same sequence of steps serves:

- the sync face (`run`, over `ClientTransport`): an opensearch-py or elasticsearch-py client with
  its configured credentials, for the backends. A refusal raises the client's own exception, so
  the backend's `errors()` context turns it into the same one-line error as any other call;
- the async face (`run_async`), over any transport with `async answer(read)`: the proxy's httpx
  client sending exactly the headers it is given (itlr.proxy.caller: the caller's own, or the
  proxy's own for its integrity watch), never credentials it reads for itself.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from itlr.errors import EngineError

T = TypeVar("T")


@dataclass(frozen=True)
class ClusterRead:
    """One request to a cluster: what each face sends through its own transport (`params`: the
    query string)."""

    method: str
    path: str
    body: dict[str, Any] | None = None
    params: Mapping[str, str] | None = None


@dataclass(frozen=True)
class ClusterAnswer:
    """What a cluster answered to a `ClusterRead`: the status and the body (parsed JSON, or the
    text when `is_json` is False). `source`: what the transport got (the client's exception on
    the sync face, the httpx.Response on the async one), so a face can give the caller the
    engine's own refusal."""

    status: int
    body: Any
    is_json: bool = True
    source: Any = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


class ClusterRefused(EngineError):
    """An operation cannot use an answer (a refusal, a body it cannot read): the message says
    which step, `answer` what came back."""

    def __init__(self, message: str, answer: ClusterAnswer) -> None:
        self.answer = answer
        super().__init__(message)


# What an operation is: yields reads, is sent answers, returns its value.
Operation = Generator[ClusterRead, ClusterAnswer, T]


class SyncTransport(Protocol):
    def answer(self, read: ClusterRead) -> ClusterAnswer: ...


class AsyncTransport(Protocol):
    async def answer(self, read: ClusterRead) -> ClusterAnswer: ...


def run(operation: Operation[T], transport: SyncTransport) -> T:
    """Drive an operation over a sync transport. A refusal of an answer that carries the
    client's exception raises that exception: the caller's error mapping words it as today."""
    try:
        read = next(operation)
        while True:
            read = operation.send(transport.answer(read))
    except StopIteration as done:
        value: T = done.value
        return value
    except ClusterRefused as refused:
        if isinstance(refused.answer.source, BaseException):
            raise refused.answer.source from None
        raise


async def run_async(operation: Operation[T], transport: AsyncTransport) -> T:
    """Drive an operation over an async transport (ClusterRefused propagates)."""
    try:
        read = next(operation)
        while True:
            read = operation.send(await transport.answer(read))
    except StopIteration as done:
        value: T = done.value
        return value


# The headers elasticsearch-py's own API methods send (its compatibility mode rewrites them).
_ACCEPT = {"accept": "application/json"}
_SENDS_JSON = {**_ACCEPT, "content-type": "application/json"}


class ClientTransport:
    """The sync transport over an opensearch-py or elasticsearch-py (8) client: the client's
    configured credentials, retries and time-outs. An HTTP refusal becomes an answer (the
    client's exception kept as its `source`); a connection failure propagates as the client
    raised it."""

    def __init__(self, client: Any) -> None:
        self.client = client
        # elasticsearch-py 8 sends from the client itself; opensearch-py from its transport.
        self._elasticsearch = hasattr(client, "perform_request")

    def answer(self, read: ClusterRead) -> ClusterAnswer:
        if self._elasticsearch:
            return self._elasticsearch_answer(read)
        from opensearchpy import TransportError

        try:
            body = self.client.transport.perform_request(
                read.method, read.path, params=read.params, body=read.body
            )
        except TransportError as refused:
            if not isinstance(refused.status_code, int):
                raise  # no answer at all (`N/A`): the connection failed
            return ClusterAnswer(refused.status_code, refused.info, source=refused)
        # opensearch-py returns the body of any 2xx answer without its status.
        return ClusterAnswer(200, body)

    def _elasticsearch_answer(self, read: ClusterRead) -> ClusterAnswer:
        from elasticsearch import ApiError

        headers = _SENDS_JSON if read.body is not None else _ACCEPT
        try:
            response = self.client.perform_request(
                read.method, read.path, params=read.params, headers=headers, body=read.body
            )
        except ApiError as refused:
            return ClusterAnswer(refused.meta.status, refused.body, source=refused)
        return ClusterAnswer(response.meta.status, response.body)


__all__ = [
    "AsyncTransport",
    "ClientTransport",
    "ClusterAnswer",
    "ClusterRead",
    "ClusterRefused",
    "Operation",
    "SyncTransport",
    "run",
    "run_async",
]
