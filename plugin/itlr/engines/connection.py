"""The connection layer: how to reach a cluster (URL, auth, TLS), which engine answers there, and
the official client for it (opensearch-py or elasticsearch-py), with its exceptions turned into
one actionable line. Everything that does I/O to a cluster goes through here; the dialects
(request bodies) know nothing of it.
"""

from __future__ import annotations

import base64
import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from itlr.errors import EngineError, IndexStateError, short_text
from itlr.urls import split_credentials

if TYPE_CHECKING:
    from elasticsearch import Elasticsearch
    from opensearchpy import OpenSearch
    from opensearchpy.serializer import JSONSerializer

REQUEST_TIMEOUT = 30.0
DETECT_TIMEOUT = 10.0


@dataclass(frozen=True)
class Connection:
    """How to reach a cluster. Secrets come from arguments or ITLR_* environment variables and
    are never printed."""

    url: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    api_key: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    verify_certs: bool = True

    def __post_init__(self) -> None:
        # Credentials in the URL (any host, any form) move to `user` / `password`: every
        # message that names `url` is then safe to show (itlr.urls).
        url, user, password = split_credentials(self.url)
        if url != self.url:
            object.__setattr__(self, "url", url.rstrip("/"))
            if self.user is None and self.api_key is None:
                object.__setattr__(self, "user", user)
                object.__setattr__(self, "password", password)

    @classmethod
    def from_env(cls, url: str, **given: Any) -> Connection:
        url, url_user, url_password = split_credentials(url)
        values = {
            "user": given.get("user") or url_user or os.environ.get("ITLR_USER"),
            "password": given.get("password") or url_password or os.environ.get("ITLR_PASSWORD"),
            "api_key": given.get("api_key") or os.environ.get("ITLR_API_KEY"),
            "ca_file": given.get("ca_file") or os.environ.get("ITLR_CA_FILE"),
        }
        return cls(url.rstrip("/"), verify_certs=given.get("verify_certs", True), **values)

    @property
    def https(self) -> bool:
        return self.url.startswith("https")

    @property
    def hosts(self) -> list[str]:
        """`url` may list several nodes of one cluster, comma-separated: the clients spread
        requests over them and retry a failed idempotent request on the next live one."""
        return [host.strip().rstrip("/") for host in self.url.split(",") if host.strip()]

    def auth_headers(self) -> dict[str, str]:
        """The Authorization header for these credentials; empty when there are none."""
        if self.api_key:
            return {"authorization": f"ApiKey {self.api_key}"}
        if self.user:
            pair = f"{self.user}:{self.password or ''}".encode()
            return {"authorization": f"Basic {base64.b64encode(pair).decode()}"}
        return {}

    def opensearch(self, timeout: float = REQUEST_TIMEOUT, max_retries: int = 3) -> OpenSearch:
        """An opensearch-py client. OpenSearch has no API keys; an `api_key` is still sent as a
        header, so that the same client can ask any cluster's root endpoint what it is."""
        from opensearchpy import OpenSearch

        kwargs: dict[str, Any] = {
            "hosts": self.hosts,
            "timeout": timeout,
            "max_retries": max_retries,
            "retry_on_timeout": max_retries > 0,
            "serializer": _orjson_serializer(),
        }
        if self.api_key:
            kwargs["headers"] = self.auth_headers()
        elif self.user is not None:
            kwargs["http_auth"] = (self.user, self.password or "")
        if self.https:
            kwargs.update(use_ssl=True, verify_certs=self.verify_certs, ssl_show_warn=False)
            if self.ca_file:
                kwargs["ca_certs"] = self.ca_file
        return OpenSearch(**kwargs)

    def elasticsearch(self, timeout: float = REQUEST_TIMEOUT) -> Elasticsearch:
        """An elasticsearch-py client. The client is pinned below 9: an 8.x client speaks to
        8.x servers natively and to 9.x ones through their REST compatibility with N-1, whereas
        a 9.x client's `compatible-with=9` header is refused by every 8.x server."""
        from elastic_transport import OrjsonSerializer
        from elasticsearch import Elasticsearch

        kwargs: dict[str, Any] = {
            "hosts": self.hosts,
            "request_timeout": timeout,
            # 5xx and timeouts are retried by the client; 429 by the bulk helper.
            "retry_on_timeout": True,
            "max_retries": 3,
            "serializers": {"application/json": OrjsonSerializer()},
        }
        if self.api_key:
            kwargs["api_key"] = self.api_key
        elif self.user is not None:
            kwargs["basic_auth"] = (self.user, self.password or "")
        if self.https:
            kwargs.update(verify_certs=self.verify_certs, ssl_show_warn=False)
            if self.ca_file:
                kwargs["ca_certs"] = self.ca_file
        return Elasticsearch(**kwargs)


# -- engine detection ----------------------------------------------------------------------


@contextlib.contextmanager
def detection_errors(url: str) -> Iterator[None]:
    """opensearch-py's exceptions while reading a cluster's root (itlr.engines.factory asks
    with opensearch-py, since it makes no product check and so can read either engine's
    answer) become one actionable line."""
    from opensearchpy import exceptions as os_errors

    try:
        yield
    except os_errors.SerializationError as garbled:
        raise EngineError(
            f"{url} is neither OpenSearch nor Elasticsearch: GET / answered "
            f"{short_text(str(garbled))}; check `url`"
        ) from None
    except os_errors.SSLError as untrusted:
        raise untrusted_tls(url, untrusted) from None
    except os_errors.ConnectionError as down:
        raise EngineError(
            f"cannot reach {url} ({_cause(down)}): is it running? check `url`"
        ) from None
    except os_errors.TransportError as refused:
        raise EngineError(
            f"{url} answered {refused.status_code} to GET /: check the URL and credentials"
        ) from None


# -- errors as one line ----------------------------------------------------------------------


def error_reason(payload: Any, fallback: Any) -> str:
    """`type: reason` from an error response body, or `fallback` as text."""
    if isinstance(payload, dict):
        cause = payload.get("error", {})
        if isinstance(cause, dict):
            root = (cause.get("root_cause") or [{}])[0]
            caused = cause.get("caused_by") or {}
            return (
                f"{root.get('type') or cause.get('type')}: "
                f"{caused.get('reason') or root.get('reason') or cause.get('reason')}"
            )
    return short_text(str(payload if isinstance(payload, str) and payload else fallback))


def _cause(error: Any) -> str:
    info = getattr(error, "info", None)
    return type(info).__name__ if isinstance(info, BaseException) else "connection refused"


class ClusterTimeout(EngineError):
    """The cluster did not answer in time (a client's read time-out, or the overall deadline
    of itlr.engines.deadline): it may be running, but slow."""


def _timed_out(product: str, url: str, error: Any) -> ClusterTimeout:
    info = getattr(error, "info", None) or getattr(error, "message", None) or error
    said = "" if "deadline" not in str(info) else " (the overall deadline of a request)"
    return ClusterTimeout(
        f"{product} at {url} did not answer in time{said}: it may be overloaded; try again, "
        "or raise the time-out (--upstream-timeout for `itlr serve`)"
    )


def missing_index(url: str, index: str) -> IndexStateError:
    return IndexStateError(
        f"index {index!r} does not exist at {url}: create it by "
        "adding documents (`itlr ingest FILE` or `Index.add`)"
    )


def untrusted_tls(url: str, error: Any) -> EngineError:
    """A TLS handshake that failed: most often a certificate signed by a CA not trusted here."""
    text = f"{error} {getattr(error, '__cause__', '')}"
    cause = "certificate verify failed" if "CERTIFICATE_VERIFY_FAILED" in text else "TLS error"
    return EngineError(
        f"cannot reach {url} over TLS ({cause}): give the CA that signed its certificate with "
        "`ca_file` / --ca-file / ITLR_CA_FILE (or `verify_certs=False` for a test cluster only)"
    )


def is_tls_failure(error: BaseException) -> bool:
    """Whether a connection failed in the TLS handshake (not a refused or dropped one)."""
    seen: BaseException | None = error
    while seen is not None:
        if "CERTIFICATE_VERIFY_FAILED" in str(seen) or "SSL" in type(seen).__name__:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _denied(product: str, url: str, reason: str) -> EngineError:
    """A 403: the engine's reason (the action, the user, the privileges that grant it) and
    what itlr needs."""
    if "script" in reason:  # cluster:admin/script/get|put: itlr's stored scripts
        need = (
            "reading and installing itlr's stored scripts needs the cluster privilege `manage`: "
            "have an administrator run `itlr install` once"
        )
    else:
        need = (
            "searching needs `read` on the index; ingestion and back-fill also need `write` "
            "and `manage` on it"
        )
    return EngineError(f"{product} at {url} denied the request ({reason}): {need}")


@contextlib.contextmanager
def opensearch_errors(url: str, index: str) -> Iterator[None]:
    """opensearch-py's exceptions become one actionable line."""
    from opensearchpy import exceptions as os_errors

    def reason(error: Any) -> str:
        return error_reason(getattr(error, "info", None), getattr(error, "error", error))

    try:
        yield
    except os_errors.SSLError as untrusted:
        raise untrusted_tls(url, untrusted) from None
    except os_errors.ConnectionTimeout as slow:
        raise _timed_out("OpenSearch", url, slow) from None
    except os_errors.ConnectionError as down:
        raise EngineError(
            f"cannot reach OpenSearch at {url} ({_cause(down)}): is it running? check `url`"
        ) from None
    except os_errors.AuthenticationException:
        raise EngineError(
            f"OpenSearch at {url} refused the credentials: check `user`/`password` or `api_key`"
        ) from None
    except os_errors.AuthorizationException as denied:
        raise _denied("OpenSearch", url, reason(denied)) from None
    except os_errors.NotFoundError as missing:
        if "index_not_found" in str(missing.error):
            raise missing_index(url, index) from None
        raise EngineError(f"OpenSearch at {url}: {reason(missing)}") from None
    except os_errors.TransportError as refused:
        raise EngineError(f"OpenSearch at {url} refused the request: {reason(refused)}") from None
    except os_errors.SerializationError as garbled:
        raise EngineError(
            f"{url} does not answer like OpenSearch ({short_text(str(garbled))}): check `url`"
        ) from None


@contextlib.contextmanager
def elasticsearch_errors(url: str, index: str) -> Iterator[None]:
    """elasticsearch-py's exceptions become one actionable line."""
    import elastic_transport
    from elasticsearch import exceptions as es_errors

    def reason(error: Any) -> str:
        return error_reason(getattr(error, "body", None), getattr(error, "message", error))

    try:
        yield
    except es_errors.AuthenticationException:
        raise EngineError(
            f"Elasticsearch at {url} refused the credentials: check `user`/`password` or `api_key`"
        ) from None
    except es_errors.AuthorizationException as denied:
        raise _denied("Elasticsearch", url, reason(denied)) from None
    except es_errors.NotFoundError as missing:
        if "index_not_found" in str(missing):
            raise missing_index(url, index) from None
        raise EngineError(f"Elasticsearch at {url}: {reason(missing)}") from None
    except es_errors.UnsupportedProductError:
        raise EngineError(
            f"{url} is not Elasticsearch (the client's product check failed): "
            'use `engine="opensearch"` or `engine="auto"`'
        ) from None
    except es_errors.ApiError as refused:
        text = reason(refused)
        if "script_lang not supported [painless]" in text or "lang [painless]" in text:
            text += " (this node has no lang-painless module: use a full distribution)"
        raise EngineError(f"Elasticsearch at {url} refused the request: {text}") from None
    except elastic_transport.TlsError as untrusted:
        raise untrusted_tls(url, untrusted) from None
    except elastic_transport.ConnectionTimeout as slow:
        raise _timed_out("Elasticsearch", url, slow) from None
    except elastic_transport.ConnectionError as down:
        raise EngineError(
            f"cannot reach Elasticsearch at {url} ({type(down).__name__}): "
            "is it running? check `url`"
        ) from None
    except elastic_transport.TransportError as failed:
        raise EngineError(f"Elasticsearch at {url}: {failed}") from None


def _orjson_serializer() -> JSONSerializer:
    """opensearch-py's JSON serializer on orjson: a logical query carries every term's vector,
    and the standard library spent 0.9 ms encoding the body of a 3-term query (orjson: 0.05
    ms); reading a round's `_msearch` answer (the hits and the probes' scores) took 102 us
    against 46. Anything orjson refuses goes through the standard serializer, which also
    raises the client's SerializationError for a body that is no JSON."""
    import orjson
    from opensearchpy.serializer import JSONSerializer

    class OrjsonSerializer(JSONSerializer):
        def dumps(self, data: Any) -> str | bytes:
            # The base passes str and bytes through as they are; its stub says Any.
            if isinstance(data, str | bytes):
                return cast("str | bytes", super().dumps(data))
            try:
                return orjson.dumps(data, option=orjson.OPT_SERIALIZE_NUMPY).decode()
            except TypeError:
                return cast("str | bytes", super().dumps(data))

        def loads(self, s: str) -> Any:
            try:
                return orjson.loads(s)
            except orjson.JSONDecodeError:  # not JSON, or integers beyond 64 bits
                return super().loads(s)

    return OrjsonSerializer()
