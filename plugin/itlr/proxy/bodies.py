"""A request body as the engine will read it, so the proxy judges what the engine will parse,
not the bytes on the wire.

- **Content-Encoding**: the engines inflate `gzip` / `x-gzip` and `deflate` / `x-deflate`
  bodies (zlib-wrapped or raw) themselves; so does the proxy, to at most `max_body_bytes`
  (a decompression bomb is a 413, never memory growth). It cannot judge a body in any other
  encoding, so on the paths it judges (searches and the APIs that take a query) such a body is
  refused with a 415 naming the encodings it reads.
- **Content-Type**: JSON (also NDJSON and `application/vnd.*+json`), YAML, CBOR and SMILE are
  all bodies an engine takes. The proxy reads YAML and CBOR to find a clause on the virtual field
  and SMILE by its bytes (a SMILE string is its UTF-8 bytes); a logical search is rewritten from
  JSON only, so one in another format is refused in one line (`not_json`), and one without a
  clause passes through untouched.
- **`wrapper` queries** hold a query as base64 (of JSON, YAML, CBOR or SMILE): one that names
  the field is unwrapped in place (`unwrapped`), so the clause inside is placed, rewritten or
  refused as if it had been written out; one the proxy cannot read but that may name the field
  is refused.

A YAML or CBOR document may share values (anchors, shared references): walking such a body
could visit far more values than it has bytes, so a body is measured first and refused when
it holds more values than bytes, or nests deeper than `max_depth`.
"""

from __future__ import annotations

import base64
import binascii
import io
import zlib
from dataclasses import dataclass
from typing import Any

from itlr.extras import missing_extra

try:
    import cbor2
    import yaml
except ImportError as absent:
    raise missing_extra("serve", absent) from None

from itlr.limits import LIMITS
from itlr.proxy.codec import BadBody, decode_json

JSON, YAML, CBOR, SMILE = "json", "yaml", "cbor", "smile"
SMILE_HEADER = b":)\n"
# Encodings the engines inflate themselves (Netty's HttpContentDecompressor), by name.
GZIP_NAMES = ("gzip", "x-gzip")
DEFLATE_NAMES = ("deflate", "x-deflate")
# Values of a body's format separated one from the next in a multi-search (`_msearch`).
BINARY_SEPARATOR = b"\xff"


class UnreadableBody(BadBody):
    """A body the proxy cannot judge, where a clause could hide (415)."""

    status = 415
    kind = "itlr_unsupported_media_type"


class NotAcceptable(BadBody):
    """A logical search that asks for its answer in another format than JSON (406)."""

    status = 406
    kind = "itlr_not_acceptable"


def body_format(content_type: str | None) -> str:
    """JSON, YAML, CBOR or SMILE, as the engines pick a parser by media type (`application/
    yaml`, `application/vnd.elasticsearch+cbor; compatible-with=8`, ...); anything else is read
    as JSON, which is what the proxy forwards it as."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    subtype = media.rpartition("/")[2]
    for kind in (YAML, CBOR, SMILE):
        if subtype in (kind, f"x-{kind}") or subtype.endswith(f"+{kind}"):
            return kind
    return JSON


def _inflate(data: bytes, wbits: int, limit: int, what: str) -> bytes:
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as bad:
        raise BadBody(f"{what} is not valid compressed data ({bad})") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise LIMITS.refuse("max_body_bytes", limit + 1, f"{what} inflates to over {limit:,} bytes")
    if not inflater.eof:
        raise BadBody(f"{what} is cut short: its compressed stream does not end")
    if inflater.unused_data.strip(b"\r\n\t "):
        raise BadBody(f"{what} holds data after the end of its compressed stream: send one stream")
    return out


def _is_zlib(data: bytes) -> bool:
    """A zlib header (RFC 1950): deflate method and a checksum of the first two bytes."""
    return len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0


def inflated(received: bytes, encoding: str | None, what: str = "the body") -> bytes:
    """The body the engine reads from `received` sent with Content-Encoding `encoding`."""
    name = (encoding or "").strip().lower()
    if name in ("", "identity") or not received:
        return received
    limit = LIMITS.max_body_bytes
    if name in GZIP_NAMES:
        return _inflate(received, 16 + zlib.MAX_WBITS, limit, f"{what} (gzip)")
    if name in DEFLATE_NAMES:
        wbits = zlib.MAX_WBITS if _is_zlib(received) else -zlib.MAX_WBITS
        return _inflate(received, wbits, limit, f"{what} (deflate)")
    raise UnreadableBody(
        f"the proxy reads request bodies sent uncompressed, gzip or deflate, not with "
        f"Content-Encoding {encoding!r}: send it in one of those"
    )


@dataclass(frozen=True)
class RequestBody:
    """A request body: `received` as sent, `data` as the engine reads it (inflated), `kind`
    its format (JSON, YAML, CBOR or SMILE)."""

    received: bytes
    data: bytes
    kind: str
    content_type: str = ""

    @property
    def inflated(self) -> bool:
        return self.data is not self.received


def read_body(received: bytes, headers: Any) -> RequestBody:
    """`received` as the engine will read it, by its Content-Encoding and Content-Type."""
    content_type = headers.get("content-type") or ""
    data = inflated(received, headers.get("content-encoding"), "the request body")
    return RequestBody(received, data, body_format(content_type), content_type)


# -- values of other formats ---------------------------------------------------------------


def _measure(value: Any, what: str, budget: int) -> None:
    """Refuse a value nested deeper than max_depth, or made of more values than `budget` (a
    body whose shared values, YAML anchors or CBOR references, repeat it past its size)."""
    stack = [(value, 1)]
    seen = 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if seen > budget:
            raise BadBody(
                f"{what} expands to more values than it has bytes (shared values repeated): "
                "write each value out once"
            )
        if isinstance(item, dict | list):
            if depth > LIMITS.max_depth:
                raise LIMITS.refuse("max_depth", depth, f"{what} is nested over {depth} levels")
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
            if isinstance(item, dict):
                stack.extend((key, depth + 1) for key in item)


def _load_yaml(data: bytes, what: str) -> Any:
    try:
        # The C loader where libyaml is there (a tenth of the time), the safe one either way.
        return yaml.load(data, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (yaml.YAMLError, RecursionError, ValueError) as bad:
        first = str(bad).splitlines()[0] if str(bad) else type(bad).__name__
        raise BadBody(f"{what} is not YAML the proxy can read ({first})") from None


def _load_cbor_values(data: bytes, what: str) -> list[Any]:
    """The CBOR values of `data`, one or several (an `_msearch` separates them by 0xFF)."""
    stream = io.BytesIO(data)
    values: list[Any] = []
    position = 0
    try:
        while True:
            while position < len(data) and data[position] == BINARY_SEPARATOR[0]:
                position += 1
            if position >= len(data):
                return values
            stream.seek(position)
            values.append(cbor2.CBORDecoder(stream).decode())
            position = stream.tell()
    except (cbor2.CBORDecodeError, RecursionError, ValueError, OverflowError, MemoryError) as bad:
        raise BadBody(f"{what} is not CBOR the proxy can read ({bad})") from None


def values_of(data: bytes, kind: str, what: str) -> list[Any]:
    """The values a YAML or CBOR body holds (measured: see `_measure`)."""
    values = [_load_yaml(data, what)] if kind == YAML else _load_cbor_values(data, what)
    for value in values:
        _measure(value, what, max(len(data), 64))
    return values


def smile_may_name(data: bytes, field: str) -> bool:
    """Whether SMILE bytes may hold the field: every string of a SMILE document is written out
    as its UTF-8 bytes at least once (later repeats may be back-references), so a body without
    those bytes cannot name it; a `wrapper` query may hide it in base64."""
    return field.encode() in data or b"wrapper" in data


# -- wrapper queries -----------------------------------------------------------------------


def _sniffed(raw: bytes) -> str | None:
    """The format of a wrapper query's bytes, as the engines detect it from its content."""
    if raw.startswith(SMILE_HEADER):
        return SMILE
    stripped = raw.lstrip()
    if stripped.startswith(b"{"):
        return JSON
    if stripped.startswith(b"---"):
        return YAML
    if raw[:1] and (0xA0 <= raw[0] <= 0xBF or raw.startswith(b"\xd9\xd9\xf7")):
        return CBOR
    return None


def _wrapped_query(encoded: str, field: str, names: Any) -> Any | None:
    """The query a wrapper's base64 holds, when it names the field (None: it does not, or it
    is not a query the engine could read either)."""
    try:
        raw = base64.b64decode("".join(encoded.split()), validate=True)
    except (binascii.Error, ValueError):
        return None
    kind = _sniffed(raw)
    what = "a wrapper query"
    if kind == SMILE or kind is None:
        if kind == SMILE and smile_may_name(raw, field):
            raise UnreadableBody(
                f"a wrapper query in SMILE may hold {field}: the proxy cannot read it; write "
                "the query out in the body as JSON"
            )
        return None
    if kind == JSON:
        LIMITS.check_json_depth(raw, what)
        try:
            value = decode_json(raw)
        except ValueError:
            return None
    else:
        value = values_of(raw, kind, what)[0]
    value = unwrapped(value, field, names)
    return value if names(value, field) else None


def unwrapped(value: Any, field: str, names: Any) -> Any:
    """`value` with every `wrapper` query that names the field (`names(query, field)`)
    replaced by the query it holds; the rest as it was (the same objects when nothing was)."""
    if isinstance(value, list):
        items = [unwrapped(item, field, names) for item in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    if not isinstance(value, dict):
        return value
    wrapper = value.get("wrapper") if len(value) == 1 else None
    if isinstance(wrapper, dict) and isinstance(wrapper.get("query"), str):
        inner = _wrapped_query(wrapper["query"], field, names)
        return value if inner is None else inner
    changed = {key: unwrapped(item, field, names) for key, item in value.items()}
    return changed if any(changed[k] is not value[k] for k in value) else value


def not_json(kind: str, field: str, where: str = "body") -> UnreadableBody:
    """The refusal of a logical search sent in another format than JSON."""
    return UnreadableBody(
        f"a request with an {field}:(...) clause is read as JSON only, and this {where} is "
        f"{kind.upper()}: send it as JSON (Content-Type: application/json)"
    )
