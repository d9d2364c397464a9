"""A progress bar that reports documents per second and time left."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TimeRemainingColumn,
)
from rich.text import Text


class RateColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("" if speed is None else f"{speed:,.1f} docs/s", style="progress.data.speed")


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
