"""Datasets: the embedded synthetic benchmark and the real-dataset loaders (docs/internals.md, "Data")."""

from .base import DatasetError, Split
from .registry import attribute_names, eval_split_name, get_synthetic, load_split, tune_split_name

__all__ = ["DatasetError", "Split", "attribute_names", "eval_split_name", "get_synthetic", "load_split",
           "tune_split_name"]
