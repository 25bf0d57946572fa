"""The CLI's option values, checked as argparse parses them (`type=` callables):
those of `agent-memory` and of the `serve` and `mcp` commands, whose parsers live
with their entry points (so this module is beside them, not in the CLI package,
which nothing else may import).

A bad value (a negative batch size, NaN seconds, `٣` or `1_000` for a count, an
empty URL) is a usage error: `agent-memory COMMAND: InvalidInput: --option:
what was wrong`, one line on stderr, exit 2, before anything runs. Numbers are
plain ASCII decimals (`int()` and `float()` also take other scripts' digits,
underscores and surrounding whitespace, and `float()` takes nan and inf).

A check raises `BadOption`, which is not a ValueError: argparse would turn one
into its own "invalid value" message with the usage around it, so it is left
to pass through `parse_args` to `agent_memory.entrypoints.cli.main`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection

from agent_memory.domain.errors import InvalidInput

__all__ = [
    "MAX_BATCH",
    "MAX_SECONDS",
    "BadOption",
    "choice",
    "integer",
    "seconds",
    "text",
]

#: The largest --batch-size and --sample (the storage reads' own MAX_LIMIT).
MAX_BATCH = 10_000
#: The longest duration option (a year): far beyond any useful timeout, and
#: `now + it` stays a valid deadline everywhere.
MAX_SECONDS = 365 * 24 * 3600.0

_INTEGER = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


class BadOption(Exception):
    """An option's value is invalid; `error` says which option and why."""

    def __init__(self, error: InvalidInput) -> None:
        super().__init__(str(error))
        self.error = error


def _bad(option: str, problem: str) -> BadOption:
    return BadOption(InvalidInput(option, problem))


def integer(option: str, minimum: int, maximum: int) -> Callable[[str], int]:
    """An ASCII decimal integer in [minimum, maximum]."""

    def parse(value: str) -> int:
        wanted = f"an integer from {minimum} to {maximum} is required, got {value!r}"
        if not value.isascii() or _INTEGER.fullmatch(value) is None:
            raise _bad(option, wanted)
        number = int(value)
        if not minimum <= number <= maximum:
            raise _bad(option, wanted)
        return number

    parse.__name__ = "integer"
    return parse


def seconds(
    option: str,
    *,
    zero: bool = False,
    maximum: float = MAX_SECONDS,
    what: str = "a number of seconds",
) -> Callable[[str], float]:
    """A finite ASCII decimal number (`what`: seconds unless told), above 0
    (at or above with `zero`) and at most `maximum`."""

    def parse(value: str) -> float:
        low = ">= 0" if zero else "> 0"
        wanted = f"{what} {low} and <= {maximum:g} is required, got {value!r}"
        if not value.isascii() or _DECIMAL.fullmatch(value) is None:
            raise _bad(option, wanted)
        number = float(value)
        if not math.isfinite(number) or number > maximum or number < 0:
            raise _bad(option, wanted)
        if number == 0 and not zero:
            raise _bad(option, wanted)
        return number

    parse.__name__ = "seconds"
    return parse


def text(option: str) -> Callable[[str], str]:
    """A non-blank string (a URL, a path, a domain): an empty one would
    otherwise mean "not given" or name the current directory."""

    def parse(value: str) -> str:
        if not value.strip():
            raise _bad(option, f"a non-empty value is required, got {value!r}")
        if "\x00" in value:
            raise _bad(option, f"a value without NUL characters is required, got {value!r}")
        return value

    parse.__name__ = "text"
    return parse


def choice(option: str, choices: Collection[str]) -> Callable[[str], str]:
    """One of `choices`, exactly."""

    def parse(value: str) -> str:
        if value not in choices:
            raise _bad(option, f"one of {', '.join(choices)} is required, got {value!r}")
        return value

    parse.__name__ = "choice"
    return parse
