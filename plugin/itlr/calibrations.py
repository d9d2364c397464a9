"""Calibrations saved by `itlr calibrate` (itlr.evaluation.calibration fits them), read where
a search needs one: `truth="calibrated"` and the hard filter's default threshold. Kept apart
from the fitting so that searching never imports the evaluation package."""

from __future__ import annotations

from pathlib import Path

from itlr import json_values
from itlr.embed import DEFAULT_MODEL
from itlr.errors import ConfigurationError
from itlr.paths import itlr_home, model_slug
from itlr.scoring import TruthMap


def display_name(model: str | None) -> str:
    """The name embeddings are stored under, without loading the model."""
    if model in (None, "", DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"):
        return DEFAULT_MODEL
    return str(model)


def calibration_path(model: str | None) -> Path:
    return itlr_home() / "calibration" / f"{model_slug(display_name(model))}.json"


def load_calibration(model: str | None) -> TruthMap | None:
    """The saved sigmoid truth map for a model, or None if `itlr calibrate` never ran for it."""
    path = calibration_path(model)
    if not path.is_file():
        return None
    try:
        record = json_values.loads(path.read_bytes(), str(path))  # depth-checked first
        truth = TruthMap.from_dict(record)
    except (ValueError, TypeError, KeyError) as bad:
        raise ConfigurationError(
            f"unreadable calibration {path} ({bad}): calibrate again for model "
            f"{display_name(model)!r} (`itlr calibrate DATASET`)"
        ) from None
    return truth


# `itlr calibrate ../shared/negconstraint-dev --split dev --rewrite rules` for the bundled
# model (real questions; docs/benchmarks.md), so that the filter has a default measured on real
# passages before anyone calibrates. The synthetic benchmark's documents would give about 0.3,
# which drops a third of the relevant passages of real questions.
BUNDLED_HARD_FILTER = 0.53


def default_hard_filter(model: str | None) -> float:
    """The hard-filter threshold for a model: the one `itlr calibrate` saved for it, else the
    bundled model's."""
    path = calibration_path(model)
    if path.is_file():
        try:
            value = json_values.loads(path.read_bytes(), str(path)).get("hard_filter")
        except (ValueError, AttributeError):
            value = None
        if isinstance(value, int | float):
            return float(value)
    return BUNDLED_HARD_FILTER
