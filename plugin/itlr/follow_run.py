"""The entry that follows an index an EngineSpec names (`itlr backfill --follow`,
`Index.follow`): it builds the backend and the embedder back-fill would, and
runs the in-place follower (itlr.follow) or, `into`, the copy follower (itlr.follow_copy). It
sits above both, so neither follower module imports the other's user.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from itlr.backfill import check_exact_only, cluster_backend, passage_embedder
from itlr.engines.factory import EngineSpec
from itlr.errors import ConfigurationError
from itlr.follow import FOLLOW_INTERVAL, VERIFY_RATE, Follower
from itlr.follow_copy import CopyFollower
from itlr.follow_cycle import FollowCycle
from itlr.write_report import WriteReport


def follow_spec(
    spec: EngineSpec,
    *,
    model: str | None = None,
    into: str | None = None,
    alias: str | None = None,
    install_pipeline: bool = False,
    batch_size: int = 64,
    interval: float = FOLLOW_INTERVAL,
    stop: threading.Event | None = None,
    on_cycle: Callable[[FollowCycle], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
    on_error: Callable[[str], None] | None = None,
    on_line: Callable[[str], None] | None = None,
    verify_rate: float = VERIFY_RATE,
    encoder: str | None = None,
    encoder_url: str | None = None,
    passage_prompt: str | None = None,
    exact_only: bool = False,
) -> WriteReport:
    """Follow the index an EngineSpec names until `stop` is set (in place, or `into` itlr's
    copy of it, `alias` then moved to the copy). The encoder options are back-fill's
    (itlr.backfill.backfill_spec): the follower must embed as the back-fill did."""
    if alias is not None and not into:
        raise ConfigurationError("--alias moves an alias to the --into index: give --into")
    if alias is not None and alias == spec.index_name:
        raise ConfigurationError(
            f"--alias {alias!r} is the name the follower reads the source by: moved to the copy, "
            "the copy would become its own source; follow the source by its index name"
        )
    embedder = passage_embedder(model, encoder, encoder_url, passage_prompt)
    backend = cluster_backend(spec, embedder)
    check_exact_only(backend, exact_only, into)
    follower = (CopyFollower if into else Follower)(
        backend,
        embedder,
        spec.layout.text_field,
        into=into,
        batch_size=batch_size,
        interval=interval,
        stop=stop,
        on_cycle=on_cycle,
        on_batch=on_batch,
        on_error=on_error,
        on_line=on_line,
        verify_rate=verify_rate,
        exact_only=exact_only,
    )
    follower.prepare(install_pipeline)
    if into and alias:
        follower.operations.move_alias(alias, into)
    return follower.run()


__all__ = ["follow_spec"]
