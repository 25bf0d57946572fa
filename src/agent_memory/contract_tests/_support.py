"""Small helpers shared by the contract classes: clause messages, capability
gates, expected errors, the close race, timestamp comparison. Kept small and
stable on purpose."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
import random
import re
import sys
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, TypeVar

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, Phase, settings

from agent_memory.contract_tests.capabilities import Capabilities
from agent_memory.domain.errors import InvalidInput, StoreClosed
from agent_memory.domain.records import MemoryRecord
from agent_memory.domain.validation import MAX_ID_BYTES

__all__ = [
    "BASE_TIME",
    "CLAUSE_IN_TEXT",
    "PORT_TIMING",
    "REOPEN_MISSING",
    "ShortTtl",
    "Shown",
    "assert_same_record",
    "attribute_failure",
    "clause",
    "clause_rules",
    "expect_closed",
    "expect_raises",
    "expect_too_long",
    "json_diff",
    "mark_async_tests",
    "max_id",
    "ms",
    "outcome",
    "primary_clauses",
    "property_settings",
    "race_close",
    "require_capability",
    "require_reopen",
    "same_instant",
    "shrink_budget",
    "vector_diff",
]

_T = TypeVar("_T")

#: A fixed, millisecond-precise instant the suites build their timestamps from.
BASE_TIME = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


class Shown(str):
    """A wanted value written out as a rule (`Shown("> 3")`), shown without quotes."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str(self)


class _Unset:
    def __repr__(self) -> str:
        return "<unset>"


_UNSET: Any = _Unset()


def clause(
    cid: str, rule: str, got: object = None, *, want: object = _UNSET, detail: object = _UNSET
) -> str:
    """An assertion message, clause id first, always: `[CID] rule; wanted <want>;
    got <got>` for a comparison (`want` given: `got` is shown even when None),
    `[CID] rule; got <got>` for an observation, `[CID] rule` alone when `got` is
    None. `detail` follows `got` after a colon (e.g. the items behind a count)."""
    text = f"[{cid}] {rule}"
    if want is not _UNSET:
        text += f"; wanted {want!r}; got {got!r}"
    elif got is not None:
        text += f"; got {got!r}"
    return text if detail is _UNSET else f"{text}: {detail!r}"


def require_capability(declared: bool, capability: str, why: str) -> None:
    """Skip the calling test when the adapter did not declare `capability`."""
    if not declared:
        pytest.skip(f"{capability} not declared: {why}")


class ShortTtl:
    """TTL timing for suites whose entries expire, scaled to the declared
    `ttl_resolution_ms`: a short TTL is 4x the resolution, and outliving it
    waits 3x the resolution past it."""

    capabilities: ClassVar[Capabilities]

    def _res(self) -> timedelta:
        return timedelta(milliseconds=max(self.capabilities.ttl_resolution_ms, 1))

    def _short(self) -> timedelta:
        return self._res() * 4

    async def _outlive_short(self) -> None:
        await asyncio.sleep((self._short() + self._res() * 3).total_seconds())


#: What to do when `reopen` is declared but missing, for both ways of running the suite.
REOPEN_MISSING = (
    "capabilities.reopen is declared but no `reopen` was given: override the `reopen` "
    "fixture (pytest), or give the --factory object a `reopen(obj)` method "
    "(agent-memory conformance), or declare Capabilities(reopen=False)"
)


def require_reopen(capabilities: Capabilities, cid: str, reopen: _T | None) -> _T:
    """The `reopen` fixture's opener; skips when `reopen` is not declared, fails
    under `cid` when it is declared but the fixture was not overridden."""
    require_capability(capabilities.reopen, "reopen", "a second handle is needed to observe this")
    if reopen is None:
        pytest.fail(clause(cid, REOPEN_MISSING))
    return reopen


#: Per-port hypothesis timing: (deadline per example, shrink). Ports whose
#: examples wait for TTLs or race tasks do not shrink (a failure reports the
#: first failing example at once); every example has a deadline, so a hanging
#: backend fails instead of stalling the run.
PORT_TIMING: dict[str, tuple[timedelta, bool]] = {
    "store": (timedelta(seconds=5), True),
    "events": (timedelta(seconds=5), False),
    "leases": (timedelta(seconds=5), False),
    "cache": (timedelta(seconds=5), False),
    "triples": (timedelta(seconds=5), True),
}

#: The longest any shrinking may take (the state machine shrinks within it).
SHRINK_BUDGET_S = 30


def property_settings(max_examples: int, port: str = "store") -> settings:
    """Hypothesis settings for property tests run on the (function-scoped)
    fixture, with the port's deadline and shrink rule (`PORT_TIMING`)."""
    deadline, shrink = PORT_TIMING[port]
    phases = [Phase.explicit, Phase.reuse, Phase.generate]
    if shrink:
        phases.append(Phase.shrink)
    return settings(
        max_examples=max_examples,
        deadline=deadline,
        phases=phases,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.differing_executors,
            HealthCheck.too_slow,
        ],
    )


@contextlib.contextmanager
def shrink_budget(seconds: int = SHRINK_BUDGET_S) -> Iterator[None]:
    """Cap hypothesis' shrinking time (its own cap is 5 minutes) while the block
    runs. Uses the engine's module constant when this hypothesis version has it;
    otherwise shrinking keeps hypothesis' own cap."""
    try:
        from hypothesis.internal.conjecture import engine
    except ImportError:  # pragma: no cover - a future hypothesis
        yield
        return
    previous = getattr(engine, "MAX_SHRINKING_SECONDS", None)
    if not isinstance(previous, int):
        yield
        return
    engine.MAX_SHRINKING_SECONDS = int(min(previous, seconds))
    try:
        yield
    finally:
        engine.MAX_SHRINKING_SECONDS = previous


def vector_diff(got: npt.NDArray[Any], want: npt.NDArray[Any]) -> str:
    """Where two vectors differ: the first differing index with both values, and
    the largest difference (or the shapes, when they differ), wanted first."""
    if got.shape != want.shape:
        return f"wanted shape {want.shape}, got {got.shape}"
    close = np.isclose(got, want, rtol=1e-6, atol=1e-7)
    if bool(close.all()):
        return "equal"
    i = int(np.argmin(close))
    worst = int(np.argmax(np.abs(got.astype(np.float64) - want.astype(np.float64))))
    text = f"vector[{i}]: wanted {float(want[i])!r}, got {float(got[i])!r}"
    if worst != i:
        text += f"; largest at [{worst}]: wanted {float(want[worst])!r}, got {float(got[worst])!r}"
    return text + f" ({int((~close).sum())} of {got.size} components differ)"


# ------------------------------------------------------- clause attribution

_CLAUSE_LITERAL = re.compile(r"""["']([A-Z]{1,5}-[A-Z0-9]+(?:-[A-Z0-9]+)*)["']""")
#: A clause id as assertion messages show it: `[MS-ADD-8]`.
CLAUSE_IN_TEXT = re.compile(r"\[([A-Z]{1,5}-[A-Z0-9]+(?:-[A-Z0-9]+)*)\]")


def primary_clauses(test: Callable[..., Any]) -> tuple[str, ...]:
    """The clause ids a contract test exists for, first the main one.

    A module may name them in `PRIMARY_CLAUSES` (test name -> ids); otherwise
    they are the clause ids the test's own body asserts, in order. A failure
    naming any other clause (asserted by a helper the test only uses, e.g. a
    list read checking list order) is secondary."""
    fn = inspect.unwrap(test)
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    named = getattr(module, "PRIMARY_CLAUSES", {}).get(getattr(fn, "__name__", ""))
    if named:
        return tuple(named)
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return ()
    return tuple(dict.fromkeys(_CLAUSE_LITERAL.findall(source)))


_RULE_ITEM = re.compile(
    r"^- ([A-Z]{1,5}-[A-Z0-9]+(?:-[A-Z]+)*-)([0-9]+)(?:\.\.([0-9]+))?\s+(.*?)(?=^- |^\S|\Z)",
    re.M | re.S,
)


def clause_rules(module_doc: str | None) -> dict[str, str]:
    """The clause list of a contract module's docstring (`- CID rule...`, the
    rule wrapped over indented lines; `- MS-ISO-1..6 rule` gives one rule to a
    range): clause id -> rule on one line."""
    rules: dict[str, str] = {}
    for stem, first, last, rule in _RULE_ITEM.findall(module_doc or ""):
        for n in range(int(first), int(last or first) + 1):
            rules[f"{stem}{n}"] = " ".join(rule.split())
    return rules


def attribute_failure(test: Callable[..., Any], message: str) -> str | None:
    """`message` (a failed contract test's crash line) prefixed with the test's
    clause and its rule, `[CID] rule; raised Type: ...`, when it does not start
    with a clause id: an exception the adapter raised inside a clause (or a bare
    assert) then still names the rule it broke. None when already attributed or
    the test names no clause."""
    first = message.strip().splitlines()[0] if message.strip() else ""
    if CLAUSE_IN_TEXT.search(first):
        return None
    ids = primary_clauses(test)
    if not ids:
        return None
    fn = inspect.unwrap(test)
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    rule = clause_rules(getattr(module, "__doc__", None)).get(ids[0])
    if rule is None:
        doc = inspect.getdoc(fn) or ""
        rule = doc.strip().splitlines()[0] if doc.strip() else getattr(fn, "__name__", "?")
    verb = "got" if message.lstrip().startswith("AssertionError") else "raised"
    return f"[{ids[0]}] {rule.rstrip('.')}; {verb} {message.strip()}"


def _is_async_test(value: Any) -> bool:
    inner = getattr(getattr(value, "hypothesis", None), "inner_test", None)
    return inspect.iscoroutinefunction(inner if inner is not None else value)


_C = TypeVar("_C", bound=type)


def mark_async_tests(cls: _C) -> _C:
    """Mark every async `test_*` of a contract class with `pytest.mark.asyncio`
    (hypothesis tests included), so the suite runs under pytest-asyncio's
    strict mode as well as auto mode."""
    for name, value in list(vars(cls).items()):
        if name.startswith("test_") and _is_async_test(value):
            marks = [m.name for m in getattr(value, "pytestmark", [])]
            if "asyncio" not in marks:
                setattr(cls, name, pytest.mark.asyncio(value))
    return cls


def outcome(exc: BaseException | None, result: object = None) -> Shown:
    """How an operation ended, as a failure shows it: `Type: message`, or
    `no error, returned <result>`."""
    if exc is None:
        return Shown(f"no error, returned {result!r}")
    return Shown(f"{type(exc).__name__}: {exc}")


async def expect_raises(
    cid: str, rule: str, exc: type[BaseException], op: Awaitable[object]
) -> None:
    """Await `op`; fail under `cid` unless it raises `exc`."""
    try:
        result = await op
    except exc:
        return
    except Exception as other:
        pytest.fail(clause(cid, rule, outcome(other), want=Shown(exc.__name__)))
    pytest.fail(clause(cid, rule, outcome(None, result), want=Shown(exc.__name__)))


async def expect_closed(cid: str, ops: Mapping[str, Callable[[], Awaitable[object]]]) -> None:
    """Every named operation raises `StoreClosed` (call after close)."""
    for name, op in ops.items():
        await expect_raises(cid, f"{name} after close raises StoreClosed", StoreClosed, op())


async def race_close(
    cid: str,
    verb: str,
    calls: Sequence[tuple[str, Callable[[], Coroutine[Any, Any, _T]]]],
    close: Callable[[], Awaitable[None]],
) -> list[_T | BaseException]:
    """Start every labelled call as a task (yielding to the loop now and then),
    close while they run, and return their results in order. A call failing
    with anything but `StoreClosed` fails under `cid` ("{verb} {label} ...")."""
    tasks: list[asyncio.Task[_T]] = []
    for i, (_, call) in enumerate(calls):
        tasks.append(asyncio.create_task(call()))
        if i % 7 == 6:
            await asyncio.sleep(0)
    await close()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    for (label, _), r in zip(calls, results, strict=True):
        if isinstance(r, BaseException) and not isinstance(r, StoreClosed):
            pytest.fail(clause(cid, f"{verb} {label} fails only with StoreClosed", r))
    return results


#: Code point ranges `max_id` draws from, one per UTF-8 width (1 to 4 bytes);
#: surrogates, noncharacters and NUL excluded.
_ID_RANGES = ((0x21, 0x7E), (0xA1, 0x7FF), (0x800, 0xD7FF), (0xE000, 0xFDCF), (0x10000, 0x10FFFD))


def max_id(seed: str) -> str:
    """An id of exactly MAX_ID_BYTES bytes of UTF-8 that no engine can compress:
    pseudo-random characters of every UTF-8 width (hostile ASCII such as
    `: * { } | %` among them), the same for one `seed`. `max_id(s) + "x"` is one
    byte over the maximum."""
    rng = random.Random(f"max-id:{seed}")
    out: list[str] = []
    left = MAX_ID_BYTES
    while left > 4:
        low, high = rng.choice(_ID_RANGES)
        char = chr(rng.randint(low, high))
        out.append(char)
        left -= len(char.encode("utf-8"))
    out.extend(chr(rng.randint(0x41, 0x5A)) for _ in range(left))  # ASCII to the byte
    text = "".join(out)
    assert len(text.encode("utf-8")) == MAX_ID_BYTES
    return text


async def expect_too_long(cid: str, field: str, op: Awaitable[object]) -> None:
    """Await `op`, given an id one byte over MAX_ID_BYTES in `field`; fail under
    `cid` unless it raises `InvalidInput` whose message names the field, the
    id's size in bytes and the maximum."""
    try:
        result = await op
    except InvalidInput as exc:
        text = str(exc)
        for part in (field, str(MAX_ID_BYTES + 1), str(MAX_ID_BYTES)):
            assert part in text, clause(
                cid,
                f"the error names {field!r}, its size and the maximum ({part!r})",
                text,
                want=Shown(f"a message containing {part!r}"),
            )
        return
    except Exception as other:
        pytest.fail(
            clause(
                cid,
                f"an over-long {field} raises InvalidInput",
                outcome(other),
                want=Shown("InvalidInput"),
            )
        )
    pytest.fail(
        clause(
            cid,
            f"an over-long {field} raises InvalidInput",
            outcome(None, result),
            want=Shown("InvalidInput"),
        )
    )


def json_diff(want: object, got: object, path: str = "") -> list[str]:
    """Where two JSON values differ, type-exactly at every depth: `1` (int),
    `1.0` (float) and `True` (bool) are three different values, although
    `1 == 1.0 == True` in Python. Objects compare key by key (order
    irrelevant), arrays item by item (a list or a tuple); each difference is
    `path: expected <type> <value>, got <type> <value>` (or what is missing),
    with `path` the subscripts from the root, e.g. `['b']['c'][0]`."""
    where = path or "(root)"
    if isinstance(want, Mapping):
        if not isinstance(got, Mapping):
            return [f"{where}: expected an object, got {type(got).__name__} {got!r}"]
        out: list[str] = []
        for key in want:
            if key not in got:
                out.append(f"{path}[{key!r}]: missing (expected {want[key]!r})")
            else:
                out += json_diff(want[key], got[key], f"{path}[{key!r}]")
        out += [f"{path}[{k!r}]: unexpected key (got {got[k]!r})" for k in got if k not in want]
        return out
    if isinstance(want, list | tuple):
        if not isinstance(got, list | tuple):
            return [f"{where}: expected an array, got {type(got).__name__} {got!r}"]
        if len(want) != len(got):
            return [f"{where}: expected {len(want)} items {want!r}, got {len(got)} {got!r}"]
        out = []
        for i, (w, g) in enumerate(zip(want, got, strict=True)):
            out += json_diff(w, g, f"{path}[{i}]")
        return out
    if type(want) is not type(got) or want != got:
        return [
            f"{where}: expected {type(want).__name__} {want!r}, got {type(got).__name__} {got!r}"
        ]
    return []


def ms(n: int) -> timedelta:
    """`n` milliseconds."""
    return timedelta(milliseconds=n)


def same_instant(
    a: datetime, b: datetime, tolerance: timedelta = timedelta(milliseconds=1)
) -> bool:
    """True when both are timezone-aware and at most `tolerance` apart."""
    if a.tzinfo is None or b.tzinfo is None:
        return False
    return abs(a - b) <= tolerance


_TIME_TOL = timedelta(milliseconds=1)


def assert_same_record(cid: str, got: MemoryRecord | None, want: MemoryRecord) -> None:
    """Every field equal; timestamps within 1 ms, vectors within float32 precision.
    Each failure shows the stored value wanted and the value read back."""
    assert got is not None, clause(
        cid, f"record {want.id!r} of {want.owner!r} is stored", got, want=want
    )
    for name in ("id", "owner", "namespace", "kind", "content", "context"):
        assert getattr(got, name) == getattr(want, name), clause(
            cid, f"field {name} round-trips", getattr(got, name), want=getattr(want, name)
        )
    # type-exactly at every depth: `1 == 1.0` in Python, but an int read back as
    # a float (a codec that parses every number as a float) is another JSON value
    differences = json_diff(want.attributes, got.attributes, "attributes")
    assert not differences, clause(
        cid,
        "field attributes round-trips (as JSON, types included at every depth)",
        differences,
        want=Shown("no difference"),
    )
    assert math.isclose(got.importance, want.importance, abs_tol=1e-6), clause(
        cid, "importance round-trips", got.importance, want=want.importance
    )
    for name in ("created_at", "updated_at"):
        g, w = getattr(got, name), getattr(want, name)
        assert g.tzinfo is not None, clause(
            cid, f"{name} round-trips to the millisecond, timezone-aware", g, want=w
        )
        assert abs(g - w) <= _TIME_TOL, clause(
            cid, f"{name} round-trips to the millisecond, timezone-aware", g, want=w
        )
    shape = f"float32 {want.vector.shape}"
    assert got.vector.dtype == np.float32, clause(
        cid, "the vector is float32 of the space's dimension",
        f"{got.vector.dtype} {got.vector.shape}", want=shape,
    )  # fmt: skip
    assert got.vector.shape == want.vector.shape, clause(
        cid, "the vector is float32 of the space's dimension",
        f"{got.vector.dtype} {got.vector.shape}", want=shape,
    )  # fmt: skip
    assert np.allclose(got.vector, want.vector, rtol=1e-6, atol=1e-7), (
        f"[{cid}] the vector round-trips to float32 precision; "
        + vector_diff(got.vector, want.vector)
    )
