"""The fixed Painless scripts: one source for both engines, rendered per engine, registered under
an id that changes whenever the source does. User text never enters a script: data goes in
through params (itlr.engines.script_params)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from itlr.resources import painless_file

SCRIPT_FORMAT = 1


# What a Painless file's `{{placeholder}}`s become on each engine: fixed words, never user text.
# OpenSearch's knn_vector doc values give the float[] as `.value`, Elasticsearch's dense_vector
# as `.vectorValue`.
PAINLESS_DIALECTS: dict[str, dict[str, str]] = {
    "opensearch": {"vector_value": "value"},
    "elasticsearch": {"vector_value": "vectorValue"},
}
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


def render_painless(source: str, engine: str) -> str:
    """One Painless source for both engines, with its placeholders filled for ``engine``."""
    words = PAINLESS_DIALECTS[engine]

    def fill(match: re.Match[str]) -> str:
        if match.group(1) not in words:
            raise ValueError(f"unknown Painless placeholder {match.group(0)} for {engine}")
        return words[match.group(1)]

    return _PLACEHOLDER.sub(fill, source)


@dataclass(frozen=True)
class StoredScript:
    """A fixed Painless file registered under an id that changes whenever its source does."""

    name: str
    source: str

    @classmethod
    def load(cls, name: str, filename: str, engine: str) -> StoredScript:
        """``scripts/painless/<filename>`` rendered for ``engine`` (see `render_painless`)."""
        return cls(name, render_painless(painless_file(filename).read_text(), engine))

    @cached_property  # hashed once: every search names it
    def id(self) -> str:
        digest = hashlib.sha256(self.source.encode()).hexdigest()[:10]
        return f"itlr-{self.name}-v{SCRIPT_FORMAT}-{digest}"

    def reference(self, params: dict[str, Any], inline: bool) -> dict[str, Any]:
        """The `script` object of a request: the stored id, or the fixed source inline."""
        if inline:
            return {"source": self.source, "lang": "painless", "params": params}
        return {"id": self.id, "params": params}

    def body(self) -> dict[str, Any]:
        return {"script": {"lang": "painless", "source": self.source}}
