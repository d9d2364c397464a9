"""The entry that follows an index an EngineSpec names (`itlr backfill --follow`,
`Index.follow`): it builds the backend and the embedder back-fill would, and
runs the in-place follower (itlr.follow) or, `into`, the copy follower (itlr.follow_copy). It
sits above both, so neither follower module imports the other's user.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from itlr.backfill import check_exact_only, cluster_backend
from itlr.engines.factory import EngineSpec
from itlr.errors import ConfigurationError
from itlr.follow import Follower
from itlr.follow_copy import CopyFollower
from itlr.follow_cycle import FollowCycle
from itlr.option_groups import BackfillOptions, EncoderOptions
from itlr.write_report import WriteReport


def follow_spec(
    spec: EngineSpec,
    encoding: EncoderOptions,
    options: BackfillOptions,
    *,
    stop: threading.Event | None = None,
    on_cycle: Callable[[FollowCycle], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
    on_error: Callable[[str], None] | None = None,
    on_line: Callable[[str], None] | None = None,
) -> WriteReport:
    """Follow the index an EngineSpec names until `stop` is set (in place, or `options.into`
    itlr's copy of it, `options.alias` then moved to the copy). The options are back-fill's
    (itlr.backfill.backfill_spec): the follower must embed as the back-fill did."""
    if options.alias is not None and options.alias == spec.index_name:
        raise ConfigurationError(
            f"--alias {options.alias!r} is the name the follower reads the source by: moved to "
            "the copy, the copy would become its own source; follow the source by its index name"
        )
    embedder = encoding.passage_embedder()
    backend = cluster_backend(spec, embedder)
    check_exact_only(backend, options.exact_only, options.into)
    follower = (CopyFollower if options.into else Follower)(
        backend,
        embedder,
        spec.layout.text_field,
        options,
        stop=stop,
        on_cycle=on_cycle,
        on_batch=on_batch,
        on_error=on_error,
        on_line=on_line,
    )
    follower.prepare(options.install_pipeline)
    if options.into and options.alias:
        follower.operations.move_alias(options.alias, options.into)
    return follower.run()


__all__ = ["follow_spec"]
