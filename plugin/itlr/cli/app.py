"""The typer app, shared options and error handling for every `itlr` command."""

from __future__ import annotations

import functools
import inspect
import re
import typing
from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, get_args

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text
from typer.core import TyperGroup

from itlr.embed import ENCODER_ENV, ENCODER_URL_ENV, ENCODERS
from itlr.engines.factory import ENGINE_ALIASES, ENGINES
from itlr.errors import ConfigurationError, ItlrError, QuerySyntaxError
from itlr.extras import MissingExtra, extra_of
from itlr.openai_encoder import KEY_ENV as ENCODER_KEY_ENV
from itlr.options import Mode as ModeName
from itlr.prompts import PASSAGE_PROMPT_ENV, QUERY_PROMPT_ENV
from itlr.rewrite import METHODS as REWRITE_METHODS
from itlr.scoring import AndName, NotName, OrName, TruthName

if TYPE_CHECKING:
    from itlr.engines.connection import Connection
    from itlr.engines.factory import EngineSpec
    from itlr.option_groups import EncoderOptions

T = TypeVar("T")


class ItlrGroup(TyperGroup):
    """The command group, with a hint for a query that starts with '-' (Kibana's NOT), whose
    help is printed as written."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _help_as_written(self)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except MissingExtra as absent:  # raised outside run_guarded: still one line
            raise fail(str(absent)) from None
        except ModuleNotFoundError as absent:
            # An optional module imported outside run_guarded: still one line naming the extra.
            extra = extra_of(absent.name or "")
            if extra is None:
                raise
            raise fail(str(MissingExtra(extra, (absent.name or "").split(".")[0]))) from None
        except Exception as unknown:
            # typer vendors click, so its NoSuchOption is only known by name and fields.
            if type(unknown).__name__ != "NoSuchOption" or not hasattr(unknown, "option_name"):
                raise
            command = ctx.invoked_subcommand or "COMMAND"
            typing.cast(Any, unknown).message += (
                f". If {unknown.option_name!r} starts a query, put -- before it "
                f"(itlr {command} -- '{unknown.option_name} ...') or write NOT instead of '-'"
            )
            raise


def _help_as_written(command: Any) -> None:
    """Escape the `[` of every help text below `command`: rich reads help as markup, where
    `itlr[torch]` and `itlr[llm]` were style tags and vanished from `--help` (the help of every
    command and option, the bench group's too, once each)."""
    if getattr(command, "_itlr_help_escaped", False):
        return
    command._itlr_help_escaped = True
    for name in ("help", "short_help", "epilog"):
        text = getattr(command, name, None)
        if isinstance(text, str):
            setattr(command, name, escape(text))
    for param in getattr(command, "params", ()):
        if isinstance(getattr(param, "help", None), str):
            param.help = escape(param.help)
    for sub in getattr(command, "commands", {}).values():
        _help_as_written(sub)


app = typer.Typer(
    cls=ItlrGroup,
    help="Logical retrieval over dense vectors: AND, OR, NOT for embedding search.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)


def print_markdown(text: str) -> None:
    """A markdown report on stdout as it is: rich wraps lines at the terminal's width (80
    columns when stdout is a pipe or a file), which breaks a table's rows in two."""
    out.print(text, markup=False, highlight=False, soft_wrap=True)


def _choices(name: str, values: tuple[str, ...]) -> Any:
    """A StrEnum whose members are the library's own names, so that a name added there is a
    choice here and a CLI choice cannot exist that the library refuses."""
    return StrEnum(name, {value: value for value in values})


# The calibrated truth map is chosen by name too (itlr.options.truth_map loads it).
# Typed Any: their members exist only at run time, and a type alias (EncoderOpt) may use them.
Engine: Any = _choices("Engine", (*ENGINES, *ENGINE_ALIASES))
Mode: Any = _choices("Mode", get_args(ModeName))
AndOp: Any = _choices("AndOp", get_args(AndName))
OrOp: Any = _choices("OrOp", get_args(OrName))
NotOp: Any = _choices("NotOp", get_args(NotName))
Truth: Any = _choices("Truth", (*get_args(TruthName), "calibrated"))
Rewrite: Any = _choices("Rewrite", ("none", *REWRITE_METHODS))
Encoder: Any = _choices("Encoder", ENCODERS)


# The library names options as Python does, in backticks: `hard_filter`, `mode="exact"`.
_PYTHON_OPTION = re.compile(r'`(\w+)(?:="([^"`]*)")?`')


def _python_option_names() -> frozenset[str]:
    from itlr.options import OPTIONS

    return frozenset(
        {option.name for option in OPTIONS}
        | set(_ENGINE_OPTIONS)
        | {
            "model",
            "index",
            "with_install",
            "token",
            "split",
            "qrels",
            "rewrite",
            "methods",
            "depth",
            "llm_model",
            "llm_base_url",
            "host",
            "torch_threads",
            "encoder",
            "encoder_url",
            "query_prompt",
            "passage_prompt",
            "batch_size",
            "interval",
            "verify_rate",
        }
    )


def as_flags(message: str) -> str:
    """A library message with its Python option names turned into this CLI's flags:
    `hard_filter` -> --hard-filter, `mode="exact"` -> --mode exact."""
    names = _python_option_names()

    def flag(match: re.Match[str]) -> str:
        name, value = match.group(1), match.group(2)
        if name not in names:
            return match.group(0)
        spelled = "--" + name.rstrip("_").replace("_", "-")
        return spelled if value is None else f"{spelled} {value}"

    return _PYTHON_OPTION.sub(flag, message)


def labelled(label: str, style: str, message: str) -> Text:
    """A styled label and a message printed literally: ids, engine reasons and user text may
    hold `[...]`, which must not be read as Rich markup."""
    return Text.assemble((label, style), " ", message)


def say(console: Console, label: str, style: str, message: str) -> None:
    console.print(labelled(label, style, message), highlight=False, soft_wrap=True)


def warn(message: str) -> None:
    say(err, "warning:", "yellow", as_flags(message))


def fail(message: str) -> typer.Exit:
    say(err, "error:", "bold red", as_flags(message))
    return typer.Exit(2)


def run_guarded(action: Callable[[], T]) -> T:
    """Turn our errors into one line and exit status 2 instead of a traceback."""
    try:
        return action()
    except QuerySyntaxError as bad:
        err.print(bad.render(), highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(2) from None
    except ItlrError as bad:
        raise fail(str(bad)) from None
    except OSError as bad:
        # Disk full, permissions, a vanished file: the system's words and the path are enough.
        where = f": {bad.filename}" if bad.filename else ""
        raise fail(f"{bad.strerror or bad}{where}") from None


IndexOpt = Annotated[
    str,
    typer.Option("--index", "-i", help="Index name (or a folder path for the embedded engine)."),
]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        help="Embedding model: a sentence-transformers path or name (default: bundled all-MiniLM-L6-v2)."
    ),
]
EncoderOpt = Annotated[
    Encoder | None,
    typer.Option(
        envvar=ENCODER_ENV,
        help="What runs the model: its ONNX graph (built once into $ITLR_HOME) or torch (needs "
        "itlr[torch]); onnx-int8 is smaller and less exact; openai asks the OpenAI-compatible "
        "endpoint at --encoder-url for --model's vectors (needs itlr[llm]; key from "
        f"{ENCODER_KEY_ENV}). Default onnx.",
        show_default=False,
    ),
]
EncoderUrlOpt = Annotated[
    str | None,
    typer.Option(
        envvar=ENCODER_URL_ENV,
        help="With --encoder openai: the endpoint's base URL, e.g. http://127.0.0.1:7997/v1.",
        show_default=False,
    ),
]
QueryPromptOpt = Annotated[
    str | None,
    typer.Option(
        envvar=QUERY_PROMPT_ENV,
        help="Text put before each query term, e.g. 'query: ' for E5 models. An index itlr "
        "made records its prompts; by default they are used.",
        show_default=False,
    ),
]
PassagePromptOpt = Annotated[
    str | None,
    typer.Option(
        envvar=PASSAGE_PROMPT_ENV,
        help="Text put before each document's text, e.g. 'passage: ' for E5 models; recorded "
        "in an index itlr makes.",
        show_default=False,
    ),
]


ENCODER_OPTIONS: dict[str, tuple[Any, Any]] = {
    "model": (ModelOpt, None),
    "encoder": (EncoderOpt, None),
    "encoder_url": (EncoderUrlOpt, None),
    "query_prompt": (QueryPromptOpt, None),
    "passage_prompt": (PassagePromptOpt, None),
}
# The default of a parameter a decorator fills from its flags (typer never sees it).
FROM_FLAGS: Any = None


def encoder_command(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command the encoder flags (every one, or those `names` lists), where its
    `encoding` parameter stands; it receives them as `encoding` (an EncoderOptions)."""
    chosen = {name: ENCODER_OPTIONS[name] for name in names or ENCODER_OPTIONS}

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        return with_options(func, chosen, "encoding", _encoder_options, in_place=True)

    return decorate


def _encoder_options(values: dict[str, Any], _own: dict[str, Any]) -> EncoderOptions:
    from itlr.option_groups import EncoderOptions

    encoder = values.get("encoder")
    return EncoderOptions(**{**values, "encoder": encoder.value if encoder else None})


_CONNECTION_HELP = {
    "url": "Cluster URL, e.g. http://localhost:9200.",
    "user": "Basic-auth user.",
    "password": "Basic-auth password (prefer the env var).",
    "api_key": "API key (Elasticsearch).",
    "ca_file": "CA bundle for TLS.",
    "verify_certs": "Verify the cluster's TLS certificate (--no-verify-certs: a test cluster only).",
}


def _connection_options() -> dict[str, tuple[Any, Any]]:
    """One flag per field of Connection, each with its ITLR_<NAME> environment variable."""
    from dataclasses import MISSING, fields

    from itlr.engines.connection import Connection

    options: dict[str, tuple[Any, Any]] = {}
    for item in fields(Connection):
        default = None if item.default is MISSING else item.default
        hint = bool if isinstance(default, bool) else str | None
        flag = typer.Option(
            envvar=f"ITLR_{item.name.upper()}",
            help=_CONNECTION_HELP[item.name],
            # A field kept out of repr is a secret: never echoed in --help either.
            show_default=item.repr,
            rich_help_panel="Engine",
        )
        options[item.name] = (Annotated[hint, flag], default)
    return options


CONNECTION_OPTIONS = _connection_options()
_ENGINE_OPTIONS: dict[str, tuple[Any, Any]] = {
    "engine": (
        Annotated[
            Engine | None,
            typer.Option(
                help="Where the index lives: embedded (no server; `memory` is its old name), "
                "opensearch, elasticsearch, or auto (ask the cluster). Default: auto with --url, "
                "else embedded.",
                rich_help_panel="Engine",
            ),
        ],
        None,
    ),
    **CONNECTION_OPTIONS,
    "vector_field": (
        Annotated[str, typer.Option(help="Vector field of the index.", rich_help_panel="Engine")],
        "embedding",
    ),
    "text_field": (
        Annotated[str, typer.Option(help="Text field of the index.", rich_help_panel="Engine")],
        "text",
    ),
    "inline_script": (
        Annotated[
            bool,
            typer.Option(
                help="Send the fixed Painless source with each request instead of a stored "
                "script (for clusters that forbid stored scripts).",
                rich_help_panel="Engine",
            ),
        ],
        False,
    ),
}


def _connection(values: dict[str, Any]) -> Connection:
    from itlr.engines.connection import Connection

    given = {name: values[name] for name in CONNECTION_OPTIONS if name != "url"}
    connection = Connection.from_env(values["url"], **given)
    if not connection.verify_certs:
        warn(
            f"TLS certificates of {connection.url} are not verified (--no-verify-certs / "
            "ITLR_VERIFY_CERTS=false): anyone on the way can read the credentials and answers; "
            "give the cluster's CA with --ca-file instead"
        )
    return connection


def _build_spec(index_name: str, values: dict[str, Any]) -> EngineSpec:
    from itlr.engines.factory import EngineSpec, engine_name
    from itlr.engines.layout import IndexLayout

    engine = values["engine"]
    url = values["url"]
    name = engine_name(engine.value, warn) if engine else ("auto" if url else "embedded")
    return EngineSpec(
        engine=name,
        index_name=index_name,
        connection=_connection(values) if url and name != "embedded" else None,
        layout=IndexLayout(values["vector_field"], values["text_field"]),
        inline_script=values["inline_script"],
    )


def with_options(
    func: Callable[..., Any],
    options: dict[str, tuple[Any, Any]],
    target: str,
    build: Callable[[dict[str, Any], dict[str, Any]], Any],
    in_place: bool = False,
) -> Callable[..., Any]:
    """`func` with `options` as extra keyword flags, whose values `build` turns into the one
    argument `target` (build sees the flags' values and the command's own arguments). The
    flags come last, or `in_place` where `target` stands (--help lists them in that order)."""
    signature = inspect.signature(func)
    params = list(signature.parameters.values())
    names = [p.name for p in params]
    at = names.index(target) if in_place else len(params)
    kind = params[at].kind if in_place else inspect.Parameter.KEYWORD_ONLY
    own = [p for p in params if p.name != target]
    extra = [
        inspect.Parameter(name, kind, default=default, annotation=hint)
        for name, (hint, default) in options.items()
    ]

    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name in options}
        kwargs[target] = run_guarded(lambda: build(values, kwargs))
        return func(**kwargs)

    hints = typing.get_type_hints(func, include_extras=True)
    hints.pop(target, None)
    hints.update({name: hint for name, (hint, _default) in options.items()})
    wrapper.__annotations__ = hints
    wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[
            p.replace(annotation=hints.get(p.name, p.annotation))
            for p in [*own[:at], *extra, *own[at:]]
        ]
    )
    return wrapper


def engine_command(func: Callable[..., Any]) -> Callable[..., Any]:
    """Give a command the shared engine options; it receives them as `spec` (an EngineSpec)."""
    # A command whose --index is optional (eval) names its index itself when it is None.
    return with_options(
        func,
        _ENGINE_OPTIONS,
        "spec",
        lambda values, own: _build_spec(own.get("index") or "default", values),
    )


def connection_command(func: Callable[..., Any]) -> Callable[..., Any]:
    """Give a command the connection options (Connection's fields); it receives `connection`."""
    return with_options(func, CONNECTION_OPTIONS, "connection", _required_connection)


def _required_connection(values: dict[str, Any], _own: dict[str, Any]) -> Connection:
    if not values["url"]:
        raise ConfigurationError("give --url (or ITLR_URL): the cluster to reach")
    return _connection(values)


def optional_connection_command(func: Callable[..., Any]) -> Callable[..., Any]:
    """Give a command the connection options; it receives `connection`, None without --url."""
    return with_options(
        func,
        CONNECTION_OPTIONS,
        "connection",
        lambda values, _own: _connection(values) if values["url"] else None,
    )
