"""A hit's fields never show what itlr wrote beside a document (issue 53.4, `itlr search
--json`): on an index made elsewhere every top-level field is the document's own, except the
text, the vector and every `itlr_` field, those a list names (`itlr_hash`) and those it does not
(`itlr_hash_was`, written by the hash guard, or any later one). Real OpenSearch."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

import itlr
from foreign_index import create_index, delete_index, documents
from itlr.cli import app

pytestmark = pytest.mark.opensearch

QUERY = '"vitamin D" AND NOT "bone health"'


@pytest.fixture(scope="module")
def foreign(opensearch_url, corpus, embedder) -> Iterator[str]:
    docs = documents(corpus, 30)
    vectors = embedder.encode([d["body"] for d in docs])
    for doc, vector in zip(docs, vectors, strict=True):
        doc.update(vec=vector.tolist(), itlr_hash="abc", itlr_hash_was="def", itlr_later=1)
    name = create_index(opensearch_url, "opensearch", docs, vector_dims=embedder.dims)
    yield name
    delete_index(opensearch_url, name)


def test_cli_json_hits_leave_out_every_itlr_field(opensearch_url, foreign) -> None:
    args = ["search", QUERY, "--url", opensearch_url, "--index", foreign, "--json", "--k", "5"]
    result = CliRunner().invoke(app, [*args, "--vector-field", "vec", "--text-field", "body"])
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout)["hits"]
    assert hits and all(set(hit["fields"]) == {"year", "topic"} for hit in hits)


def test_library_hits_leave_out_every_itlr_field(opensearch_url, foreign) -> None:
    index = itlr.Index.open(foreign, url=opensearch_url, vector_field="vec", text_field="body")
    hits = index.search(QUERY, k=5).hits
    assert hits and all(set(hit.fields) == {"year", "topic"} for hit in hits)
