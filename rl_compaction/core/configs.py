"""Config dataclasses the TRL way: fields with `--help` text, and JSON for mapping-valued flags.

TRL's configs are dataclasses whose fields carry `metadata={"help": ...}`, read by `TrlParser` both from
`--config FILE.yaml` and from flags; a mapping-valued field is typed `dict | str | None` so that the flag
arrives as a string, which the config decodes as JSON. The eval and reproduce configs follow that shape.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
from dataclasses import field
from typing import Any


def help_field(text: str, **kwargs: Any) -> Any:
    """A dataclass field with `--help` text (TrlParser reads it from `metadata`)."""
    return field(metadata={"help": text, **kwargs.pop("metadata", {})}, **kwargs)


def as_mapping(name: str, value: Any) -> dict[str, Any]:
    """A mapping field's value: a dict as given, None as empty, a string (a command-line flag) as JSON."""
    if value is None:  # a YAML key with nothing under it
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError(f"{name} must be a JSON object on the command line: {e}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a mapping, got {value!r}")
    return value


def check_counts(config: Any, names: tuple[str, ...]) -> None:
    """Refuse a count field that is not an integer >= 1 (a bool is not a count), with its name."""
    for name in names:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def _type_words(annotation: Any) -> set[str]:
    text = annotation if isinstance(annotation, str) else repr(annotation)
    return set(re.findall(r"\b(int|float|bool)\b", text))


def check_numbers(config: Any) -> None:
    """Refuse a non-finite number in any field, and a non-integer in an integer field, with the field's name.
    YAML spells NaN and infinity `.nan` and `.inf`, and TrlParser hands YAML values over unconverted: a NaN
    reward weight passes every `< 0` check and trains a model of NaNs, a NaN turn limit never ends an episode."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name, None)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if not math.isfinite(value):
            raise ValueError(f"{f.name} must be a finite number, got {value!r}")
        words = _type_words(f.type)
        if isinstance(value, float) and "int" in words and "float" not in words:
            raise ValueError(f"{f.name} must be an integer, got {value!r}")


#: the usage line of a TrlParser entry point: argparse's own lists every field, some 500 lines for GRPO
TRL_USAGE = "%(prog)s [--config FILE.yaml] [--FIELD VALUE ...]"


def own_fields_first(parser: argparse.ArgumentParser, title: str, names: set[str]) -> None:
    """List the flags of `names` (this project's fields) first in `--help`, under `title`: TRL's parser lists
    a config's fields in declaration order, so ours came after some 1,300 lines of TrainingArguments."""
    group = parser.add_argument_group(title)
    for action in parser._actions:
        if action.dest in names:
            for other in parser._action_groups:
                if action in other._group_actions and other is not group:
                    other._group_actions.remove(action)
            group._group_actions.append(action)
    parser._action_groups.remove(group)
    parser._action_groups.insert(0, group)


def hide_flags(parser: argparse.ArgumentParser, names: set[str]) -> None:
    """Leave the flags of `names` out of `--help` (fields a flag cannot set, such as a nested dataclass, or that
    other flags set); they still parse, as TrlParser built them."""
    for action in parser._actions:
        if action.dest in names:
            action.help = argparse.SUPPRESS
