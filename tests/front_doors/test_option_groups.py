"""Option groups (itlr.option_groups): `Index.open`, `Index.backfill` and `Index.follow` take the
connection, encoder and back-fill options as whole objects, and the keywords they took before
fold into the same objects: both spellings open, write and follow alike."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import itlr
from following import current, wait_for
from foreign_index import all_sources, create_index, delete_index, documents
from itlr.engines.connection import Connection
from itlr.errors import ConfigurationError
from itlr.option_groups import BackfillOptions, EncoderOptions

DOCS = [
    {"id": "imm", "text": "Vitamin D supports the immune system against infections."},
    {"id": "bone", "text": "Vitamin D and calcium keep bones strong; bone health in old age."},
    {"id": "cat", "text": "Cats sleep most of the day."},
]
QUERY = '"vitamin D" AND NOT "bone health"'


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


def test_open_by_keywords_and_by_an_encoder_group_give_the_same_index(tmp_path: Path) -> None:
    by_keywords = itlr.Index.open(
        tmp_path / "keywords", query_prompt="query: ", passage_prompt="passage: "
    )
    grouped = EncoderOptions(query_prompt="query: ", passage_prompt="passage: ")
    by_group = itlr.Index.open(tmp_path / "group", encoding=grouped)
    for index in (by_keywords, by_group):
        index.add(DOCS)
    shown = [{**index.to_dict(), "index": None} for index in (by_keywords, by_group)]
    assert shown[0] == shown[1]
    assert (by_group.embedder.query_prompt, by_group.embedder.passage_prompt) == (
        "query: ",
        "passage: ",
    )
    first, second = by_keywords.search(QUERY, k=3), by_group.search(QUERY, k=3)
    assert [(h.id, h.score) for h in second.hits] == [(h.id, h.score) for h in first.hits]


def test_the_python_api_option_group_snippet_runs_as_written(itlr_home: Path) -> None:
    page = Path(__file__).resolve().parents[2] / "docs" / "python-api.md"
    snippet = next(block for block in python_blocks(page) if "EncoderOptions" in block)
    scope: dict = {"itlr": itlr}
    exec(compile(snippet, page.name, "exec"), scope)
    opened = scope["prompted"].embedder
    assert (opened.query_prompt, opened.passage_prompt) == ("query: ", "passage: ")


def test_a_group_and_its_own_keywords_together_are_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="either `encoding` or its keywords") as bad:
        itlr.Index.open(tmp_path / "x", encoding=EncoderOptions(), model="all-MiniLM-L6-v2")
    assert "\n" not in str(bad.value)
    with pytest.raises(ConfigurationError, match=r"either `connection` or its keywords \(url\)"):
        itlr.Index.open("x", url="http://127.0.0.1:9", connection=Connection("http://127.0.0.1:9"))
    with pytest.raises(ConfigurationError, match=r"either `backfill` or its keywords \(into\)"):
        itlr.Index.backfill(
            "x",
            url="http://127.0.0.1:9",
            text_field="body",
            backfill=BackfillOptions(),
            into="copy",
        )


def test_a_keyword_no_group_has_is_refused_instead_of_dropped() -> None:
    # Index.backfill passed its unknown keywords to the connection, which dropped them.
    for method in (itlr.Index.backfill, itlr.Index.follow):
        with pytest.raises(TypeError, match="unexpected keyword argument 'batchsize'"):
            method("x", url="http://127.0.0.1:9", text_field="body", batchsize=4)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'vector'"):
        itlr.Index.open("x", vector="vec")  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"alias": "live"}, "--alias moves an alias to the --into index: give --into"),
        ({"batch_size": 0}, "`batch_size` must be at least 1, got 0"),
        ({"interval": 0.0}, "`interval` must be a number of seconds above 0"),
        ({"verify_rate": -1.0}, "`verify_rate` must be 0 (no hash sweep) or more"),
        ({"verify_rate": float("nan")}, "`verify_rate` must be 0"),
    ],
)
def test_backfill_options_are_checked_once_when_made(given: dict, message: str) -> None:
    with pytest.raises(ConfigurationError) as bad:
        BackfillOptions(**given)
    assert message in str(bad.value) and "\n" not in str(bad.value)


def test_an_unknown_encoder_is_refused_when_its_group_is_made() -> None:
    with pytest.raises(ConfigurationError, match="onxx") as bad:
        EncoderOptions(encoder="onxx")
    assert "\n" not in str(bad.value)


def test_none_keeps_meaning_the_default_in_the_keyword_spelling() -> None:
    from itlr.option_groups import fold

    folded = fold(BackfillOptions, None, {"verify_rate": None, "into": None}, "backfill")
    assert folded == BackfillOptions()


@pytest.mark.opensearch
def test_open_by_url_keywords_and_by_a_connection_reach_the_same_cluster(
    opensearch_url: str, corpus, embedder
) -> None:
    name = create_index(opensearch_url, "opensearch", documents(corpus, 6))
    try:
        itlr.Index.backfill(name, url=opensearch_url, text_field="body", vector_field="vec")
        by_keywords = itlr.Index.open(
            name, url=opensearch_url, vector_field="vec", text_field="body", verify_certs=True
        )
        by_group = itlr.Index.open(
            name, connection=Connection(opensearch_url), vector_field="vec", text_field="body"
        )
        assert by_group.spec == by_keywords.spec
        first, second = by_keywords.search('"sleep"', k=3), by_group.search('"sleep"', k=3)
        assert [(h.id, h.score) for h in second.hits] == [(h.id, h.score) for h in first.hits]
    finally:
        delete_index(opensearch_url, name)


@pytest.mark.opensearch
def test_backfill_by_keywords_and_by_groups_write_the_same_documents(
    opensearch_url: str, corpus, embedder
) -> None:
    docs = documents(corpus, 9)
    names = [create_index(opensearch_url, "opensearch", docs) for _ in range(2)]
    try:
        by_keywords = itlr.Index.backfill(
            names[0],
            url=opensearch_url,
            text_field="body",
            vector_field="vec",
            passage_prompt="passage: ",
            batch_size=4,
        )
        by_groups = itlr.Index.backfill(
            names[1],
            connection=Connection(opensearch_url),
            text_field="body",
            vector_field="vec",
            encoding=EncoderOptions(passage_prompt="passage: "),
            backfill=BackfillOptions(batch_size=4),
        )
        assert (by_groups.seen, by_groups.embedded) == (by_keywords.seen, by_keywords.embedded)
        assert by_groups.embedded == 9
        first, second = all_sources(opensearch_url, names[0]), all_sources(opensearch_url, names[1])
        assert sorted(first) == sorted(second)
        for doc_id, source in first.items():
            assert np.allclose(second[doc_id]["vec"], source["vec"], atol=1e-6)
            assert {k: v for k, v in second[doc_id].items() if k != "vec"} == {
                k: v for k, v in source.items() if k != "vec"
            }
        # The passage prompt reached the vectors (the prompted text's, not the bare text's).
        some = next(iter(first.values()))
        prompted = embedder.encode(["passage: " + some["body"]])[0]
        assert np.allclose(some["vec"], prompted, atol=1e-5)
    finally:
        for name in names:
            delete_index(opensearch_url, name)


@pytest.mark.opensearch
def test_follow_takes_its_groups_whole(opensearch_url: str, corpus, embedder) -> None:
    import threading

    docs = documents(corpus, 6)
    name = create_index(opensearch_url, "opensearch", docs[:3])
    stop = threading.Event()
    lines: list[str] = []

    def run() -> None:
        itlr.Index.follow(
            name,
            connection=Connection(opensearch_url),
            text_field="body",
            vector_field="vec",
            encoding=EncoderOptions(),
            backfill=BackfillOptions(interval=0.2, verify_rate=0),
            stop=stop,
            on_line=lines.append,
        )

    thread = threading.Thread(target=run, daemon=True)
    try:
        thread.start()
        wait_for(lambda: current(opensearch_url, name, embedder))
        from foreign_index import bulk

        bulk(opensearch_url, name, docs[3:])
        wait_for(lambda: len(all_sources(opensearch_url, name)) == 6)
        wait_for(lambda: current(opensearch_url, name, embedder))
        # verify_rate=0 reached the follower: its start line names no hash sweep.
        assert lines and "hash sweep" not in lines[0] and "every 0.2s" in lines[0]
    finally:
        stop.set()
        thread.join(120)
        delete_index(opensearch_url, name)
    assert not thread.is_alive()


def test_the_cli_names_a_bad_backfill_option_by_its_flag() -> None:
    from typer.testing import CliRunner

    from itlr.cli import app

    given = ["backfill", "--url", "http://127.0.0.1:9", "--index", "x", "--text-field", "body"]
    result = CliRunner().invoke(app, [*given, "--batch-size", "0"])
    assert result.exit_code == 2
    assert "--batch-size must be at least 1, got 0" in result.output
    assert len(result.output.strip().splitlines()) == 1


def _commands(group: object, path: str = "itlr") -> list[tuple[str, object]]:
    found = []
    for name, command in getattr(group, "commands", {}).items():
        found.append((f"{path} {name}", command))
        found.extend(_commands(command, f"{path} {name}"))
    return found


def test_every_command_gets_the_encoder_and_llm_flags_from_their_group_decorator() -> None:
    """No command function declares an encoder or LLM flag itself: each receives the group
    (`encoding`, `llm`) that encoder_command / llm_command built from the flags."""
    import inspect

    import typer

    from itlr.cli import app

    retyped = {"encoder", "encoder_url", "query_prompt", "passage_prompt", "llm_model"}
    retyped |= {"llm_base_url", "llm_api_key_env", "llm_timeout"}
    with_flags = {}
    for path, command in _commands(typer.main.get_command(app)):
        callback = getattr(command, "callback", None)
        if callback is None:
            continue
        written = set(inspect.signature(inspect.unwrap(callback)).parameters)
        assert not written & retyped, f"{path} declares {sorted(written & retyped)} itself"
        flags = {param.name for param in command.params}  # type: ignore[attr-defined]
        if flags & retyped:
            with_flags[path] = written & {"encoding", "llm"}
    # The commands that have the flags, and the group each receives instead.
    assert with_flags == {
        "itlr backfill": {"encoding"},
        "itlr ingest": {"encoding"},
        "itlr search": {"encoding", "llm"},
        "itlr serve": {"encoding", "llm"},
        "itlr rewrite": {"llm"},
        "itlr eval": {"llm"},
    }
