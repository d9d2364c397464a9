"""Evaluation: BEIR datasets, the paper's synthetic benchmark, baselines, metrics, calibration."""
