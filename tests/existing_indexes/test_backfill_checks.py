"""Back-fill refuses what it cannot do before it changes a mapping, shows a real total and rate,
and `--into` mirrors its source (deletions, documents without text, changed fields)."""

from __future__ import annotations

import json
import re

import httpx
import pytest
from rich.progress import Progress
from typer.testing import CliRunner

import itlr
from foreign_index import all_sources, bulk, create_index, delete_index, documents
from itlr.cli import app
from itlr.errors import IndexStateError
from itlr.fingerprint import HASH_FIELD
from itlr.progress import RateColumn

pytestmark = pytest.mark.opensearch


def mapping_of(url: str, name: str) -> dict:
    answer = httpx.get(f"{url}/{name}/_mapping", timeout=30)
    answer.raise_for_status()
    return answer.json()


def run_cli(*args: str):
    return CliRunner().invoke(app, ["backfill", *args])


@pytest.mark.parametrize(
    ("text_field", "message"),
    [
        (
            "bdy",
            r"maps no field 'bdy': name the field that holds the text with --text-field "
            r"\(its text fields: body, note, topic\)",
        ),
        ("note", r"none of the 6 documents of .* has a value in 'note'"),
    ],
    ids=["unmapped", "mapped but empty"],
)
def test_a_text_field_no_document_has_is_refused_before_the_mapping_changes(
    text_field, message, opensearch_url, corpus
) -> None:
    name = create_index(opensearch_url, "opensearch", documents(corpus, 6))
    try:
        httpx.put(
            f"{opensearch_url}/{name}/_mapping",
            json={"properties": {"note": {"type": "text"}}},
            timeout=30,
        ).raise_for_status()
        before = mapping_of(opensearch_url, name)
        result = run_cli(
            "--url",
            opensearch_url,
            "--index",
            name,
            "--text-field",
            text_field,
            "--vector-field",
            "vec",
        )
        assert result.exit_code != 0
        error = result.output.strip()
        assert "\n" not in error, error
        assert re.search(message, error), error
        assert "embedded" not in error
        with pytest.raises(IndexStateError, match=message):
            itlr.Index.backfill(name, url=opensearch_url, text_field=text_field, vector_field="vec")
        assert mapping_of(opensearch_url, name) == before
    finally:
        delete_index(opensearch_url, name)


@pytest.mark.parametrize(
    ("vector", "message"),
    [
        ({"type": "float"}, r"already maps 'vec' as float, not knn_vector: .*--vector-field"),
        (
            {"type": "knn_vector", "dimension": 8},
            r"'vec' holds 8-dim vectors but model .* makes 384-dim ones",
        ),
    ],
    ids=["other type", "other dimension"],
)
@pytest.mark.parametrize("into", [False, True], ids=["in place", "into"])
def test_a_vector_field_of_another_type_or_dimension_is_refused_before_the_mapping_changes(
    vector, message, into, opensearch_url, corpus
) -> None:
    name = create_index(opensearch_url, "opensearch", documents(corpus, 4))
    target = f"{name}-copy"
    try:
        httpx.put(
            f"{opensearch_url}/{name}/_mapping", json={"properties": {"vec": vector}}, timeout=30
        ).raise_for_status()
        before = mapping_of(opensearch_url, name)
        extra = ["--into", target] if into else []
        result = run_cli(
            "--url",
            opensearch_url,
            "--index",
            name,
            "--text-field",
            "body",
            "--vector-field",
            "vec",
            *extra,
        )
        assert result.exit_code != 0
        error = result.output.strip()
        assert "\n" not in error and re.search(message, error), error
        assert mapping_of(opensearch_url, name) == before
        assert httpx.head(f"{opensearch_url}/{target}", timeout=30).status_code == 404
    finally:
        delete_index(opensearch_url, target)
        delete_index(opensearch_url, name)


def test_the_total_is_counted_before_the_mapping_changes(opensearch_url, corpus) -> None:
    name = create_index(opensearch_url, "opensearch", documents(corpus, 9))
    told = []
    try:
        before = mapping_of(opensearch_url, name)

        def on_total(total: int) -> None:
            told.append((total, mapping_of(opensearch_url, name)))

        from itlr.backfill import backfill_spec
        from itlr.engines.connection import Connection
        from itlr.engines.factory import EngineSpec
        from itlr.engines.layout import IndexLayout
        from itlr.option_groups import BackfillOptions, EncoderOptions

        spec = EngineSpec(
            engine="opensearch",
            index_name=name,
            connection=Connection(opensearch_url),
            layout=IndexLayout("vec", "body"),
        )
        seen = []
        report = backfill_spec(
            spec,
            EncoderOptions(),
            BackfillOptions(batch_size=4),
            on_total=on_total,
            on_batch=seen.append,
        )
        assert told == [(9, before)]
        assert sum(seen) == 9 == report.seen
    finally:
        delete_index(opensearch_url, name)


def test_the_rate_is_documents_over_the_time_since_the_start() -> None:
    progress = Progress(RateColumn(), auto_refresh=False)
    task_id = progress.add_task("x", total=100)
    task = progress.tasks[0]
    task.start_time = task.get_time() - 4.0  # started four seconds ago
    progress.advance(task_id, 10)
    progress.advance(task_id, 10)  # two advances a moment apart
    assert RateColumn().render(task).plain == "5.0 docs/s"


def test_into_reruns_mirror_the_source(opensearch_url, corpus, embedder) -> None:
    docs = documents(corpus, 30)
    for doc in docs[:4]:
        del doc["body"]  # no text: copied, without a vector
    name = create_index(opensearch_url, "opensearch", docs, knn=False)
    into, alias = f"{name}-v2", f"{name}-current"
    common = [
        "--url",
        opensearch_url,
        "--index",
        name,
        "--text-field",
        "body",
        "--vector-field",
        "vec",
        "--into",
        into,
        "--alias",
        alias,
    ]
    try:
        first = run_cli(*common)
        assert first.exit_code == 0, first.output
        summary = first.output.strip().splitlines()[-1]
        assert "26 embedded" in summary and "4 without text (copied, no vector)" in summary
        assert "it holds 30" in summary
        copied = all_sources(opensearch_url, into)
        assert len(copied) == 30
        assert {i for i, s in copied.items() if "vec" not in s} == {d["_id"] for d in docs[:4]}
        assert all(HASH_FIELD not in copied[d["_id"]] for d in docs[:4])

        # The source changes: one deleted, one text rewritten, one field changed, one new.
        gone, rewritten, retopic = docs[10]["_id"], docs[11], docs[12]
        httpx.delete(f"{opensearch_url}/{name}/_doc/{gone}?refresh=true", timeout=30)
        bulk(
            opensearch_url,
            name,
            [
                {**rewritten, "body": "Penguins huddle together on the Antarctic ice."},
                {**retopic, "topic": "changed"},
                {
                    "_id": "brand-new",
                    "body": "A new article about sleep.",
                    "year": 2020,
                    "topic": "sleep",
                },
            ],
        )
        second = run_cli(*common)
        assert second.exit_code == 0, second.output
        summary = second.output.strip().splitlines()[-1]
        assert "2 embedded" in summary, summary
        assert "1 deleted (gone from the source)" in summary
        assert "(1 of them with changed fields copied)" in summary
        assert "it holds 30" in summary
        source = all_sources(opensearch_url, name)
        copied = all_sources(opensearch_url, into)
        assert set(copied) == set(source) and gone not in copied
        strip = {"vec", HASH_FIELD, "itlr_tokens", "itlr_token_keys", "itlr_length"}
        for doc_id, fields in source.items():
            assert {k: v for k, v in copied[doc_id].items() if k not in strip} == fields
        assert copied[retopic["_id"]]["topic"] == "changed"

        index = itlr.Index.open(alias, url=opensearch_url, vector_field="vec", text_field="body")
        assert [h.id for h in index.search('"penguins on ice"', k=1).hits] == [rewritten["_id"]]
        count = httpx.get(f"{opensearch_url}/{alias}/_count", timeout=30).json()["count"]
        assert count == httpx.get(f"{opensearch_url}/{name}/_count", timeout=30).json()["count"]

        third = run_cli(*common)
        assert "0 embedded" in third.output and "0 deleted" in third.output
        assert json.dumps(all_sources(opensearch_url, into), sort_keys=True) == json.dumps(
            copied, sort_keys=True
        )
    finally:
        delete_index(opensearch_url, into)
        delete_index(opensearch_url, name)


def test_the_summary_rates_are_documents_read_and_documents_embedded_while_encoding() -> None:
    """A re-run reads every document and embeds a few: neither rate is the embedded ones over
    the whole run (10 of 890 in 1.6 s once read "6.2 docs/s")."""
    from itlr.write_report import WriteReport

    report = WriteReport(
        "backfill", "team", seen=890, embedded=10, unchanged=880, seconds=1.6, encode_seconds=0.25
    )
    line = report.summary()
    assert line.endswith("in 1.6s (556.2 documents/s read; 40.0 embedded/s while encoding)"), line
    nothing = WriteReport("backfill", "team", seen=890, unchanged=890, seconds=1.0).summary()
    assert nothing.endswith("(890.0 documents/s read)"), nothing
