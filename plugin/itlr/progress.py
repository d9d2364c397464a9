"""A progress bar that reports documents per second and time left."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskProgressColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text


class RateColumn(ProgressColumn):
    """Documents done over the time since the task started: rich's own speed estimate divides
    the last few advances by the moments between them, and a batch reported right after the
    one before reads as hundreds of thousands of documents a second."""

    def render(self, task: Task) -> Text:
        elapsed = task.finished_time if task.finished else task.elapsed
        if not elapsed or not task.completed:
            return Text("", style="progress.data.speed")
        return Text(f"{task.completed / elapsed:,.1f} docs/s", style="progress.data.speed")


def document_progress(console: Console) -> Progress:
    """On a terminal, a live bar; elsewhere (a log, a pipe, CI) nothing: a bar's last frame in
    a log says nothing the summary line does not, and before an error it reads as output."""
    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=not console.is_terminal,
    )


def follow_progress(console: Console) -> Progress:
    """A follower has no total: the documents it has embedded, its rate and how long it has
    run, on a terminal only (as document_progress)."""
    return Progress(
        "[progress.description]{task.description}",
        "{task.completed:,.0f} documents",
        RateColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=not console.is_terminal,
    )


class DocumentsColumn(ProgressColumn):
    """The documents a stream has given so far and their rate, from the task's `documents`
    field: a stream's bar advances by the bytes read (its total is the file's size)."""

    def render(self, task: Task) -> Text:
        documents = int(task.fields.get("documents", 0))
        elapsed = task.finished_time if task.finished else task.elapsed
        rate = f", {documents / elapsed:,.1f} docs/s" if elapsed and documents else ""
        return Text(f"{documents:,} documents{rate}", style="progress.data.speed")


def stream_progress(console: Console) -> Progress:
    """A file read as a stream: how much of it is read, the documents so far and their rate,
    and the time left (on a terminal only, as document_progress)."""
    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        TaskProgressColumn(),
        DocumentsColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=not console.is_terminal,
    )
