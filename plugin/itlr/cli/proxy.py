"""The query-bar proxy from the command line: `serve_proxy` turns flags into a running proxy.

`itlr serve --proxy` calls `serve_proxy`; `python -m itlr.cli.proxy --url URL` runs it alone
(what docker-compose uses).
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

import typer

from itlr.cli.app import connection_command, run_guarded
from itlr.cli.options import PER_REQUEST, PROXY_OPTIONS, search_option_command
from itlr.engines.connection import Connection
from itlr.errors import ConfigurationError
from itlr.options import SearchOptions, search_options


def proxy_defaults(model: str | None = None, **options: Any) -> SearchOptions:
    """The search options every rewritten search starts from, by `itlr search`'s names."""
    unknown = sorted(set(options) - set(PROXY_OPTIONS))
    for name in unknown:
        if name in PER_REQUEST:
            raise ConfigurationError(
                f"the proxy takes `{name}` from each search body ({PER_REQUEST[name]!r}), "
                "not as a setting"
            )
    if unknown:
        raise ConfigurationError(
            f"the proxy has no option {', '.join(unknown)}: choose from {', '.join(PROXY_OPTIONS)}"
        )
    return search_options(**options, model=model)


def serve_proxy(
    upstream: str | Connection,
    field: str = "itlr",
    host: str = "127.0.0.1",
    port: int = 8000,
    token: str | None = None,
    model: str | None = None,
    **options: Any,
) -> None:
    """Serve the query-bar proxy in front of `upstream` (a URL or a Connection) until
    interrupted.

    The connection is used only to register itlr's stored scripts; searches carry the UI's own
    credentials. `options`: the search options of `itlr search` by the same names (PROXY_OPTIONS:
    mode, candidates, plan, hard_filter, and_, ...); size, from, _source, highlight and explain
    come from each request's body.
    """
    from itlr.proxy import check_exposure, create_proxy_app, run_proxy

    def start() -> None:
        check_exposure(host, token)
        defaults = proxy_defaults(model, **options)
        connection = Connection.from_env(upstream) if isinstance(upstream, str) else upstream
        from itlr.embed import get_embedder

        # Loaded before the first request, so that no UI request waits for it.
        embedder = get_embedder(model)
        app = create_proxy_app(
            connection, field=field, embedder=embedder, defaults=defaults, token=token
        )
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        # httpx logs every upstream URL at info level; the proxy logs what it forwards itself.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        run_proxy(app, host, port)

    run_guarded(start)


@connection_command
@search_option_command(only=PROXY_OPTIONS)
def main(
    connection: Any = None,
    field: Annotated[str, typer.Option(help="The virtual field of the query bar.")] = "itlr",
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="ITLR_TOKEN",
            help="Client token (header X-Itlr-Token); required beyond loopback.",
            show_default=False,
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="Embedding model of the indexes (default: bundled).")
    ] = None,
    option_values: Any = None,
) -> None:
    """Serve the query-bar proxy: point Kibana / Dashboards at it and type itlr:(...) queries."""
    serve_proxy(connection, field, host, port, token, model, **option_values)


if __name__ == "__main__":
    typer.run(main)
