"""What one run that writes documents into an index did: ingestion (`itlr ingest`,
`Index.add`, `Index.delete`), a back-fill in place or into a copy (itlr.backfill) and a
follower (itlr.follow) fill the counts they have in one report type, with the refused
documents' reasons and one summary line ending with the first failure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Kind = Literal["ingest", "backfill", "copy", "follow"]


@dataclass
class WriteReport:
    """Counts of documents, the failed ones ({id: reason}) and the seconds spent.

    `kind` says which run it was and so which counts the summary names: ingest (added,
    updated, unchanged, deleted), backfill in place (seen, embedded, unchanged, no_text),
    copy, a back-fill into another index (also copied and deleted; documents without text are
    copied without a vector, those gone from the source are deleted from the copy), follow
    (cycles, embedded, restored). `encode_seconds` is the encoder's part of the time.
    """

    kind: Kind = "ingest"
    index: str = ""
    seen: int = 0
    added: int = 0
    updated: int = 0
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
        return asdict(self)
