"""Typed errors of export, import, migrate and re-embed. Every error about a file
names the line (1-based) it was found on."""

from __future__ import annotations

from agent_memory.domain.errors import AgentMemoryError

__all__ = [
    "ChecksumMismatch",
    "ExportFormatError",
    "ListingUnsupported",
    "PortabilityError",
    "SpaceMismatch",
    "TruncatedExport",
    "UnknownRecordType",
    "UnsupportedFormatVersion",
    "VerificationFailed",
    "WouldReplace",
    "WrongDimension",
]


class PortabilityError(AgentMemoryError):
    """Root of the errors of `agent_memory.portability`."""


class ExportFormatError(PortabilityError, ValueError):
    """A line of an export file is malformed; `line` is its 1-based number."""

    def __init__(self, line: int, problem: str) -> None:
        super().__init__(f"line {line}: {problem}")
        self.line = line
        self.problem = problem


class UnsupportedFormatVersion(ExportFormatError):
    """The file was written by a newer format version than this reader knows."""

    def __init__(self, line: int, version: object, supported: int) -> None:
        super().__init__(
            line,
            f"format version {version!r} is newer than this agent-memory reads "
            f"(up to {supported}); upgrade agent-memory to import it",
        )
        self.version = version
        self.supported = supported


class UnknownRecordType(ExportFormatError):
    """A line's `type` is not one this format version defines."""

    def __init__(self, line: int, kind: object) -> None:
        super().__init__(line, f"unknown record type {kind!r}")
        self.kind = kind


class WrongDimension(ExportFormatError):
    """A record's vector does not have its embedding space's dimension."""

    def __init__(self, line: int, expected: int, got: int) -> None:
        super().__init__(line, f"vector of dimension {got}, the space has {expected}")
        self.expected = expected
        self.got = got


class TruncatedExport(ExportFormatError):
    """The file ends before its footer (an interrupted export or a cut copy)."""


class ChecksumMismatch(ExportFormatError):
    """The footer's counts or checksum do not match the lines before it."""


class ListingUnsupported(PortabilityError):
    """A source port cannot enumerate its data (no `OwnerListing`/`CacheListing`)."""


class SpaceMismatch(PortabilityError):
    """An import into a storage URL whose `connect()` reads another embedding
    space than the file's records are in, where landing them would leave them
    unread (the target's reads were switched by a re-embed: its old space, which
    `reembed --drop-old` empties) or hide the target's own records (the file's
    re-embed switch would move its reads away from them). Refused before
    anything is written."""

    def __init__(self, target: str, target_space: str, file_space: str, reason: str) -> None:
        super().__init__(
            f"{target} reads embedding space {target_space!r} and {reason}; the file's "
            f"records are in {file_space!r}. Nothing was imported: re-embed one side into "
            "the other's space first (`agent-memory reembed --to-model ...`), or import "
            "into an empty target"
        )
        self.target = target
        self.target_space = target_space
        self.file_space = file_space


class VerificationFailed(PortabilityError):
    """After a migration the target does not hold what the source held."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("verification failed: " + "; ".join(problems[:10]))
        self.problems = problems


class WouldReplace(PortabilityError):
    """An import would replace `count` stored records with different content (or
    write another deployment's export over this one's): refused before anything is
    written unless `replace=True` (`--replace`)."""

    def __init__(
        self, count: int, *, source_deployment: str | None, target_deployment: str | None
    ) -> None:
        crossing = ""
        if source_deployment is not None and source_deployment != target_deployment:
            crossing = (
                f" (the file was exported from deployment {source_deployment!r}, "
                f"the target is {target_deployment!r})"
            )
        super().__init__(
            f"the import would replace {count} stored record{'s' if count != 1 else ''} "
            f"with different content{crossing}; nothing was imported: pass --replace "
            "(replace=True) to overwrite them"
        )
        self.count = count
        self.source_deployment = source_deployment
        self.target_deployment = target_deployment
