"""`vcebench settings show`: the resolved settings of one job, as the workflow writes them for it;
`vcebench settings write`: the workflow's resolution rules writing a record they resolved when the DAG was built.

Examples::

    vcebench settings show synthfaces_smile fire
    vcebench settings show synthfaces_smile maskdime --config config/config.yaml --config config/presets/quick.yaml
    vcebench settings show synthfaces_smile fire --set seed=3 --set method_defaults.fire.K=5

Prints the canonical JSON record (:mod:`vcebench.protocol.resolve`: the task, the method, every resolved
hyperparameter and the protocol record, the seed, ``n_eval``, the batch size, the runtime and the config sections
the job reads) and its ``settings_sha256`` on stderr. ``--set KEY=VALUE`` (repeatable): a config value (dotted
key, YAML value) over the config files, as ``snakemake --config KEY=VALUE`` gives it to the workflow.

``vcebench settings write OUT --record JSON --log LOG`` writes a record as it is given (the rules of
workflows/settings.smk pass the one they resolved when the DAG was built): atomically, unchanged when ``OUT``
already holds it, its SHA-256 in ``LOG``. A shell command, not a ``run:`` block: Snakemake runs a ``run:`` job in a
new Snakemake process that parses the whole workflow again (seconds per job); this one starts no torch.
"""

from __future__ import annotations

import argparse
import sys

from . import add_config_arg, add_subverb, add_subverbs


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("settings", help="show a job's resolved settings", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    subs = add_subverbs(p)
    s = add_subverb(subs, "show", run_show, "print the resolved settings of METHOD on TASK")
    s.add_argument("task", help="task name (config key `tasks`)")
    s.add_argument("method", help="method name (config `methods`, a variant, or external_<name>)")
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a config value over the files (dotted key, YAML value; repeatable)")
    add_config_arg(s)
    w = add_subverb(subs, "write", run_write, "write a resolved record (the workflow's resolution rules)")
    w.add_argument("out", help="the settings file to write")
    w.add_argument("--record", required=True, help="the record: canonical JSON text")
    w.add_argument("--log", default=None, help="a file that gets the record's settings_sha256")


def run_show(args: argparse.Namespace) -> int:
    """The config files (``--config``, default config/config.yaml) with the ``--set`` values merged over them,
    checked for the task and method, resolved once (:func:`vcebench.steps.settings.resolved_settings`)."""
    from ..steps.settings import resolved_settings

    settings = resolved_settings(args.config, args.task, args.method, args.set)
    sys.stdout.write(settings.to_json())
    print(f"settings_sha256 {settings.settings_sha256}", file=sys.stderr)
    return 0


def run_write(args: argparse.Namespace) -> int:
    """Write ``--record`` to ``out`` (:func:`vcebench.steps.settings.write_record`); a text that is no JSON mapping
    is refused in one line and nothing is written."""
    from ..steps.settings import write_record

    if not write_record(args.out, args.record, log=args.log):
        print(f"vcebench settings write: the record for {args.out} is no JSON mapping", file=sys.stderr)
        return 2
    return 0
