"""Output is strict JSON everywhere (issue 26, part 3): a stored document with a NaN field or a
field nested 900 levels deep (ingestion refuses both now; an older index may hold them) never
makes `/search` fail nor `itlr search --json` print bare NaN."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

import itlr
from itlr.cli import app as cli
from itlr.engines.embedded import EmbeddedBackend
from itlr.service import create_app
from itlr.service.server import serving
from itlr.strict_json import MAX_OUTPUT_DEPTH, TOO_DEEP, plain

QUERY = '"vitamin D" AND "sunlight"'


def strict_loads(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise AssertionError(f"not strict JSON: bare {constant}")

    return json.loads(text, parse_constant=refuse)


def nested(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = {"down": value}
    return value


@pytest.fixture(scope="module")
def odd_index(tmp_path_factory, embedder) -> str:
    """Documents written beneath ingestion's checks, as an index from before them holds."""
    path = tmp_path_factory.mktemp("strict") / "odd"
    index = EmbeddedBackend.create(path, embedder.name, embedder.dims)
    texts = ["Vitamin D is made in the skin under sunlight.", "Sunlight and vitamin D in winter."]
    fields = [{"score": math.nan, "low": -math.inf}, {"deep": nested(900)}]
    index.add(["nan-doc", "deep-doc"], texts, embedder.encode(texts), fields)
    index.close()
    return str(path)


@pytest.fixture(scope="module")
def service(odd_index: str) -> Iterator[httpx.Client]:
    index = itlr.Index.open(odd_index, create=False)
    with serving(create_app(index)) as url, httpx.Client(base_url=url, timeout=60) as client:
        yield client


def test_search_returning_nan_and_900_deep_fields_answers_strict_json(service) -> None:
    for _ in range(3):  # every later search too, not only the first
        answer = service.post("/search", json={"query": QUERY, "k": 2})
        assert answer.status_code == 200, answer.text
        hits = {h["id"]: h for h in strict_loads(answer.text)["hits"]}
        assert hits["nan-doc"]["fields"] == {"score": None, "low": None}
        deep = json.dumps(hits["deep-doc"]["fields"])
        assert deep.count('"down"') < MAX_OUTPUT_DEPTH and TOO_DEEP in deep


def test_itlr_search_json_prints_strict_json(odd_index: str) -> None:
    result = CliRunner().invoke(cli, ["search", QUERY, "--index", odd_index, "--json", "-k", "2"])
    assert result.exit_code == 0, result.output
    assert "NaN" not in result.stdout and "Infinity" not in result.stdout
    assert {h["id"] for h in strict_loads(result.stdout)["hits"]} == {"nan-doc", "deep-doc"}


def test_plain_walks_any_depth_without_recursion(tmp_path: Path) -> None:
    value = plain({"a": nested(100_000), "b": (1.5, math.nan), "c": [math.inf, "x"]})
    assert value["b"] == [1.5, None] and value["c"] == [None, "x"]
    assert json.dumps(value).count('"down"') == MAX_OUTPUT_DEPTH - 1
