"""Dataset names -> their declarations (``vcebench.registry.DatasetSpec``): the evaluation and tuning splits and
the label names. Torch-free: the workflow resolves every job's settings (the evaluation split among them) when it
builds the DAG."""

from __future__ import annotations

from .. import registry
from ..core.errors import DatasetError


def dataset_spec(name: str) -> registry.DatasetSpec:
    """``registry.get_dataset_spec``, an unknown name raised as a DatasetError (what the data layer raises)."""
    try:
        return registry.get_dataset_spec(name)
    except registry.RegistryError as e:
        raise DatasetError(str(e)) from None


def eval_split_name(dataset: str) -> str:
    """The split counterfactuals are evaluated on (``DatasetSpec.eval_split``): ``test``, or ``minival`` for
    CelebA (the seeded 1000 of the validation partition, as in DiME/ACE)."""
    return dataset_spec(dataset).eval_split


def tune_split_name(dataset: str) -> str:
    """The split `vcebench tune` picks settings on, never the evaluation split (``DatasetSpec.tune_split``):
    ``val``, or ``tune`` for CelebA (the validation partition without ``minival``)."""
    return dataset_spec(dataset).tune_split


def attribute_names(dataset: str, cfg: dict | None = None) -> list[str]:
    """The label columns of ``dataset`` (``DatasetSpec.attributes``; CelebA's 40 names for both real face
    datasets)."""
    return list(dataset_spec(dataset).attributes)
