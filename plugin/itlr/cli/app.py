"""The typer app, shared options and error handling for every `itlr` command."""

from __future__ import annotations

import functools
import inspect
import re
import typing
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any, get_args

import typer
from rich.console import Console
from rich.text import Text
from typer.core import TyperGroup

from itlr.engines.factory import ENGINES
from itlr.errors import ItlrError, QuerySyntaxError
from itlr.options import Mode as ModeName
from itlr.rewrite import METHODS as REWRITE_METHODS
from itlr.scoring import AndName, NotName, OrName, TruthName


class ItlrGroup(TyperGroup):
    """The command group, with a hint for a query that starts with '-' (Kibana's NOT)."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as unknown:
            # typer vendors click, so its NoSuchOption is only known by name and fields.
            if type(unknown).__name__ != "NoSuchOption" or not hasattr(unknown, "option_name"):
                raise
            command = ctx.invoked_subcommand or "COMMAND"
            unknown.message += (
                f". If {unknown.option_name!r} starts a query, put -- before it "
                f"(itlr {command} -- '{unknown.option_name} ...') or write NOT instead of '-'"
            )
            raise


app = typer.Typer(
    cls=ItlrGroup,
    help="Logical retrieval over dense vectors: AND, OR, NOT for embedding search.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)


def _choices(name: str, values: tuple[str, ...]) -> Any:
    """A StrEnum whose members are the library's own names, so that a name added there is a
    choice here and a CLI choice cannot exist that the library refuses."""
    return StrEnum(name, {value: value for value in values})


# The calibrated truth map is chosen by name too (itlr.options.truth_map loads it).
Engine = _choices("Engine", ENGINES)
Mode = _choices("Mode", get_args(ModeName))
AndOp = _choices("AndOp", get_args(AndName))
OrOp = _choices("OrOp", get_args(OrName))
NotOp = _choices("NotOp", get_args(NotName))
Truth = _choices("Truth", (*get_args(TruthName), "calibrated"))
Rewrite = _choices("Rewrite", ("none", *REWRITE_METHODS))


# The library names options as Python does, in backticks: `hard_filter`, `mode="exact"`.
_PYTHON_OPTION = re.compile(r'`(\w+)(?:="([^"`]*)")?`')


def _python_option_names() -> frozenset[str]:
    from dataclasses import fields

    from itlr.options import SearchOptions

    return frozenset(
        {f.name for f in fields(SearchOptions)}
        | set(_ENGINE_OPTIONS)
        | {
            "model",
            "index",
            "and_",
            "or_",
            "not_",
            "not_strength",
            "tau",
            "lam",
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


def run_guarded(action):
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
    str, typer.Option("--index", "-i", help="Index name (or a folder path for the memory engine).")
]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        help="Embedding model: a sentence-transformers path or name (default: bundled all-MiniLM-L6-v2)."
    ),
]


_ENGINE_OPTIONS: dict[str, tuple[Any, Any]] = {
    "engine": (
        Annotated[
            Engine | None,
            typer.Option(
                help="Where the index lives: memory (embedded, no server), opensearch, "
                "elasticsearch, or auto (ask the cluster). Default: auto with --url, else memory.",
                rich_help_panel="Engine",
            ),
        ],
        None,
    ),
    "url": (
        Annotated[
            str | None,
            typer.Option(
                envvar="ITLR_URL",
                help="Cluster URL, e.g. http://localhost:9200.",
                rich_help_panel="Engine",
            ),
        ],
        None,
    ),
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
    "user": (
        Annotated[
            str | None,
            typer.Option(envvar="ITLR_USER", help="Basic-auth user.", rich_help_panel="Engine"),
        ],
        None,
    ),
    "password": (
        Annotated[
            str | None,
            typer.Option(
                envvar="ITLR_PASSWORD",
                help="Basic-auth password (prefer the env var).",
                show_default=False,
                rich_help_panel="Engine",
            ),
        ],
        None,
    ),
    "api_key": (
        Annotated[
            str | None,
            typer.Option(
                envvar="ITLR_API_KEY",
                help="API key (Elasticsearch).",
                show_default=False,
                rich_help_panel="Engine",
            ),
        ],
        None,
    ),
    "ca_file": (
        Annotated[
            str | None,
            typer.Option(
                envvar="ITLR_CA_FILE", help="CA bundle for TLS.", rich_help_panel="Engine"
            ),
        ],
        None,
    ),
}


def _build_spec(index: str, values: dict[str, Any]):
    from itlr.engines.connection import Connection
    from itlr.engines.dialect import IndexLayout
    from itlr.engines.factory import EngineSpec

    engine = values["engine"]
    url = values["url"]
    name = engine.value if engine else ("auto" if url else "memory")
    connection = None
    if url and name != "memory":
        connection = Connection.from_env(
            url,
            user=values["user"],
            password=values["password"],
            api_key=values["api_key"],
            ca_file=values["ca_file"],
        )
    return EngineSpec(
        engine=name,
        index=index,
        connection=connection,
        layout=IndexLayout(values["vector_field"], values["text_field"]),
        inline_script=values["inline_script"],
    )


def engine_command(func: Callable[..., Any]) -> Callable[..., Any]:
    """Give a command the shared engine options; it receives them as `spec` (an EngineSpec)."""
    signature = inspect.signature(func)
    own = [p for p in signature.parameters.values() if p.name != "spec"]
    extra = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint)
        for name, (hint, default) in _ENGINE_OPTIONS.items()
    ]

    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name in _ENGINE_OPTIONS}
        # A command whose --index is optional (eval) names its index itself when it is None.
        index = kwargs.get("index") or "default"
        kwargs["spec"] = run_guarded(lambda: _build_spec(index, values))
        return func(**kwargs)

    hints = typing.get_type_hints(func, include_extras=True)
    hints.pop("spec", None)
    hints.update({name: hint for name, (hint, _default) in _ENGINE_OPTIONS.items()})
    wrapper.__annotations__ = hints
    wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[p.replace(annotation=hints.get(p.name, p.annotation)) for p in own] + extra
    )
    return wrapper
