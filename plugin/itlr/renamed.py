"""A public method that was renamed keeps its old name for a while: calling it warns
(DeprecationWarning, pointing at the caller's line) and calls the new one."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any


def renamed(new: str, old: str, why: str = "") -> Callable[..., Any]:
    """A method for a class body: `old_name = renamed("new_name", "Class.old_name")`."""

    owner = old.rpartition(".")[0]
    shown = f"{owner}.{new}" if owner else new

    def alias(self: Any, *args: Any, **kwargs: Any) -> Any:
        warnings.warn(f"{old} is deprecated: call {shown}{why}", DeprecationWarning, stacklevel=2)
        return getattr(self, new)(*args, **kwargs)

    alias.__doc__ = f"Deprecated: `{new}`{why}."
    return alias
