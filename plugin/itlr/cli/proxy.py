"""The query-bar proxy from the command line: `serve_proxy` turns flags into a running proxy.

`itlr serve --proxy` calls `serve_proxy`; `python -m itlr.cli.proxy --url URL` runs it alone
(what docker-compose uses).
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

import typer

from itlr.cli.app import AndOp, Mode, NotOp, OrOp, Truth, run_guarded
from itlr.cli.options import (
    AndOpt,
    CandidatesOpt,
    ExcludeLexicalOpt,
    FilterOpt,
    HardFilterOpt,
    LamOpt,
    ModeOpt,
    NotOpt,
    NotStrengthOpt,
    OrOpt,
    TauOpt,
    TruthOpt,
    search_options,
)
from itlr.errors import ConfigurationError
from itlr.scoring import DEFAULT_NOT_STRENGTH

CONNECTION_KEYS = ("user", "password", "api_key", "ca_file", "verify_certs")
# Time-outs and the script-write switch: how the proxy serves, not how it searches.
SERVING_KEYS = ("upstream_timeout", "header_timeout", "body_timeout", "allow_script_writes")
DEFAULT_UPSTREAM_TIMEOUT = 120.0

UpstreamTimeoutOpt = Annotated[
    float,
    typer.Option(
        envvar="ITLR_UPSTREAM_TIMEOUT",
        help="Seconds the upstream may take to answer a request (HTTP 504 beyond).",
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
        help="Pass PUT / POST / DELETE on itlr's stored script ids through (refused otherwise).",
    ),
]


def serve_proxy(
    url: str,
    field: str = "itlr",
    host: str = "127.0.0.1",
    port: int = 8000,
    token: str | None = None,
    **connection_and_search_options: Any,
) -> None:
    """Serve the query-bar proxy in front of `url` until interrupted.

    Connection options: user, password, api_key, ca_file, verify_certs (the proxy uses them only
    to register itlr's stored scripts; searches carry the UI's own credentials). Search options:
    those of `itlr search` by the same names (mode, candidates, hard_filter, and_, or_, not_,
    not_strength, truth, tau, lam, filter, exclude_lexical) and model; k comes from each request's size.
    """
    from itlr.engines.connection import Connection
    from itlr.proxy import check_exposure, create_proxy_app, run_proxy

    given = dict(connection_and_search_options)
    connection_values = {key: given.pop(key) for key in CONNECTION_KEYS if key in given}
    serving = {key: given.pop(key) for key in SERVING_KEYS if key in given}
    model = given.pop("model", None)
    unknown = set(given) - {
        "mode", "candidates", "hard_filter", "and_", "or_", "not_", "not_strength", "truth",
        "tau", "lam", "filter", "exclude_lexical",
    }  # fmt: skip
    if unknown:
        raise TypeError(f"serve_proxy got unknown options: {', '.join(sorted(unknown))}")

    def start() -> None:
        from itlr.proxy.upstream import check_scripts_at_start
        from itlr.service.timeouts import ReadTimeouts

        check_exposure(host, token)
        timeouts = ReadTimeouts.from_env(serving.get("header_timeout"), serving.get("body_timeout"))
        upstream_timeout = serving.get("upstream_timeout", DEFAULT_UPSTREAM_TIMEOUT)
        if not upstream_timeout > 0:
            raise ConfigurationError(
                "the upstream time-out (--upstream-timeout, ITLR_UPSTREAM_TIMEOUT) must be a "
                f"positive number of seconds, not {upstream_timeout}"
            )
        defaults = search_options(
            k=10,
            mode=Mode(given.get("mode", Mode.knn)),
            candidates=given.get("candidates"),
            hard_filter=given.get("hard_filter"),
            and_=AndOp(given.get("and_", AndOp.product)),
            or_=OrOp(given.get("or_", OrOp.sum)),
            not_=NotOp(given.get("not_", NotOp.complement)),
            not_strength=given.get("not_strength", DEFAULT_NOT_STRENGTH),
            truth=Truth(given.get("truth", Truth.clamp)),
            tau=given.get("tau", 0.5),
            lam=given.get("lam", 10.0),
            filter=given.get("filter"),
            exclude_lexical=given.get("exclude_lexical", False),
            explain=False,
            model=model,
        )
        connection = Connection.from_env(url, **connection_values)
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        # Before the model loads: a foreign script under itlr's id stops the proxy at once.
        unchecked = check_scripts_at_start(connection, min(upstream_timeout, 10.0))
        if unchecked:
            logging.getLogger("itlr.proxy").warning(unchecked)
        from itlr.embed import get_embedder

        # Loaded before the first request, so that no UI request waits for it.
        embedder = get_embedder(model)
        app = create_proxy_app(
            connection,
            field=field,
            embedder=embedder,
            defaults=defaults,
            token=token,
            timeout=upstream_timeout,
            allow_script_writes=serving.get("allow_script_writes", False),
        )
        # httpx logs every upstream URL at info level; the proxy logs what it forwards itself.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        run_proxy(app, host, port, timeouts)

    run_guarded(start)


def main(
    url: Annotated[str, typer.Option(envvar="ITLR_URL", help="The upstream cluster URL.")],
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
    user: Annotated[str | None, typer.Option(envvar="ITLR_USER")] = None,
    password: Annotated[
        str | None, typer.Option(envvar="ITLR_PASSWORD", show_default=False)
    ] = None,
    api_key: Annotated[str | None, typer.Option(envvar="ITLR_API_KEY", show_default=False)] = None,
    ca_file: Annotated[str | None, typer.Option(envvar="ITLR_CA_FILE")] = None,
    model: Annotated[
        str | None, typer.Option(help="Embedding model of the indexes (default: bundled).")
    ] = None,
    mode: ModeOpt = Mode.knn,
    candidates: CandidatesOpt = None,
    hard_filter: HardFilterOpt = None,
    and_: AndOpt = AndOp.product,
    or_: OrOpt = OrOp.sum,
    not_: NotOpt = NotOp.complement,
    not_strength: NotStrengthOpt = DEFAULT_NOT_STRENGTH,
    truth: TruthOpt = Truth.clamp,
    tau: TauOpt = 0.5,
    lam: LamOpt = 10.0,
    filter: FilterOpt = None,
    exclude_lexical: ExcludeLexicalOpt = False,
    upstream_timeout: UpstreamTimeoutOpt = DEFAULT_UPSTREAM_TIMEOUT,
    header_timeout: HeaderTimeoutOpt = None,
    body_timeout: BodyTimeoutOpt = None,
    allow_script_writes: AllowScriptWritesOpt = False,
) -> None:
    """Serve the query-bar proxy: point Kibana / Dashboards at it and type itlr:(...) queries."""
    serve_proxy(
        url,
        field,
        host,
        port,
        token,
        user=user,
        password=password,
        api_key=api_key,
        ca_file=ca_file,
        model=model,
        mode=mode,
        candidates=candidates,
        hard_filter=hard_filter,
        and_=and_,
        or_=or_,
        not_=not_,
        not_strength=not_strength,
        truth=truth,
        tau=tau,
        lam=lam,
        filter=filter,
        exclude_lexical=exclude_lexical,
        upstream_timeout=upstream_timeout,
        header_timeout=header_timeout,
        body_timeout=body_timeout,
        allow_script_writes=allow_script_writes,
    )


if __name__ == "__main__":
    typer.run(main)
