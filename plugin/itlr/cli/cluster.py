"""Commands that set up a cluster: install."""

from __future__ import annotations

from typing import Any

from itlr.cli.app import app, engine_command, out, run_guarded


@app.command()
@engine_command
def install(spec: Any = None) -> None:
    """Register itlr's stored Painless scripts in a cluster (idempotent; search does it too).

    A stored script under an itlr id whose source is not the packaged file is overwritten."""
    from itlr.engines.factory import remote_backend

    def action() -> None:
        backend = remote_backend(spec, model="", dims=0)
        installed = backend.install_scripts()
        if installed:
            out.print("installed " + ", ".join(installed))
        else:
            out.print("scripts already installed")

    run_guarded(action)
