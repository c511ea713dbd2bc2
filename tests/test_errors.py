"""Every error that is the user's to fix derives from one base class, which the CLI prints as one line."""

import pytest

from vcebench.core.errors import ConfigError, UserError


def _user_error_classes():
    from metrics.base import InsufficientSamples, MetricError
    from vcebench.core.errors import CheckpointError, DatasetError
    from vcebench.models.task_models import MissingModelError
    from vcebench.models.training.settings import RoleConfigError
    from vcebench.steps.explain import ShardError
    from vcebench.steps.import_cf import ImportFolderError

    return [ConfigError, DatasetError, CheckpointError, RoleConfigError, MissingModelError, ShardError,
            MetricError, InsufficientSamples, ImportFolderError]


def test_user_errors_share_one_base_and_keep_their_builtin_class():
    for cls in _user_error_classes():
        assert issubclass(cls, UserError), cls
        assert issubclass(cls, (ValueError, FileNotFoundError)), cls  # callers catching the built-in still do
    from vcebench.config.load import ConfigError as FromConfig

    assert FromConfig is ConfigError


def _set_every_func(parser, func) -> None:
    """Make every command of ``parser`` (verbs and their subverbs) run ``func``."""
    parser.set_defaults(func=func)
    if parser._subparsers is not None:
        for sub in parser._subparsers._group_actions[0].choices.values():
            _set_every_func(sub, func)


def test_cli_prints_a_user_error_as_one_line(monkeypatch, capsys):
    from vcebench import cli
    from vcebench.core.errors import CheckpointError

    def boom(args):
        raise CheckpointError("role 'classifier': weights.pt is missing")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    _set_every_func(parser, boom)
    assert cli.main(["report", "task", "--task", "synthfaces_smile"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "vcebench report task: CheckpointError: role 'classifier': weights.pt is missing"
    assert cli.main(["train", "classifier", "--task", "synthfaces_smile"]) == 2
    assert capsys.readouterr().err.startswith("vcebench train: CheckpointError")


def test_cli_lets_a_programming_error_through(monkeypatch):
    from vcebench import cli

    def boom(args):
        raise ValueError("a bug, not the user's")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    _set_every_func(parser, boom)
    with pytest.raises(ValueError, match="a bug"):
        cli.main(["report", "task", "--task", "synthfaces_smile"])
