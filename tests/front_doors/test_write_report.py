"""The one report type of every run that writes (itlr.write_report): its JSON fields and their
order, and each run's summary line and a follower cycle's line, word for word as `--json` and
stdout have always shown them; the counts shared with a follower's cycle (WriteCounts)."""

from __future__ import annotations

import json
import time

import pytest

from itlr.follow_cycle import FollowCycle
from itlr.write_report import COUNTS, WriteCounts, WriteReport

JSON_FIELDS = [
    "kind",
    "index",
    "seen",
    "added",
    "updated",
    "embedded",
    "restored",
    "unchanged",
    "no_text",
    "copied",
    "deleted",
    "changed_meanwhile",
    "cycles",
    "count",
    "failed",
    "seconds",
    "encode_seconds",
    "index_seconds",
    "busy_seconds",
]
FAILURE = "; first failure d1: mapper_parsing_exception: bad"
LINES = {
    "ingest": "added 3, updated 4, unchanged 870, deleted 7, 2 bad lines skipped, failed 2; "
    "index now holds 1234 documents",
    "backfill": "back-filled team: 10 embedded, 870 already current, 5 without text (no vector), "
    "1 changed meanwhile (left for the next run), 2 failed of 890 documents; it holds 1234 in "
    "1.6s (556.2 documents/s read; 40.0 embedded/s while encoding)",
    "copy": "back-filled team: 10 embedded, 870 already current (6 of them with changed fields "
    "copied), 5 without text (copied, no vector), 7 deleted (gone from the source), 1 changed "
    "meanwhile (left for the next run), 2 failed of 890 documents; it holds 1234 in 1.6s "
    "(556.2 documents/s read; 40.0 embedded/s while encoding)",
    "follow": "followed team for 1.6s: 9 cycles, 10 embedded, 2 hash restored, 2 failed; busy "
    "0.9s, of which encoding 0.2s",
}


def filled(kind: str) -> WriteReport:
    return WriteReport(
        kind,  # type: ignore[arg-type]
        "team",
        seen=890,
        added=3,
        updated=4,
        embedded=10,
        restored=2,
        unchanged=870,
        no_text=5,
        copied=6,
        deleted=7,
        changed_meanwhile=1,
        cycles=9,
        count=1234,
        failed={"d1": "mapper_parsing_exception: bad", "d2": "x"},
        seconds=1.6,
        encode_seconds=0.25,
        index_seconds=0.3,
        busy_seconds=0.9,
    )


@pytest.mark.parametrize("kind", list(LINES))
def test_every_runs_report_keeps_its_json_fields_in_order_and_its_summary_word_for_word(
    kind: str,
) -> None:
    report = filled(kind)
    assert list(json.loads(json.dumps(report.to_dict()))) == JSON_FIELDS
    notes = ("2 bad lines skipped",) if kind == "ingest" else ()
    assert report.summary(notes) == LINES[kind] + FAILURE
    assert WriteReport().to_dict()["kind"] == "ingest"


def test_a_follower_cycle_shares_the_reports_counts_and_keeps_its_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(time, "strftime", lambda *_: "12:00:00")
    cycle = FollowCycle(7, embedded=3, restored=1, copied=2, stale=4, changed_meanwhile=2)
    cycle.failed, cycle.seconds = 1, 0.25
    assert isinstance(cycle, WriteCounts) and cycle.busy
    assert cycle.line("team") == (
        "12:00:00 team: 3 embedded, 1 hash restored (text unchanged), 2 copied, 0 deleted, 4 "
        "stale hashes found by the sweep, 2 changed meanwhile (next cycle), 1 failed (retried) "
        "in 0.2s"
    )
    report = WriteReport("follow", "team", embedded=1)
    report.add_counts(cycle)
    assert {name: getattr(report, name) for name in COUNTS} == {
        **dict.fromkeys(COUNTS, 0),
        "embedded": 4,
        "restored": 1,
        "copied": 2,
        "changed_meanwhile": 2,
    }
    assert report.failed == {}  # a cycle's refusals are the follower's to name, by id
    assert not FollowCycle(8, unchanged=5, no_text=1).busy  # reading alone is not busy


def test_a_count_given_by_position_is_refused_never_taken_for_another_field() -> None:
    """The counts come first in the shared type: by position, 890 would land in another
    field than the one it meant before (seen, embedded); by keyword it cannot."""
    with pytest.raises(TypeError):
        WriteReport("backfill", "team", 890)  # type: ignore[misc]
    with pytest.raises(TypeError):
        FollowCycle(7, 3)  # type: ignore[misc]
    assert WriteReport("backfill", "team", seen=890).seen == 890
    assert FollowCycle(7, embedded=3).embedded == 3
