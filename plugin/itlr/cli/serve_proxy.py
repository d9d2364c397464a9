"""The query-bar proxy from the command line: `serve_proxy` turns flags into a running proxy.

`itlr serve --proxy` calls `serve_proxy` (docker-compose's entry point); `python -m
itlr.cli.proxy ARGS` is `itlr serve --proxy ARGS` itself, so both start under the same rules.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

import typer

from itlr.cli.app import run_guarded, warn
from itlr.cli.options import PER_REQUEST, PROXY_OPTIONS
from itlr.engines.connection import Connection
from itlr.engines.integrity import SCRIPT_CHECK_SECONDS, check_interval
from itlr.errors import ConfigurationError
from itlr.option_groups import EncoderOptions
from itlr.options import SearchOptions, search_options
from itlr.settings import seconds

# Time-outs and the script-write switch: how the proxy serves, not how it searches.
DEFAULT_UPSTREAM_TIMEOUT = 120.0

UpstreamTimeoutOpt = Annotated[
    float,
    typer.Option(
        envvar="ITLR_UPSTREAM_TIMEOUT",
        help="Seconds the cluster may take to answer each request whole, headers and body "
        "together, not per read (HTTP 504 beyond).",
    ),
]
HeaderTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        envvar="ITLR_HEADER_TIMEOUT",
        help="Seconds a client has to send a request's headers (connection closed beyond; "
        "default 10).",
        show_default=False,
    ),
]
BodyTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        envvar="ITLR_BODY_TIMEOUT",
        help="Seconds a client has to send a request's body after its headers (default 30).",
        show_default=False,
    ),
]
AllowScriptWritesOpt = Annotated[
    bool,
    typer.Option(
        "--allow-script-writes",
        help="Pass PUT / POST / DELETE on itlr's stored script ids and its ingest pipeline "
        "through (refused otherwise).",
    ),
]

ScriptCheckOpt = Annotated[
    float,
    typer.Option(
        envvar="ITLR_SCRIPT_CHECK_INTERVAL",
        help="Seconds between two comparisons of itlr's stored scripts (and its ingest "
        "pipeline) with the packaged ones, by the proxy or the service (also soon after a "
        "failed search); at most 3600.",
    ),
]

# Where indexes itlr did not make keep their text and vectors.
IndexConfigOpt = Annotated[
    Path | None,
    typer.Option(
        help='With the proxy: JSON file {"PATTERN": {"vector_field": ..., "text_field": ..., '
        '"model": ..., "encoder": ..., "encoder_url": ..., "query_prompt": ...}} for indexes '
        "itlr did not make (all but the fields optional).",
        show_default=False,
    ),
]
VectorFieldOpt = Annotated[
    str | None,
    typer.Option(
        help="With the proxy: vector field of indexes itlr did not make.", show_default=False
    ),
]
TextFieldOpt = Annotated[
    str | None,
    typer.Option(
        help="With the proxy: text field of indexes itlr did not make.", show_default=False
    ),
]


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
    encoding: EncoderOptions | None = None,
    *,
    upstream_timeout: float = DEFAULT_UPSTREAM_TIMEOUT,
    header_timeout: float | None = None,
    body_timeout: float | None = None,
    allow_script_writes: bool = False,
    index_config: Path | None = None,
    vector_field: str | None = None,
    text_field: str | None = None,
    script_check_interval: float = SCRIPT_CHECK_SECONDS,
    **options: Any,
) -> None:
    """Serve the query-bar proxy in front of `upstream` (a URL or a Connection) until
    interrupted, embedding query terms as `encoding` says (its query prompt for the indexes
    --vector-field / --text-field describe).

    The connection is used only to register itlr's stored scripts; searches carry the UI's own
    credentials. `options`: the search options of `itlr search` by the same names (PROXY_OPTIONS:
    mode, candidates, plan, hard_filter, and_, ...); size, from, _source, highlight and explain
    come from each request's body.
    """
    from itlr.proxy import create_proxy_app, run_proxy

    encoding = encoding or EncoderOptions()
    model = encoding.model

    def start() -> None:
        from itlr.proxy.upstream import check_scripts_at_start
        from itlr.service.server import checked_token
        from itlr.service.timeouts import ReadTimeouts

        # The rules every server starts under (itlr.service.security), before anything loads.
        client, notes = checked_token(host, token)
        for note in notes:
            warn(note)
        timeouts = ReadTimeouts.from_env(header_timeout, body_timeout)
        seconds(
            upstream_timeout, "the upstream time-out (--upstream-timeout, ITLR_UPSTREAM_TIMEOUT)"
        )
        check_interval(script_check_interval)
        defaults = proxy_defaults(model, **options)
        connection = Connection.from_env(upstream) if isinstance(upstream, str) else upstream
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        # Before the model loads: a foreign script under itlr's id stops the proxy at once.
        unchecked = check_scripts_at_start(connection, min(upstream_timeout, 10.0))
        if unchecked:
            logging.getLogger("itlr.proxy").warning(unchecked)
        # Loaded before the first request, so that no UI request waits for it.
        embedder = encoding.embedder()
        app = create_proxy_app(
            connection,
            field=field,
            embedder=embedder,
            defaults=defaults,
            token=client,
            timeout=upstream_timeout,
            allow_script_writes=allow_script_writes,
            indexes=index_configs(
                index_config, vector_field, text_field, model, encoding.query_prompt
            ),
            script_check_seconds=script_check_interval,
        )
        # httpx logs every upstream URL at info level; the proxy logs what it forwards itself.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        run_proxy(app, host, port, timeouts)

    run_guarded(start)


def index_configs(
    path: Any,
    vector_field: str | None,
    text_field: str | None,
    model: str | None,
    query_prompt: str | None = None,
) -> tuple[Any, ...]:
    """Layouts of indexes itlr did not make: a config file's, then --vector-field /
    --text-field (and --query-prompt) for every other index."""
    from itlr.errors import ConfigurationError
    from itlr.proxy.upstream import IndexConfig, load_index_configs

    configs = load_index_configs(path) if path else ()
    if bool(vector_field) != bool(text_field):
        raise ConfigurationError("give --vector-field and --text-field together")
    if vector_field and text_field:
        configs = (*configs, IndexConfig("*", vector_field, text_field, model, query_prompt))
    return configs
