"""Every cluster request the proxy makes because of a caller, in one layer that takes the
caller's credentials as a required argument (issue 57): the mapping of a searched index, the
engine's root, token statistics, coverage counts, template renderings. The layer holds an HTTP
client without credentials and never sees the proxy's own (`Connection.auth_headers`), so a read
a caller triggered cannot go out as the proxy's user: what the caller learns is what the
cluster lets that caller see. The proxy's own requests (its stored scripts and pipeline, on its
own schedule) are in itlr.proxy.integrity.

Index names and patterns a caller gives are checked here and percent-escaped into the path, so
a name cannot reach another API (`b%2F_mapping%23` was a put-mapping request). Each request has
one deadline for the whole exchange, not one per read: an upstream that trickles its answer a
byte at a time is cut off at the deadline like a silent one.

Anything kept from these reads is kept per caller (`Caller.digest`) in a `TimedLRU`: bounded in
entries and in age, so a stream of distinct callers costs a fixed amount of memory.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from itlr.extras import missing_extra

try:
    import httpx
except ImportError as absent:
    raise missing_extra("serve", absent) from None

from itlr.engines.cluster_client import ClusterAnswer, ClusterRead, Operation, run_async
from itlr.engines.cluster_reads import index_segment
from itlr.engines.connection import is_tls_failure, untrusted_tls
from itlr.errors import EngineError, ItlrError

UPSTREAM_TIMEOUT_ENV = "ITLR_UPSTREAM_TIMEOUT"

# Headers that carry the caller's identity to the cluster: credentials, and the user a caller
# acts as (Elasticsearch's run-as, the OpenSearch security plugin's impersonation), whose
# document-level security the proxy's own requests (token statistics, mappings) must see too.
AUTH_HEADERS = (
    "authorization",
    "es-secondary-authorization",
    "cookie",
    "es-security-runas-user",
    "opendistro_security_impersonate_as",
)


def auth_headers(headers: Any) -> dict[str, str]:
    return {name: headers[name] for name in AUTH_HEADERS if name in headers}


def caller_digest(headers: Mapping[str, str]) -> bytes:
    """A digest of the identity-bearing headers: the key under which what a caller read is
    kept, without keeping their credentials."""
    digest = hashlib.blake2b(digest_size=16)
    for name in sorted(headers):
        digest.update(f"{name.lower()}\0{headers[name]}\0".encode("utf-8", "surrogateescape"))
    return digest.digest()


@dataclass(frozen=True)
class Caller:
    """Who a request came from, as the cluster will judge it: the identity headers it carried
    (none for an anonymous caller) and their digest."""

    headers: Mapping[str, str]
    digest: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "digest", caller_digest(self.headers))

    @classmethod
    def of(cls, request_headers: Any) -> Caller:
        return cls(auth_headers(request_headers))


class BadTarget(ItlrError):
    """An index name or pattern the proxy will not put in a request path (400)."""


# What an index name cannot hold on either engine (and what would change the path's meaning):
# separators, query and fragment marks, quotes, spaces and control characters. Date math
# (`<logs-{now/d}>`) is refused with them: its `/` would need a second escaping.
NOT_IN_A_NAME = re.compile(r'[\\/?#"<>|\s\x00-\x1f\x7f{}]')


def index_path(target: str) -> str:
    """The target (an index, alias or pattern, or a comma-separated list of them, `-name`
    excluding one) as a path segment: checked, then percent-escaped but for `*` and `,`.
    BadTarget names what is wrong."""
    if not target or len(target) > 4096:
        raise BadTarget("give an index name or pattern (at most 4096 characters)")
    for part in target.split(","):
        name = part[1:] if part.startswith("-") and len(part) > 1 else part
        shown = name.encode("unicode_escape").decode("ascii")
        if not name:
            raise BadTarget(f"{target!r} holds an empty index name: separate names with one comma")
        if name in (".", ".."):
            raise BadTarget(f"{shown!r} is not an index name")
        bad = NOT_IN_A_NAME.search(name)
        if bad is not None:
            char = bad.group().encode("unicode_escape").decode("ascii")
            raise BadTarget(
                f"the index name {shown!r} holds {char!r}, which no index name can: give an "
                "index, alias or wildcard pattern (comma-separated for several)"
            )
    return index_segment(target)


class UpstreamTimeout(EngineError):
    """The upstream did not answer whole within the proxy's deadline: it is running, but slow."""

    def __init__(self, url: str, seconds: float | None) -> None:
        self.seconds = seconds
        super().__init__(
            f"the upstream {url} did not answer within {seconds:g} s (the proxy's upstream "
            f"time-out: raise it with --upstream-timeout or {UPSTREAM_TIMEOUT_ENV})"
        )


async def within(deadline: float, url: str, send: Any, *args: Any, **kwargs: Any) -> httpx.Response:
    """`await send(*args, **kwargs)` (an httpx request, its body read whole) under one deadline
    for the whole exchange; a slow or unreachable upstream as one line."""
    try:
        async with asyncio.timeout(deadline):
            response: httpx.Response = await send(*args, **kwargs)
            return response
    except (TimeoutError, httpx.TimeoutException):
        raise UpstreamTimeout(url, deadline) from None
    except httpx.TransportError as down:
        if is_tls_failure(down):
            raise untrusted_tls(url, down) from None
        raise EngineError(
            f"cannot reach the upstream {url} ({type(down).__name__}): is it running? check `url`"
        ) from None


class HttpxTransport:
    """The async transport of the cluster client layer (itlr.engines.cluster_client) over the
    proxy's httpx client: each read sent with exactly `headers` (a caller's identity headers,
    or the proxy's own for its integrity watch), under one deadline for the whole exchange."""

    def __init__(
        self, client: httpx.AsyncClient, url: str, deadline: float, headers: Mapping[str, str]
    ) -> None:
        self.client = client
        self.url = url
        self.deadline = deadline
        self.headers = dict(headers)

    async def answer(self, read: ClusterRead) -> ClusterAnswer:
        response = await within(
            self.deadline,
            self.url,
            self.client.request,
            read.method,
            read.path,
            headers=self.headers,
            params=read.params,
            json=read.body,
        )
        try:
            return ClusterAnswer(response.status_code, response.json(), source=response)
        except ValueError:
            return ClusterAnswer(response.status_code, response.text, False, response)


class CallerReads:
    """The cluster requests the proxy makes for a caller, each as that caller and nobody else.
    `client`: an httpx client with the upstream's base URL and no credentials of its own."""

    def __init__(self, client: httpx.AsyncClient, url: str, deadline: float) -> None:
        self.client = client
        self.url = url
        self.deadline = deadline

    async def send(
        self,
        caller: Caller,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        json: Any = None,
    ) -> httpx.Response:
        """One request as `caller` (its identity headers, nothing added); `path` already
        escaped (`index_path`)."""
        return await within(
            self.deadline,
            self.url,
            self.client.request,
            method,
            path,
            headers=dict(caller.headers),
            params=params,
            json=json,
        )

    def as_caller(self, caller: Caller) -> HttpxTransport:
        """A transport that sends as `caller` and nobody else."""
        return HttpxTransport(self.client, self.url, self.deadline, caller.headers)

    async def run(self, caller: Caller, operation: Operation[T]) -> T:
        """A cluster operation (itlr.engines.cluster_client), every read of it as `caller`."""
        return await run_async(operation, self.as_caller(caller))

    async def about(self, caller: Caller, target: str, operation: Operation[T]) -> T:
        """An operation on `target`, an index, alias or pattern the caller gave (checked first:
        `index_path`, BadTarget), every read of it as `caller`."""
        index_path(target)
        return await self.run(caller, operation)

    async def render_template(self, caller: Caller, body: dict[str, Any]) -> httpx.Response:
        return await self.send(caller, "POST", "/_render/template", json=body)


K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
V = TypeVar("V")


class TimedLRU(Generic[K, V]):
    """At most `size` entries, none older than `max_age` seconds, least recently used out
    first. One event loop uses it (no lock)."""

    def __init__(self, size: int, max_age: float) -> None:
        self.size = size
        self.max_age = max_age
        self._kept: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def get(self, key: K) -> V | None:
        kept = self._kept.get(key)
        if kept is None:
            return None
        if time.monotonic() - kept[0] >= self.max_age:
            del self._kept[key]
            return None
        self._kept.move_to_end(key)
        return kept[1]

    def put(self, key: K, value: V) -> None:
        self._kept[key] = (time.monotonic(), value)
        self._kept.move_to_end(key)
        while len(self._kept) > self.size:
            self._kept.popitem(last=False)

    def young_keys(self) -> list[K]:
        """The keys of entries still young enough, oldest first."""
        now = time.monotonic()
        return [key for key, (at, _) in self._kept.items() if now - at < self.max_age]

    def values(self) -> list[V]:
        """The entries still young enough, oldest first."""
        now = time.monotonic()
        return [value for at, value in self._kept.values() if now - at < self.max_age]

    def clear(self) -> None:
        self._kept.clear()

    def __len__(self) -> int:
        return len(self._kept)


__all__ = [
    "AUTH_HEADERS",
    "BadTarget",
    "Caller",
    "CallerReads",
    "HttpxTransport",
    "TimedLRU",
    "UpstreamTimeout",
    "auth_headers",
    "caller_digest",
    "index_path",
    "within",
]
