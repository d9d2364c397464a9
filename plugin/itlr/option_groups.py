"""Option groups: the values that travel together, as small frozen objects passed through whole
(the CLI builds them from its flags, `Index` from its keywords, and hands them on unchanged).

- how to reach a cluster: itlr.engines.connection.Connection (URL, credentials, TLS);
- what embeds texts: `EncoderOptions` (model, encoder, endpoint, prompts);
- how to back-fill an index and follow it after: `BackfillOptions`;
- how to search: itlr.options.SearchOptions.

Each checks its values once, when it is made, in one line naming the option as Python does
(`batch_size`), which the CLI shows as its flag (--batch-size). The
keywords `Index.open` / `Index.backfill` / `Index.follow` took before the groups existed still
work: `fold` gathers them into their group.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from itlr.errors import ConfigurationError

if TYPE_CHECKING:
    from itlr.embed import Embedder
    from itlr.engines.connection import Connection

# A back-fill's documents per embedding batch (and the follower's).
BATCH_SIZE = 64
# Seconds between two looks of a follower at an index that had nothing to do.
FOLLOW_INTERVAL = 1.0
# Documents a second the follower's hash sweep reads (0: none).
VERIFY_RATE = 1000.0


@dataclass(frozen=True)
class EncoderOptions:
    """What embeds texts. `model`: a sentence-transformers path or name (None: the bundled
    all-MiniLM-L6-v2), or with the openai encoder the name the endpoint serves; `encoder`:
    what runs it (itlr.embed.ENCODERS; None: $ITLR_ENCODER, else onnx); `encoder_url`: the
    openai encoder's endpoint; `query_prompt` / `passage_prompt`: text put before query terms
    / documents (E5's "query: "), recorded in an index itlr makes (itlr.prompts)."""

    model: str | None = None
    encoder: str | None = None
    encoder_url: str | None = None
    query_prompt: str | None = None
    passage_prompt: str | None = None

    def __post_init__(self) -> None:
        if self.encoder is not None:
            from itlr.embed import resolve_encoder

            resolve_encoder(self.encoder)  # an unknown encoder: one line naming the choices

    def embedder(self) -> Embedder:
        """The process-wide embedder of this model, encoder and endpoint (without prompts)."""
        from itlr.embed import get_embedder

        return get_embedder(self.model, self.encoder, self.encoder_url)

    def passage_embedder(self) -> Embedder:
        """What a back-fill, and a follower after it, embeds texts with: the passage prompt in
        front, so both write the vectors a search with the matching query prompt expects."""
        return self.embedder().with_prompts("", self.passage_prompt or "")


@dataclass(frozen=True)
class BackfillOptions:
    """How to back-fill an index (`Index.backfill`, `itlr backfill`) and follow it after
    (`Index.follow`, `--follow`): the follower embeds and writes as the back-fill did.

    into:             mirror the source into this index instead of writing in place (itlr.into).
    alias:            with `into`: point this alias at the copy when done.
    install_pipeline: make itlr's hash guard the index's final pipeline (itlr.hash_guard).
    exact_only:       in place on an OpenSearch index without index.knn: the vector mapped
                      without an ANN method.
    batch_size:       documents per embedding batch.
    interval:         following: seconds between two looks at an idle index.
    verify_rate:      following in place: documents a second the hash sweep re-reads (0: none).
    """

    into: str | None = None
    alias: str | None = None
    install_pipeline: bool = False
    exact_only: bool = False
    batch_size: int = BATCH_SIZE
    interval: float = FOLLOW_INTERVAL
    verify_rate: float = VERIFY_RATE

    def __post_init__(self) -> None:
        if self.alias is not None and not self.into:
            raise ConfigurationError("--alias moves an alias to the --into index: give --into")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int):
            raise ConfigurationError(
                f"`batch_size` must be a whole number, got {self.batch_size!r}"
            )
        if self.batch_size < 1:
            raise ConfigurationError(f"`batch_size` must be at least 1, got {self.batch_size}")
        if not _finite(self.interval) or self.interval <= 0:
            raise ConfigurationError(
                f"`interval` must be a number of seconds above 0, got {self.interval!r}"
            )
        if not _finite(self.verify_rate) or self.verify_rate < 0:
            raise ConfigurationError(
                f"`verify_rate` must be 0 (no hash sweep) or more documents a second, got "
                f"{self.verify_rate!r}"
            )


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class ConnectionKeywords(TypedDict, total=False):
    """`Connection`'s fields but the URL, as keywords (with ITLR_* environment fallbacks)."""

    user: str | None
    password: str | None
    api_key: str | None
    ca_file: str | None
    verify_certs: bool


class EncoderKeywords(TypedDict, total=False):
    """`EncoderOptions`' fields as keywords."""

    model: str | None
    encoder: str | None
    encoder_url: str | None
    query_prompt: str | None
    passage_prompt: str | None


class OpenKeywords(ConnectionKeywords, EncoderKeywords, total=False):
    """The keywords `Index.open` folds into its `connection` and `encoding` groups."""


class BackfillKeywords(ConnectionKeywords, total=False):
    """The keywords `Index.backfill` / `Index.follow` fold into their groups (the encoder's
    but the query prompt, which a back-fill never uses)."""

    model: str | None
    encoder: str | None
    encoder_url: str | None
    passage_prompt: str | None
    into: str | None
    alias: str | None
    install_pipeline: bool
    exact_only: bool
    batch_size: int
    interval: float
    verify_rate: float | None


Group = TypeVar("Group", EncoderOptions, BackfillOptions)


def fold(
    group: type[Group], given: Group | None, keywords: Mapping[str, Any], argument: str
) -> Group:
    """The group `argument` names: `given` whole, or one made of the keywords that are its
    fields (with the group's defaults for the others). Both at once is an error: which value
    of a field wins would be a guess."""
    # None for a field whose default is not None meant "the default" before the groups too.
    defaults = {item.name: item.default for item in fields(group)}
    chosen = {
        name: value
        for name, value in keywords.items()
        if name in defaults and not (value is None and defaults[name] is not None)
    }
    if given is None:
        return group(**chosen)
    if chosen:
        raise ConfigurationError(
            f"give either `{argument}` or its keywords ({', '.join(sorted(chosen))}), not both"
        )
    return given


def fold_connection(
    url: str | None, given: Connection | None, keywords: Mapping[str, Any]
) -> Connection | None:
    """The cluster connection: `given` whole, or one made of `url` and the credential keywords
    (each falling back to its ITLR_* environment variable); None without either."""
    from itlr.engines.connection import Connection

    chosen = {name: keywords[name] for name in _keys(ConnectionKeywords) if name in keywords}
    if given is None:
        return Connection.from_env(url, **chosen) if url is not None else None
    if url is not None or chosen:
        named = ", ".join(["url"] * (url is not None) + sorted(chosen))
        raise ConfigurationError(f"give either `connection` or its keywords ({named}), not both")
    return given


def refuse_unknown(method: str, keywords: Mapping[str, Any], known: type) -> None:
    """A keyword no group of `method` has is refused as Python refuses one (a relay of
    `**keywords` would otherwise drop it without a word)."""
    extra = sorted(set(keywords) - _keys(known))
    if extra:
        raise TypeError(f"{method}() got an unexpected keyword argument {extra[0]!r}")


def _keys(keywords: type) -> frozenset[str]:
    return frozenset(getattr(keywords, "__required_keys__", ())) | frozenset(
        getattr(keywords, "__optional_keys__", ())
    )


__all__ = [
    "BackfillKeywords",
    "BackfillOptions",
    "ConnectionKeywords",
    "EncoderKeywords",
    "EncoderOptions",
    "OpenKeywords",
    "fold",
    "fold_connection",
    "refuse_unknown",
]
