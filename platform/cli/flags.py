"""The settings table (platform/settings/table.py) as argparse flags: each of a command's
settings a flag in its group of --help, which names its default and its variable."""

from __future__ import annotations

import argparse
from typing import Any

from vigil.platform.settings.table import REQUIRED, Command, Setting, default_of, settings_of

Subparsers = argparse._SubParsersAction  # what add_subparsers returns


def add_settings(parser: argparse.ArgumentParser, command: Command) -> None:
    groups: dict[str, argparse._ArgumentGroup] = {}
    unflagged: list[str] = []
    for setting in settings_of(command):
        if not setting.flag:
            unflagged.append(help_text(setting, f"{setting.variable}: "))
            continue
        if setting.group not in groups:
            groups[setting.group] = parser.add_argument_group(setting.group)
        groups[setting.group].add_argument(
            f"--{setting.name}",
            dest=setting.dest,
            default=None,  # not given: the variable, else the default, decide
            help=help_text(setting).replace("%", "%%"),
            **_kind(setting),
        )
    if unflagged:
        parser.epilog = "Set by a variable only (no flag): " + "; ".join(unflagged)


def _kind(setting: Setting) -> dict[str, Any]:
    if setting.switch:
        return {"action": "store_const", "const": "true"}
    if setting.many:
        return {"action": "append"}
    if setting.choices:
        return {"choices": setting.choices, "type": str.lower}
    return {}


def help_text(setting: Setting, lead: str = "") -> str:
    """'what it does (default: X)  [VARIABLE]', as --help and the README show it."""
    text = lead + setting.help
    if setting.many:
        text += f"; repeatable, or {_separator(setting.many)}-separated"
    default = default_of(setting)
    if default == REQUIRED:
        text += " (required)"
    elif default:
        text += f" (default: {default})"
    variable = f"{setting.variable}=1" if setting.switch else setting.variable
    if setting.many:
        variable += f", {_separator(setting.many)}-separated"
    return text if lead else f"{text}  [{variable}]"


def _separator(separator: str) -> str:
    return "comma" if separator == "," else f"'{separator}'"
