"""Bounds on what a request costs, not only on how big it is (issue 56, item 4): one `bool` of
1,000 `range` clauses on a 60k-document embedded index was within every limit (values were
counted, not values x rows) and cost a minute of CPU; deep JSON in a CLI flag or a config file
was a RecursionError; the Python builder let `weight=nan`, `inf`, `-1` and any `k` through."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

import itlr
from itlr.cli import app as cli
from itlr.errors import ConfigurationError
from itlr.limits import LIMITS, LimitError
from itlr.service import create_app
from itlr.service.server import serving

runner = CliRunner()
ROWS = 12_000


def ranges(count: int) -> dict:
    return {"bool": {"filter": [{"range": {"year": {"gte": i}}} for i in range(count)]}}


@pytest.fixture(scope="module")
def wide(tmp_path_factory, embedder) -> Path:
    """An embedded index of 12,000 documents (random vectors, the bundled model's name)."""
    from itlr.engines.embedded import EmbeddedBackend

    path = tmp_path_factory.mktemp("cost") / "wide"
    index = EmbeddedBackend.create(path, embedder.name, embedder.dims)
    vectors = np.random.default_rng(3).standard_normal((ROWS, embedder.dims)).astype(np.float32)
    index.add(
        [f"d{i}" for i in range(ROWS)],
        [f"passage {i} on sleep" for i in range(ROWS)],
        vectors,
        [{"year": 1900 + i % 120} for i in range(ROWS)],
    )
    index.close()
    return path


def one_line(result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_filters_clauses_times_rows_over_the_limit_is_refused_before_any_row_is_read(
    wide: Path,
) -> None:
    clauses = LIMITS.max_filter_work // ROWS + 1  # under max_filter_values, over the work
    assert clauses < LIMITS.max_filter_values
    index = itlr.Index.open(str(wide), create=False)
    with pytest.raises(LimitError, match=r"max_filter_work, raise it with ITLR_MAX_FILTER_WORK"):
        index.search('"sleep"', k=3, filter=ranges(clauses), mode="exact")
    fine = index.search('"sleep"', k=3, filter=ranges(clauses // 2), mode="exact")
    assert len(fine.hits) == 3
    line = one_line(
        runner.invoke(
            cli,
            ["search", '"sleep"', "--index", str(wide), "--filter", json.dumps(ranges(clauses))],
        )
    )
    assert f"{clauses:,} clauses to test on {ROWS:,} documents" in line
    assert "max_filter_work" in line


@pytest.fixture(scope="module")
def service(wide: Path) -> Iterator[httpx.Client]:
    index = itlr.Index.open(str(wide), create=False)
    with serving(create_app(index)) as url, httpx.Client(base_url=url, timeout=120) as client:
        yield client


def test_the_service_answers_a_filter_over_the_work_limit_with_422(service) -> None:
    clauses = LIMITS.max_filter_work // ROWS + 1
    body = {"query": '"sleep"', "k": 3, "filter": ranges(clauses), "mode": "exact"}
    answer = service.post("/search", json=body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["limit"] == "max_filter_work"
    assert "\n" not in answer.json()["error"]


def test_the_work_limit_comes_from_its_environment_variable(monkeypatch) -> None:
    from itlr.limits import Limits

    monkeypatch.setenv("ITLR_MAX_FILTER_WORK", "100")
    limits = Limits.from_env()
    limits.check_filter_work(10, 10)
    with pytest.raises(LimitError, match=r"\(101 tests\); the limit is 100"):
        limits.check_filter_work(1, 101)


DEEP = "[" * 100_000 + "]" * 100_000
DEEP_OBJECT = '{"a": ' * 50_000 + "1" + "}" * 50_000


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--filter", DEEP_OBJECT), ("--search-after", DEEP), ("--filter", '{"bool": ' + DEEP + "}")],
)
def test_deep_json_in_a_cli_flag_is_one_line_not_a_recursion_error(
    wide: Path, flag: str, value: str
) -> None:
    line = one_line(runner.invoke(cli, ["search", '"sleep"', "--index", str(wide), flag, value]))
    assert f"{flag} is nested" in line and "max_depth" in line


def test_a_deep_index_config_or_calibration_file_is_one_line(tmp_path: Path, itlr_home) -> None:
    config = tmp_path / "indexes.json"
    config.write_text('{"logs-*": ' + DEEP_OBJECT + "}")
    result = runner.invoke(
        cli, ["serve", "--proxy", "--url", "http://127.0.0.1:1", "--index-config", str(config)]
    )
    line = one_line(result)
    assert "index config" in line and "max_depth" in line

    from itlr.calibrations import calibration_path, default_hard_filter, load_calibration

    path = calibration_path("some-model")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(DEEP_OBJECT)
    with pytest.raises(ConfigurationError, match="max_depth"):
        load_calibration("some-model")
    assert default_hard_filter("some-model") == pytest.approx(0.53)  # the bundled default


@pytest.mark.parametrize("weight", [math.nan, math.inf, -math.inf, -1.0, 1000.5, True, "2"])
def test_the_builder_refuses_the_weights_the_parser_refuses(weight) -> None:
    with pytest.raises(ConfigurationError, match="weights are finite numbers from 0 to 1000"):
        itlr.Term("bone health", weight=weight)


def test_the_builder_takes_the_weights_the_parser_takes() -> None:
    for weight in (0, 0.0, 0.5, 1000, 1000.0):
        assert itlr.Term("a", weight=weight).weight == weight
    assert itlr.parse('"a"^1000').root == itlr.Term("a", 1000.0)


@pytest.mark.parametrize("k", [0, -1, 10_001, math.nan, 1.5, True, "10"])
def test_k_is_a_whole_number_within_the_services_bound_in_code_too(embedded, k) -> None:
    index = itlr.Index.open(str(embedded.path), create=False)
    with pytest.raises(
        ConfigurationError, match=r"`k` must be (a whole number|at (least 1|most 10,000))"
    ):
        index.search('"sleep"', k=k)


@pytest.mark.parametrize(
    ("name", "value"), [("from_", -1), ("from_", 0.5), ("candidates", 0), ("candidates", math.inf)]
)
def test_paging_and_budgets_are_whole_numbers_in_code_too(embedded, name, value) -> None:
    index = itlr.Index.open(str(embedded.path), create=False)
    with pytest.raises(
        ConfigurationError, match=f"`{name}` must be (a whole number|0 or|at least)"
    ):
        index.search('"sleep"', k=3, **{name: value})
