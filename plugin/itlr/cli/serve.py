"""`itlr serve`: the JSON HTTP service over one index (itlr.service)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from itlr.cli.app import (
    FROM_FLAGS,
    app,
    encoder_command,
    engine_command,
    err,
    run_guarded,
    warn,
)
from itlr.cli.options import PROXY_OPTIONS, search_option_command
from itlr.cli.rewrite import LLMFlags, llm_command
from itlr.cli.serve_proxy import (
    DEFAULT_UPSTREAM_TIMEOUT,
    AllowScriptWritesOpt,
    BodyTimeoutOpt,
    HeaderTimeoutOpt,
    IndexConfigOpt,
    ScriptCheckOpt,
    UpstreamTimeoutOpt,
)
from itlr.engines.integrity import SCRIPT_CHECK_SECONDS, check_interval
from itlr.errors import ConfigurationError
from itlr.extras import require
from itlr.limits import LIMITS
from itlr.option_groups import EncoderOptions
from itlr.service.security import TOKEN_ENV
from itlr.settings import seconds


@app.command()
@engine_command
@search_option_command(only=PROXY_OPTIONS)
@llm_command
@encoder_command()
def serve(
    context: typer.Context,
    index: Annotated[
        str | None,
        typer.Option(
            "--index", "-i", help="Index to serve (not with --proxy, which serves every index)."
        ),
    ] = None,
    spec: Any = None,
    proxy: Annotated[
        bool,
        typer.Option(
            "--proxy",
            help="Serve the query-bar proxy in front of --url instead of the JSON API: point "
            "Kibana / Dashboards at it and type itlr:(...) in the query bar.",
        ),
    ] = False,
    field: Annotated[
        str, typer.Option(help="With --proxy: the query bar's virtual field.")
    ] = "itlr",
    host: Annotated[
        str, typer.Option(help="Address to bind; beyond loopback a --token is required.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    token: Annotated[
        str | None,
        typer.Option(
            envvar=TOKEN_ENV,
            help="Client token every request must present (Authorization: Bearer TOKEN or "
            "X-Itlr-Token); required when --host is not loopback. Prefer the env var.",
            show_default=False,
        ),
    ] = None,
    max_body_bytes: Annotated[
        int,
        typer.Option(help="Largest request body accepted (413 above); env ITLR_MAX_BODY_BYTES."),
    ] = LIMITS.max_body_bytes,
    llm: LLMFlags = FROM_FLAGS,
    encoding: EncoderOptions = FROM_FLAGS,
    torch_threads: Annotated[
        int | None,
        typer.Option(
            help="Torch threads per encode (default: torch's). 1 is much faster for sequential "
            "clients on a small machine; scores may then differ from `itlr search` by ~1e-7."
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
    header_timeout: HeaderTimeoutOpt = None,
    body_timeout: BodyTimeoutOpt = None,
    upstream_timeout: UpstreamTimeoutOpt = DEFAULT_UPSTREAM_TIMEOUT,
    allow_script_writes: AllowScriptWritesOpt = False,
    script_check_interval: ScriptCheckOpt = SCRIPT_CHECK_SECONDS,
    index_config: IndexConfigOpt = None,
    option_values: Any = None,
) -> None:
    """Serve an index over HTTP: POST /search, /translate, /parse, /rewrite; GET /healthz, /docs;
    the search workbench (dense vs itlr side by side) at / in a browser.

    With --proxy: serve the query-bar proxy in front of the cluster at --url instead; the
    search options set its defaults (the JSON API takes them in each request body).
    """
    from itlr.embed import set_default_encoder

    # Process-wide: the service's Index and the proxy's embedder both load through get_embedder.
    run_guarded(lambda: set_default_encoder(encoding.encoder, encoding.encoder_url))
    if proxy:
        serving = {
            "header_timeout": header_timeout,
            "body_timeout": body_timeout,
            "upstream_timeout": upstream_timeout,
            "allow_script_writes": allow_script_writes,
            "script_check_interval": script_check_interval,
            "index_config": index_config,
            # --vector-field / --text-field: the layout of indexes itlr did not make; their
            # defaults name no such layout.
            "vector_field": _given(context, "vector_field", spec.layout.vector_field),
            "text_field": _given(context, "text_field", spec.layout.text_field),
        }
        _serve_proxy(spec, field, host, port, token, encoding, {**serving, **option_values})
        return
    if index is None:
        run_guarded(_missing_index)
    run_guarded(lambda: _no_search_options(option_values))
    if index_config is not None:
        run_guarded(_index_config_without_proxy)

    def action() -> Any:
        from itlr.embed import set_torch_threads
        from itlr.index import Index
        from itlr.service import create_app
        from itlr.service.server import checked_token
        from itlr.service.timeouts import ReadTimeouts

        # The rules every server starts under (itlr.service.security), before the model loads.
        client, notes = checked_token(host, token)
        for note in notes:
            warn(note)
        check_interval(script_check_interval)
        seconds(
            upstream_timeout, "the upstream time-out (--upstream-timeout, ITLR_UPSTREAM_TIMEOUT)"
        )
        set_torch_threads(torch_threads)
        opened = Index.from_spec(spec, encoding=encoding, create=False)
        for warning in opened.warnings:
            warn(warning)
        if hasattr(opened.backend, "script_check_seconds"):  # a cluster index: its scripts
            opened.backend.script_check_seconds = script_check_interval
        config = llm.config()
        timeouts = ReadTimeouts.from_env(header_timeout, body_timeout)
        app = create_app(
            opened,
            token=client,
            max_body_bytes=max_body_bytes,
            llm=config,
            upstream_timeout=upstream_timeout,
        )
        return app, opened, timeouts, client

    service, opened, timeouts, client = run_guarded(action)
    run_guarded(lambda: require("serve", "uvicorn"))
    from itlr.service.server import run_server

    err.print(
        f"serving {opened.engine} index {opened.name!r} ({opened.count()} documents) on "
        f"http://{host}:{port} (workbench at /, API docs at /docs)",
        highlight=False,
        markup=False,
    )
    run_guarded(lambda: run_server(service, host, port, client, timeouts, log_level=log_level))


def _missing_index() -> None:
    raise ConfigurationError("serve needs --index NAME (or --proxy --url URL for the query bar)")


def _no_search_options(given: dict[str, Any]) -> None:
    from itlr.options import OPTIONS_BY_NAME

    changed = [
        option.flag
        for option in (OPTIONS_BY_NAME[name] for name in given)
        if given[option.name] != option.default
    ]
    if changed:
        raise ConfigurationError(
            f"{', '.join(changed)} set the proxy's defaults (with --proxy); the JSON API takes "
            'search options in each request body, e.g. {"query": "...", "k": 5}'
        )


def _given(context: typer.Context, name: str, value: str) -> str | None:
    """A flag's value when the user set it (command line or environment), else None."""
    source = context.get_parameter_source(name)
    return None if source is None or source.name == "DEFAULT" else value


def _index_config_without_proxy() -> None:
    raise ConfigurationError(
        "--index-config describes the indexes the query-bar proxy serves: use it with --proxy "
        "(the JSON API serves one index: name its fields with --vector-field / --text-field)"
    )


def _serve_proxy(
    spec: Any,
    field: str,
    host: str,
    port: int,
    token: str | None,
    encoding: EncoderOptions,
    options: dict[str, Any],
) -> None:
    from itlr.cli.serve_proxy import serve_proxy

    if spec.connection is None:
        run_guarded(_missing_upstream)
    serve_proxy(spec.connection, field, host, port, token, encoding, **options)


def _missing_upstream() -> None:
    raise ConfigurationError("--proxy needs --url: the cluster the UI should reach through it")
