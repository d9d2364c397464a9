"""Per-model prompts: the text some models want in front of a query or a passage (E5's
`query: ` / `passage: `, BGE's retrieval instruction).

The prompts are part of what the vectors mean, like the model: an index itlr makes records the
ones its documents were embedded with (`_meta.itlr` on a cluster, the embedded index's metadata),
and every later search and ingestion reads them from there. Prompts given for an index that
records others are refused in one line, so ingestion and search cannot disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from itlr.errors import ConfigurationError

QUERY_PROMPT_ENV = "ITLR_QUERY_PROMPT"
PASSAGE_PROMPT_ENV = "ITLR_PASSAGE_PROMPT"


@dataclass(frozen=True)
class Prompts:
    query: str = ""
    passage: str = ""

    def to_meta(self) -> dict[str, str]:
        return {"query_prompt": self.query, "passage_prompt": self.passage}

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> Prompts:
        """The prompts an index's metadata records; none recorded (an index made before
        prompts existed) is no prompt, which is how its documents were embedded."""
        return cls(str(meta.get("query_prompt") or ""), str(meta.get("passage_prompt") or ""))


def settle(query: str | None, passage: str | None, recorded: Prompts | None, where: str) -> Prompts:
    """The prompts to embed with: the index's (`recorded`) when none are given; the given ones
    for an index that records none (one itlr did not make); an error when they differ."""
    if recorded is None:
        return Prompts(query or "", passage or "")
    for kind, given, kept in (
        ("query_prompt", query, recorded.query),
        ("passage_prompt", passage, recorded.passage),
    ):
        if given is not None and given != kept:
            raise ConfigurationError(
                f"{where} was embedded with {kind.replace('_', ' ')} {kept!r}, not {given!r}: "
                f"drop `{kind}` (the index's is used) or ingest into a new index"
            )
    return recorded


__all__ = ["PASSAGE_PROMPT_ENV", "QUERY_PROMPT_ENV", "Prompts", "settle"]
