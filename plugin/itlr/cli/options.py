"""The search options as CLI flags, derived from `itlr.options.OPTIONS`: one flag per option, with
the library's name, default and help, for every command that searches or builds a search."""

from __future__ import annotations

import functools
import inspect
import json
import typing
from collections.abc import Callable, Collection
from enum import StrEnum
from typing import Annotated, Any

import typer

from itlr import json_values
from itlr.cli.app import run_guarded
from itlr.errors import ConfigurationError
from itlr.options import OPTIONS, Option

PANEL = "Search options"
# What the UI's own search body decides, per request, in the query-bar proxy: it keeps these as
# sent (k covers size + from), so they are not proxy settings. Every other option is one.
PER_REQUEST = {
    "k": "size",
    "from_": "from",
    "search_after": "search_after",
    "source_fields": "_source",
    "highlight": "highlight",
    "explain": "explain",
}
PROXY_OPTIONS = tuple(option.name for option in OPTIONS if option.name not in PER_REQUEST)


def _choice_enum(option: Option) -> type[StrEnum]:
    # Member names must be identifiers; the values are the library's names (per-term, ...).
    members = {value.replace("-", "_"): value for value in option.choices}
    return StrEnum(option.key.title().replace("_", ""), members)  # type: ignore[return-value]


def _parameter(option: Option, unset: bool = False) -> tuple[Any, Any]:
    """The typed annotation and default of one option's flag. An `unset` flag defaults to None,
    so the command can tell it was not given; its help still names the library's default."""
    names = [option.flag, "-k"] if option.name == "k" else [option.flag]
    help = f"{option.help} Default: {option.default}." if unset else option.help
    flag = typer.Option(
        *names,
        help=help,
        metavar=option.metavar,
        rich_help_panel=PANEL,
        show_default=not unset,
    )
    default = None if unset else option.default
    hint: Any
    if option.kind == "choice":
        hint = _choice_enum(option)
        if unset:
            hint = hint | None
        else:
            default = hint(default)
    elif option.kind in ("object", "list", "fields"):
        hint = str | None  # JSON text or a comma-separated list, parsed in `_value`
    else:
        hint = {"int": int, "float": float, "bool": bool}[option.kind]
        if option.optional:
            hint = hint | None
    return Annotated[hint, flag], default


def _json(option: Option, text: str, expected: type, example: str) -> Any:
    try:
        value = json_values.loads(text, option.flag)
    except json.JSONDecodeError as bad:
        raise ConfigurationError(
            f"{option.flag} is not valid JSON: {bad.msg} at character {bad.pos}"
        ) from None
    if not isinstance(value, expected):
        raise ConfigurationError(f"{option.flag} must be a JSON {example}")
    return value


def _value(option: Option, given: Any) -> Any:
    """A flag's value as the library names it (enum to its name, JSON text to its value)."""
    if given is None:
        return None
    if option.kind == "choice":
        return given.value
    if option.kind == "object":
        return _json(option, given, dict, 'object, e.g. \'{"term": {"metadata.lang": "en"}}\'')
    if option.kind == "list":
        return _json(option, given, list, "list, e.g. '[0.83, \"d17\"]'")
    if option.kind == "fields":
        return tuple(name.strip() for name in given.split(",") if name.strip())
    return given


def search_option_command(
    only: Collection[str] | None = None,
    unset: Collection[str] = (),
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command one flag per search option (or per option named in `only`); it receives
    their values, under the library's names, as `option_values` (a dict for
    `itlr.options.search_options`). An option named in `unset` is left out of `option_values`
    when its flag is not given: `search_options` applies its default (the one place defaults
    live), and the command can tell a choice the user made from the default."""
    chosen = [option for option in OPTIONS if only is None or option.name in only]

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(func)
        own = [p for p in signature.parameters.values() if p.name != "option_values"]
        shapes = {option.name: _parameter(option, option.name in unset) for option in chosen}
        extra = [
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint
            )
            for name, (hint, default) in shapes.items()
        ]

        @functools.wraps(func)
        def wrapper(**kwargs: Any) -> Any:
            given = {option: kwargs.pop(option.name) for option in chosen}
            kwargs["option_values"] = run_guarded(
                lambda: {
                    option.name: _value(option, value)
                    for option, value in given.items()
                    if not (value is None and option.name in unset)
                }
            )
            return func(**kwargs)

        hints = typing.get_type_hints(func, include_extras=True)
        hints.pop("option_values", None)
        hints.update({name: hint for name, (hint, _default) in shapes.items()})
        wrapper.__annotations__ = hints
        wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[p.replace(annotation=hints.get(p.name, p.annotation)) for p in own] + extra
        )
        return wrapper

    return decorate
