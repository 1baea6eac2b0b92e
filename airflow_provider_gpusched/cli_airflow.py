"""``airflow gpusched ...``: the ``gpusched`` command as a command group of Airflow's own CLI (provider info's ``cli``).

Made from the one parser (cli.py ``build_parser``): each subcommand and argument becomes Airflow's ``GroupCommand``,
``ActionCommand`` and ``Arg``, so both spellings take the same arguments and run the same functions, and a new
subcommand needs no edit here. Airflow builds its parser at every ``airflow`` start: this walks ``argparse``'s
structures only, importing nothing a subcommand needs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

#: argparse's action classes -> the ``action`` Airflow's Arg passes on (others are plain ``store``)
_ACTIONS = {
    argparse._StoreTrueAction: "store_true",
    argparse._StoreFalseAction: "store_false",
    argparse._AppendAction: "append",
    argparse._CountAction: "count",
}


def _arg(action: argparse.Action) -> Any:
    from airflow.cli.cli_config import Arg

    kwargs: dict[str, Any] = {"help": action.help}
    kind = _ACTIONS.get(type(action))
    if kind is not None:
        kwargs["action"] = kind
    else:
        for key in ("type", "choices", "nargs", "metavar"):
            if getattr(action, key) is not None:
                kwargs[key] = getattr(action, key)
    if (
        action.default is not None
        and action.default is not argparse.SUPPRESS
        and kind not in ("store_true", "store_false")
    ):
        kwargs["default"] = action.default
    if action.option_strings:
        if action.required:
            kwargs["required"] = True
        kwargs["dest"] = action.dest
        return Arg(tuple(action.option_strings), **kwargs)
    return Arg((action.dest,), **kwargs)


def _runner(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], None]:
    def run(args: argparse.Namespace) -> None:
        from airflow_provider_gpusched.cli import run_command

        code = run_command(func, args)
        if code:
            sys.exit(code)

    run.__name__ = getattr(func, "__name__", "gpusched")
    return run


def _commands(parser: argparse.ArgumentParser) -> list[Any]:
    from airflow.cli.cli_config import ActionCommand, GroupCommand

    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in sub._choices_actions}
    out: list[Any] = []
    for name, child in sub.choices.items():
        nested = [a for a in child._actions if isinstance(a, argparse._SubParsersAction)]
        help_text = helps.get(name) or child.description or name
        if nested:
            out.append(GroupCommand(name=name, help=help_text, subcommands=_commands(child)))
            continue
        args = [_arg(a) for a in child._actions if not isinstance(a, argparse._HelpAction)]
        out.append(
            ActionCommand(
                name=name,
                help=help_text,
                description=child.description,
                func=_runner(child._defaults["func"]),
                args=args,
            )
        )
    return out


def get_cli_commands() -> list[Any]:
    """Provider info's ``cli`` entry: the ``gpusched`` group of ``airflow``."""
    from airflow.cli.cli_config import GroupCommand

    from airflow_provider_gpusched.cli import build_parser

    return [
        GroupCommand(
            name="gpusched",
            help="GPU scheduling: GPUs and leases, Slurm jobs, sweeps, queue, pools, partitioner (docs/)",
            description="The gpusched command inside Airflow's CLI: `airflow gpusched ARGS` is `gpusched ARGS`.",
            subcommands=_commands(build_parser()),
        )
    ]
