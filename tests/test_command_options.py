"""Every option of our manage.py commands has help text, and shows its default when it
has one (so `manage.py <command> --help` is enough to use it)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from django.core.management import get_commands, load_command_class

ROOT = Path(__file__).resolve().parent.parent
OURS = sorted((name, app) for name, app in get_commands().items() if app in ("routing", "catalog"))
# Django's own options on every command.
DJANGO_OPTIONS = {
    "help",
    "version",
    "verbosity",
    "settings",
    "pythonpath",
    "traceback",
    "no_color",
    "force_color",
    "skip_checks",
}


def actions(parser: argparse.ArgumentParser, prefix: str = ""):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from actions(sub, f"{prefix}{name} ")
        elif action.dest not in DJANGO_OPTIONS:
            yield prefix, action


def test_the_commands_are_found():
    names = {name for name, _ in OURS}
    assert {"batch", "demo_traffic", "simulate", "loadcatalog", "create_account"} <= names


@pytest.mark.parametrize(("name", "app"), OURS)
def test_every_option_has_help_and_shows_its_default(name, app):
    parser = load_command_class(app, name).create_parser("manage.py", name)
    problems = []
    for prefix, action in actions(parser):
        label = f"{name} {prefix}{'/'.join(action.option_strings) or action.dest}"
        text = action.help or ""
        if not text.strip():
            problems.append(f"{label}: no help")
            continue
        flag = isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction)
        if action.option_strings and not flag and not action.required:
            if "default" not in parser._get_formatter()._expand_help(action).lower():
                problems.append(f"{label}: help does not show the default ({action.default!r})")
    assert not problems, problems
