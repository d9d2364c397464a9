"""The embedded engine's filter language: the engines' query DSL for term, terms, range, exists
and bool, checked against this grammar before any document is read.

Every malformed filter is one ConfigurationError line that says what is wrong (exit 2 on the
CLI, 400 from the service). Nesting deeper than LIMITS.max_depth is refused while compiling, so
a 400-deep `bool` costs 32 steps, not a recursion per level.

Comparisons follow the engines' coercion, so a field reads the same whether it came from CSV or
JSON: a number and a numeric string are compared as numbers (`{"term": {"year": 2021}}` matches
2021 and "2021"), a boolean and "true"/"false" as booleans. `range` bounds are numbers or ISO
8601 dates (`2021-05-01`, `2021-05-01T10:00:00Z`); a value that is neither never matches a range.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import UTC, date, datetime
from typing import Any, cast

from itlr.engines.store import StoredRow
from itlr.errors import ConfigurationError
from itlr.limits import LIMITS

Matcher = Callable[[StoredRow], bool]

BUILT_IN_FIELDS = frozenset({"id", "_id", "text"})
RANGE_BOUNDS = ("gt", "gte", "lt", "lte")
BOOL_CLAUSES = ("must", "filter", "must_not", "should")
KINDS = ("term", "terms", "range", "exists", "bool")
_EXAMPLE = '{"term": {"year": 2021}}'


def field_value(row: StoredRow, name: str) -> Any:
    if name in ("id", "_id"):
        return row.id
    if name == "text":
        return row.text
    # Remote engines keep user fields under "metadata."; accept the same filter here.
    return row.fields.get(name.removeprefix("metadata."))


def compile_filter(spec: Any) -> tuple[Matcher, frozenset[str]]:
    """A row predicate and the field names the filter reads; a malformed filter is one line."""
    names: set[str] = set()
    matcher = _compile(spec, 1, names)
    return matcher, frozenset(n.removeprefix("metadata.") for n in names)


def clause_count(spec: Any) -> int:
    """The leaf clauses of a compiled filter (term, terms, range, exists), each a test per row
    (a `terms` of many values is one: a set lookup)."""
    count = 0
    stack = [spec]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict) and len(item) == 1:
            ((kind, body),) = item.items()
            if kind == "bool" and isinstance(body, dict):
                stack.extend(body.values())
            else:
                count += 1
    return count


def _fail(message: str) -> ConfigurationError:
    return ConfigurationError(f"bad filter: {message}")


def _compile(spec: Any, depth: int, names: set[str]) -> Matcher:
    if depth > LIMITS.max_depth:
        raise _fail(
            f"nested deeper than {LIMITS.max_depth} levels (ITLR_MAX_DEPTH): flatten the bool"
        )
    if not isinstance(spec, dict) or len(spec) != 1:
        raise _fail(
            f"each clause is an object with one key ({', '.join(KINDS)}), got "
            f"{_show(spec)}; e.g. {_EXAMPLE}"
        )
    ((kind, body),) = spec.items()
    if kind == "bool":
        return _bool(body, depth, names)
    if kind not in KINDS:
        raise _fail(f"the embedded engine filters with {', '.join(KINDS)}, not {kind!r}")
    if kind == "exists":
        if not isinstance(body, dict) or set(body) != {"field"} or not _name(body["field"]):
            raise _fail('exists takes {"field": NAME}')
        name = body["field"]
        names.add(name)
        return lambda row: field_value(row, name) is not None
    name, value = _one_field(kind, body)
    names.add(name)
    if kind == "term":
        if isinstance(value, dict):
            if set(value) != {"value"}:
                raise _fail(
                    f'term on {name!r} takes a value or {{"value": ...}}, got {_show(value)}'
                )
            value = value["value"]
        wanted = _scalar(value, f"term on {name!r}")
        return lambda row: _equal(field_value(row, name), wanted)
    if kind == "terms":
        if not isinstance(value, list) or not value:
            raise _fail(f"terms on {name!r} takes a non-empty list of values, got {_show(value)}")
        allowed = [_scalar(v, f"terms on {name!r}") for v in value]
        return _one_of(name, allowed)
    return _range(name, value)


def _bool(body: Any, depth: int, names: set[str]) -> Matcher:
    if not isinstance(body, dict) or not body or set(body) - set(BOOL_CLAUSES):
        raise _fail(f"bool takes some of {', '.join(BOOL_CLAUSES)}, got {_show(body)}")

    def clauses(key: str) -> list[Matcher]:
        value = body.get(key, [])
        items = value if isinstance(value, list) else [value]
        return [_compile(c, depth + 1, names) for c in items]

    required = clauses("must") + clauses("filter")
    forbidden = clauses("must_not")
    optional = clauses("should")
    return lambda row: (
        all(c(row) for c in required)
        and not any(c(row) for c in forbidden)
        and (not optional or any(c(row) for c in optional))
    )


def _one_field(kind: str, body: Any) -> tuple[str, Any]:
    if not isinstance(body, dict) or len(body) != 1:
        got = f"{len(body)} fields" if isinstance(body, dict) else _show(body)
        raise _fail(f"{kind} names exactly one field, got {got}; e.g. {_EXAMPLE}")
    ((name, value),) = body.items()
    if not _name(name):
        raise _fail(f"{kind} needs a field name, got {name!r}")
    return name, value


def _name(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _scalar(value: Any, where: str) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        raise _fail(f"{where}: {value} is not a finite number")
    if isinstance(value, int) and not isinstance(value, bool) and _as_number(value) is None:
        raise _fail(f"{where}: an integer of over 308 digits is no finite number")
    if not isinstance(value, str | int | float | bool):
        raise _fail(f"{where} compares with strings, numbers or booleans, not {_show(value)}")
    return value


def _range(name: str, bounds: Any) -> Matcher:
    if not isinstance(bounds, dict) or not bounds or set(bounds) - set(RANGE_BOUNDS):
        raise _fail(
            f"range on {name!r} takes some of {', '.join(RANGE_BOUNDS)}, got {_show(bounds)}; "
            'e.g. {"range": {"year": {"gte": 2020}}}'
        )
    parsed = {op: _bound(name, op, v) for op, v in bounds.items()}
    tests = {
        "gt": lambda a, b: a > b,
        "gte": lambda a, b: a >= b,
        "lt": lambda a, b: a < b,
        "lte": lambda a, b: a <= b,
    }

    def matches(row: StoredRow) -> bool:
        stored = field_value(row, name)
        for op, bound in parsed.items():
            value = _as_date(stored) if isinstance(bound, datetime) else _as_number(stored)
            if value is None or not tests[op](value, bound):
                return False
        return True

    return matches


def _bound(name: str, op: str, value: Any) -> float | datetime:
    number = _as_number(value)
    if number is not None and not isinstance(value, bool):
        return number
    moment = _as_date(value) if isinstance(value, str) else None
    if moment is None:
        raise _fail(
            f"range {op} on {name!r} is a number or an ISO date (2021-05-01), got {_show(value)}"
        )
    return moment


def _as_number(value: Any) -> float | None:
    """A finite float, or None: an int past the float range (a document stored before ingestion
    refused them) or a string that is no number is not one."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def _as_date(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        try:
            day = date.fromisoformat(value.strip())
        except ValueError:
            return None
        moment = datetime(day.year, day.month, day.day)
    # Naive times are read as UTC, so a date compares with a zoned timestamp.
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _equal(stored: Any, wanted: Any) -> bool:
    if stored == wanted and type(stored) is not bool and type(wanted) is not bool:
        return True
    if isinstance(stored, list):  # a multi-valued field matches when any value does
        return any(_equal(item, wanted) for item in stored)
    if isinstance(wanted, bool) or isinstance(stored, bool):
        return _as_bool(stored) is not None and _as_bool(stored) == _as_bool(wanted)
    if isinstance(wanted, int | float) or isinstance(stored, int | float):
        left, right = _as_number(stored), _as_number(wanted)
        return left is not None and left == right
    return False


def _one_of(name: str, allowed: list[Any]) -> Matcher:
    """`terms`: whether the field equals any allowed value as `_equal` says, by set lookups, so
    a row costs the same for 3 values as for max_filter_values."""
    keys: set[tuple[str, Any]] = set()
    for wanted in allowed:
        keys.update(_wanted_keys(wanted))

    def matches(row: StoredRow) -> bool:
        pending = [field_value(row, name)]
        while pending:
            stored = pending.pop()
            if isinstance(stored, list):  # a multi-valued field matches when any value does
                pending.extend(stored)
            elif not keys.isdisjoint(_stored_keys(stored)):
                return True
        return False

    return matches


def _wanted_keys(wanted: Any) -> list[tuple[str, Any]]:
    """The keys under which `_equal(stored, wanted)` can hold: ("b", ...) booleans, ("n", ...)
    numbers, ("s", ...) strings exactly, ("sb" / "sn", ...) a string read as a boolean / number
    (which only a stored boolean / number matches)."""
    if isinstance(wanted, bool):
        return [("b", wanted)]
    if isinstance(wanted, int | float):
        number = _as_number(wanted)
        return [("n", number)] if number is not None else []
    keys: list[tuple[str, Any]] = [("s", wanted)]
    if (flag := _as_bool(wanted)) is not None:
        keys.append(("sb", flag))
    if (number := _as_number(wanted)) is not None:
        keys.append(("sn", number))
    return keys


def _stored_keys(stored: Any) -> list[tuple[str, Any]]:
    if isinstance(stored, bool):
        return [("b", stored), ("sb", stored)]
    if isinstance(stored, int | float):
        number = _as_number(stored)
        return [("n", number), ("sn", number)] if number is not None else []
    if isinstance(stored, str):
        keys: list[tuple[str, Any]] = [("s", stored)]
        if (flag := _as_bool(stored)) is not None:
            keys.append(("b", flag))
        if (number := _as_number(stored)) is not None:
            keys.append(("n", number))
        return keys
    return []


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return {"true": True, "false": False}.get(value.strip().lower())
    return None


def _show(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def unknown_fields(names: Iterable[str], known: Iterable[str]) -> list[str]:
    """The filter's field names that no document has (built-in names are always known)."""
    present = set(known) | BUILT_IN_FIELDS
    return sorted(n for n in set(names) if n not in present)


def filter_rows(
    spec: Any,
    rows: Collection[int],
    stored: Sequence[StoredRow | None],
    known_fields: Callable[[], Iterable[str]],
    where: str,
) -> tuple[list[int], list[str]]:
    """The rows (numbers into `stored`, each a live row) the filter keeps, and a warning per
    filter field no document of the index `where` has (`known_fields`: every field name some
    live document has). Refused before the first row is read when clauses x rows, which bounds
    the cost, is over the limit."""
    matches, names = compile_filter(spec)
    LIMITS.check_filter_work(clause_count(spec), len(rows))
    notes = [
        f"filter field {name!r} is in no document of index at {where}: "
        "check its spelling (the filter matches as if the field were empty)"
        for name in unknown_fields(names, known_fields())
    ]
    # A live row always holds its document (only a deleted one is None).
    return [r for r in rows if matches(cast(StoredRow, stored[r]))], notes
