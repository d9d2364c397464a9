"""What one run that writes documents into an index did: ingestion (`itlr ingest`,
`Index.add`, `Index.delete`), a back-fill in place or into a copy (itlr.backfill) and a
follower (itlr.follow) count what they did to documents in one counts type (`WriteCounts`),
which a follower's cycle (itlr.follow_cycle.FollowCycle) shares and adds into its run's report;
a report adds the refused documents' reasons, the seconds spent and one summary line ending
with the first failure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import KW_ONLY, asdict, dataclass, field, fields
from typing import Any, Literal

Kind = Literal["ingest", "backfill", "copy", "follow"]


@dataclass(kw_only=True)
class WriteCounts:
    """Documents by what a run (or one look of a follower) did with them; each count means the
    same in every run, and a run leaves at 0 what it never does."""

    # Documents read (a back-fill's scan).
    seen: int = 0
    # Ingestion: new ids written, and stored ids written again (a changed text or fields).
    added: int = 0
    updated: int = 0
    # Documents given the vector of their current text (a back-fill's, a copy's, a follower's).
    embedded: int = 0
    # The follower's documents whose text had not changed: only their hash was written back.
    restored: int = 0
    unchanged: int = 0
    no_text: int = 0
    # Of the unchanged documents of a copy, those whose other fields were copied again.
    copied: int = 0
    deleted: int = 0
    # A back-fill's or follower's documents rewritten or deleted between its read and its
    # write: not written (never the vector of an old text), left for the next look.
    changed_meanwhile: int = 0

    def add_counts(self, other: WriteCounts) -> None:
        """Add `other`'s counts to these (a follower's cycle into its run's report)."""
        for name in COUNTS:
            setattr(self, name, getattr(self, name) + getattr(other, name))


COUNTS = tuple(f.name for f in fields(WriteCounts))


@dataclass
class WriteReport(WriteCounts):
    """Counts of documents (WriteCounts), the failed ones ({id: reason}) and the seconds spent.

    `kind` names the run, and so the summary's wording: ingest (added, updated, unchanged,
    deleted), backfill in place (seen, embedded, unchanged, no_text), copy, a back-fill into
    another index (also copied and deleted; documents without text are copied without a
    vector, those gone from the source are deleted from the copy), follow (cycles, embedded,
    restored). `encode_seconds` is the encoder's part of the time.
    """

    kind: Kind = "ingest"
    index: str = ""
    # The rest by keyword only, as the counts are: a count given by position is refused, never
    # taken for another field.
    _: KW_ONLY
    cycles: int = 0
    # How many documents the index holds when the run is over (where it was counted).
    count: int | None = None
    failed: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    encode_seconds: float = 0.0
    index_seconds: float = 0.0
    # A follower's busy cycles (the rest of `seconds` is idle waiting).
    busy_seconds: float = 0.0

    @property
    def skipped(self) -> int:
        """Documents left as they were (the name resumption reports have always used)."""
        return self.unchanged

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.deleted or self.embedded)

    @property
    def first_failure(self) -> str:
        """A summary line's ending that names the first failed document, if any."""
        if not self.failed:
            return ""
        first_id, reason = next(iter(self.failed.items()))
        return f"; first failure {first_id}: {reason}"

    def summary(self, notes: Sequence[str] = ()) -> str:
        """One line; `notes` (ingestion: what reading the input found) go before the failures."""
        failed = len(self.failed)
        if self.kind == "follow":
            line = (
                f"followed {self.index} for {self.seconds:.1f}s: {self.cycles} cycles, "
                f"{self.embedded} embedded, {self.restored} hash restored, {failed} failed; "
                f"busy {self.busy_seconds:.1f}s, of which encoding {self.encode_seconds:.1f}s"
            )
        elif self.kind == "ingest":
            parts = [
                f"added {self.added}",
                f"updated {self.updated}",
                f"unchanged {self.unchanged}",
                f"deleted {self.deleted}",
                *notes,
                f"failed {failed}",
            ]
            held = f"; index now holds {self.count} documents" if self.count is not None else ""
            line = ", ".join(parts) + held
        else:
            line = self._backfill_line(failed)
        return line + self.first_failure

    def _backfill_line(self, failed: int) -> str:
        read = self.seen / self.seconds if self.seconds else 0.0
        # The embedding rate over the encoder's time: a re-run reads every document but embeds
        # few, and their rate over the whole run says nothing about either.
        embedding = (
            f"; {self.embedded / self.encode_seconds:,.1f} embedded/s while encoding"
            if self.embedded and self.encode_seconds
            else ""
        )
        meanwhile = (
            f", {self.changed_meanwhile} changed meanwhile (left for the next run)"
            if self.changed_meanwhile
            else ""
        )
        if self.kind == "copy":
            middle = (
                f"{self.unchanged} already current ({self.copied} of them with changed fields "
                f"copied), {self.no_text} without text (copied, no vector), {self.deleted} "
                "deleted (gone from the source)"
            )
        else:
            middle = f"{self.unchanged} already current, {self.no_text} without text (no vector)"
        return (
            f"back-filled {self.index}: {self.embedded} embedded, {middle}{meanwhile}, "
            f"{failed} failed of {self.seen} documents"
            + (f"; it holds {self.count}" if self.count is not None else "")
            + f" in {self.seconds:.1f}s ({read:,.1f} documents/s read{embedding})"
        )

    def to_dict(self) -> dict[str, Any]:
        """Every field, in the order the JSON output has always had: kind and index first."""
        values = asdict(self)
        return {name: values[name] for name in JSON_ORDER}


# A report's own fields (kind, index, cycles, count, failed and the seconds) around the counts.
_OWN = tuple(f.name for f in fields(WriteReport) if f.name not in COUNTS)
JSON_ORDER = (*_OWN[:2], *COUNTS, *_OWN[2:])
