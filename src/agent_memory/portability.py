"""Move memory between backends and embedding models (docs/portability.md).

- `export(source, path)`: every port's durable data (or one data subject's, with
  `user=`) to a versioned JSON Lines file (gzip when the name ends in `.gz`);
- `import_file(target, path)`: idempotent and resumable (progress is kept next to
  the file in `<path>.progress` until the import completes);
- `migrate(from_url, to_url)`: export, import in batches, then verify counts per
  port and a sample of records field by field;
- `reembed(url, to_model=...)`: build a new embedding space from stored content,
  resumably, then record the switch `connect()` follows (`--drop-old` removes
  the old space).

`source`/`target` are storage URLs or an open `Memory` (for `memory://`, whose
data lives only in the process that opened it).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import IO, Any

import attrs
from attrs import define, field

from agent_memory.bootstrap.connect import (
    Memory,
    Stores,
    _redact,
    coordination_url,
    open_stores,
    scheme_of,
)
from agent_memory.bootstrap.settings import Settings
from agent_memory.domain.errors import ConfigurationError, UnsupportedBackend
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord
from agent_memory.ports.models import Clock, Embedder
from agent_memory.ports.storage import TripleStore
from agent_memory.services.portability.errors import (
    ChecksumMismatch,
    ExportFormatError,
    ListingUnsupported,
    PortabilityError,
    TruncatedExport,
    UnknownRecordType,
    UnsupportedFormatVersion,
    VerificationFailed,
    WrongDimension,
)
from agent_memory.services.portability.format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    ExportReader,
    ExportWriter,
    Header,
    open_export,
)
from agent_memory.services.portability.reembed import (
    EmbeddingSwitch,
    ReembedSummary,
    drop_space,
    read_switch,
    write_switch,
)
from agent_memory.services.portability.reembed import reembed as reembed_store
from agent_memory.services.portability.transfer import (
    BulkLoad,
    ExportSummary,
    ImportFailed,
    ImportSummary,
    Ports,
    export_data,
    import_data,
    reservoir,
    verify_copy,
)

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "BulkLoad",
    "ChecksumMismatch",
    "EmbeddingSwitch",
    "ExportFormatError",
    "ExportReader",
    "ExportSummary",
    "ExportWriter",
    "Header",
    "ImportFailed",
    "ImportSummary",
    "ListingUnsupported",
    "MigrateSummary",
    "PortabilityError",
    "Ports",
    "ReembedSummary",
    "TruncatedExport",
    "UnknownRecordType",
    "UnsupportedFormatVersion",
    "VerificationFailed",
    "WrongDimension",
    "export",
    "import_file",
    "migrate",
    "open_ports",
    "ports_of",
    "read_header",
    "reembed",
]

Progress = Callable[[str, int, int | None], None]


class _Utc:
    def now(self) -> datetime:
        return datetime.now(UTC)


@define
class MigrateSummary:
    exported: dict[str, int]
    imported: ImportSummary
    sampled: int
    problems: list[str] = field(factory=list)
    seconds: dict[str, float] = field(factory=dict)
    """Wall time per phase: `export` (read the source, write the file), `check`
    (verify the file), `write` (import batches), `index` (the target's deferred
    index build, bulk load only), `verify` (counts and sample)."""


# -- opening ports ----------------------------------------------------------------------


async def _triples_for(url: str, settings: Settings) -> TripleStore | None:
    """The graph triple store a storage URL serves (None for redis)."""
    url = coordination_url(url, settings) or url
    family = scheme_of(url)
    if family == "memory":
        from agent_memory.adapters.memory import InMemoryTripleStore

        return InMemoryTripleStore()
    if family == "sqlite":
        from agent_memory.adapters.sqlite import path_from_url
        from agent_memory.adapters.sqlite.triples import SqliteTripleStore

        path, _options = path_from_url(url)
        return SqliteTripleStore(path)
    if family == "postgres":
        from agent_memory.adapters.postgres import PostgresDatabase, schema_for_deployment
        from agent_memory.adapters.postgres.triples import PostgresTripleStore

        url = url.replace("postgres://", "postgresql://", 1)
        database = PostgresDatabase(url, schema=schema_for_deployment(settings.deployment))
        return PostgresTripleStore(database, owns_database=True)
    return None


@contextlib.asynccontextmanager
async def open_ports(
    url: str, *, space: EmbeddingSpace, settings: Settings | None = None
) -> AsyncIterator[Ports]:
    """Every port a storage URL serves, with the memory store bound to `space`
    (Qdrant, Milvus: events, leases and cache from the coordination URL), closed on exit.
    A missing extra raises `UnsupportedBackend` naming it."""
    settings = Settings.from_env() if settings is None else settings
    coord_url = coordination_url(url, settings)
    stores = await open_stores(url, space=space, settings=settings)
    closing: list[Any] = [stores]
    try:
        coord: Stores = stores
        if coord_url is not None:
            coord = await open_stores(coord_url, space=space, settings=settings)
            closing.append(coord)
        triples = await _triples_for(url, settings)
        if triples is not None:
            closing.append(triples)
        yield Ports(
            store=stores.store,
            events=coord.events,
            cache=coord.cache,
            leases=coord.leases,
            triples=triples,
            backend=scheme_of(url),
        )
    finally:
        for part in reversed(closing):
            await part.close()


def ports_of(memory: Memory, triples: TripleStore | None = None) -> Ports:
    """The ports of an open `Memory` (plus a triple store, when it has one)."""
    coord = memory.coordination if memory.coordination is not None else memory.stores
    return Ports(
        store=memory.store,
        events=coord.events,
        cache=coord.cache,
        leases=coord.leases,
        triples=triples,
        backend=memory.stores.backend,
    )


async def _configured_space(settings: Settings) -> EmbeddingSpace:
    from agent_memory.bootstrap.connect import _embedder

    embedder = _embedder(settings)
    space = embedder.space
    closer = getattr(embedder, "aclose", None)
    if closer is not None:
        await closer()
    return space


@contextlib.asynccontextmanager
async def _source(source: str | Memory | Ports, settings: Settings | None) -> AsyncIterator[Ports]:
    if isinstance(source, Ports):
        yield source
    elif isinstance(source, Memory):
        yield ports_of(source)
    else:
        settings = Settings.from_env() if settings is None else settings
        space = await _configured_space(settings)
        async with open_ports(source, space=space, settings=settings) as ports:
            yield ports


# -- export / import --------------------------------------------------------------------


async def export(
    source: str | Memory | Ports,
    output: str | IO[bytes],
    *,
    user: str | None = None,
    namespace: str | None = None,
    include_cache: bool = True,
    include_leases: bool = False,
    settings: Settings | None = None,
    clock: Clock | None = None,
    progress: Progress | None = None,
    on_record: Callable[[MemoryRecord], None] | None = None,
) -> ExportSummary:
    """Export `source` (a URL, an open Memory or Ports) to a file path or a binary
    stream. With `user`, a data-subject export of that user's data. `on_record`
    sees every exported memory record."""
    async with _source(source, settings) as ports:
        if isinstance(output, str):
            with open_export(output, "w") as stream:
                return await export_data(
                    ports, stream, clock=clock or _Utc(), user=user, namespace=namespace,
                    include_cache=include_cache, include_leases=include_leases,
                    progress=progress, on_record=on_record,
                )  # fmt: skip
        return await export_data(
            ports, output, clock=clock or _Utc(), user=user, namespace=namespace,
            include_cache=include_cache, include_leases=include_leases, progress=progress,
            on_record=on_record,
        )  # fmt: skip


def read_header(path: str) -> Header:
    """The header of an export file (`ExportFormatError` when it has none)."""
    with open_export(path, "r") as stream:
        reader = ExportReader(stream)
        for _ in reader.items():
            break
        if reader.header is None:
            raise TruncatedExport(1, "the file is empty")
        return reader.header


def _progress_path(path: str) -> str:
    return path + ".progress"


def _load_progress(path: str, key: str) -> int:
    try:
        with open(_progress_path(path), encoding="utf-8") as fh:
            saved = json.load(fh)
    except FileNotFoundError:
        return 0
    except (OSError, ValueError):
        return 0
    return int(saved.get("line", 0)) if saved.get("key") == key else 0


def _save_progress(path: str, key: str, line: int) -> None:
    tmp = _progress_path(path) + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"key": key, "line": line}, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, _progress_path(path))


async def import_file(
    target: str | Memory | Ports,
    path: str,
    *,
    batch_size: int = 500,
    resume: bool = True,
    settings: Settings | None = None,
    clock: Clock | None = None,
    progress: Progress | None = None,
    on_batch: Callable[[int, ImportSummary], None] | None = None,
) -> ImportSummary:
    """Import the export file at `path` into `target` (opened in the file's
    embedding space when a URL). Idempotent; with `resume`, continues after the
    last batch an interrupted run stored (`<path>.progress`)."""
    header = read_header(path)
    if len(header.spaces) != 1:
        raise PortabilityError(
            f"{path}: one embedding space expected, the file names {len(header.spaces)}"
        )
    checking = time.perf_counter()
    if progress is not None:
        progress("check", 0, None)
    with open_export(path, "r") as stream:
        reader = ExportReader(stream)
        header, footer = reader.verify()
    verified = (header, footer, reader.fingerprints)
    checked = time.perf_counter() - checking
    key = f"{footer.sha256}:{_redact(target) if isinstance(target, str) else id(target)}"
    start = _load_progress(path, key) if resume else 0

    def batch_done(line: int, summary: ImportSummary) -> None:
        _save_progress(path, key, line)
        if on_batch is not None:
            on_batch(line, summary)

    async def run(ports: Ports) -> ImportSummary:
        try:
            summary = await import_data(
                ports, lambda: open_export(path, "r"), clock=clock or _Utc(),
                batch_size=batch_size, resume_after=start, on_batch=batch_done,
                progress=progress, verified=verified,
            )  # fmt: skip
        except ImportFailed as exc:
            exc.summary.check_seconds = checked
            raise
        summary.check_seconds = checked
        with contextlib.suppress(FileNotFoundError):
            os.remove(_progress_path(path))
        return summary

    if isinstance(target, str):
        settings = Settings.from_env() if settings is None else settings
        async with open_ports(target, space=header.spaces[0], settings=settings) as ports:
            return await run(ports)
    return await run(ports_of(target) if isinstance(target, Memory) else target)


async def migrate(
    from_url: str | Memory | Ports,
    to_url: str | Memory | Ports,
    *,
    batch_size: int = 500,
    sample: int = 50,
    include_leases: bool = False,
    settings: Settings | None = None,
    progress: Progress | None = None,
    workdir: str | None = None,
) -> MigrateSummary:
    """Export `from_url` to a temporary file, import it into `to_url` in batches,
    then verify: counts per port and `sample` records compared field by field.
    `VerificationFailed` lists what differs."""
    with tempfile.TemporaryDirectory(dir=workdir, prefix="agent-memory-migrate-") as tmp:
        path = os.path.join(tmp, "export.jsonl")
        async with _source(from_url, settings) as source:
            kept, offer = reservoir(sample)
            started = time.perf_counter()
            exported = await export(
                source, path, include_leases=include_leases, progress=progress, on_record=offer
            )
            exporting = time.perf_counter() - started
            imported = await import_file(
                to_url, path, batch_size=batch_size, resume=False, settings=settings,
                progress=progress,
            )  # fmt: skip
            started = time.perf_counter()
            if progress is not None:
                progress("verify", 0, None)
            async with _target_ports(to_url, source.store.space, settings) as target:
                problems = await verify_copy(
                    source, target, counts=exported.counts, sample=kept,
                    owner_counts=exported.owners,
                )  # fmt: skip
            verifying = time.perf_counter() - started
    summary = MigrateSummary(
        exported=exported.counts, imported=imported, sampled=len(kept), problems=problems,
        seconds={
            "export": exporting, "check": imported.check_seconds,
            "write": imported.write_seconds, "index": imported.index_seconds,
            "verify": verifying,
        },
    )  # fmt: skip
    if problems:
        raise VerificationFailed(problems)
    return summary


@contextlib.asynccontextmanager
async def _target_ports(
    target: str | Memory | Ports, space: EmbeddingSpace, settings: Settings | None
) -> AsyncIterator[Ports]:
    if isinstance(target, str):
        async with open_ports(target, space=space, settings=settings) as ports:
            yield ports
    else:
        yield ports_of(target) if isinstance(target, Memory) else target


# -- re-embedding -------------------------------------------------------------------------


def embedder_for(settings: Settings, model: str, dimension: int | None) -> tuple[Embedder, str]:
    """The embedder a re-embed targets, and its provider name: `hashing` (the
    built-in hashing embedder; `dimension` required) or a model on the configured
    OpenAI-compatible endpoint (`AGENT_MEMORY_EMBEDDINGS_URL`)."""
    from agent_memory.bootstrap.connect import _adapter

    if model == "hashing" or model.startswith("agent-memory/hashing"):
        from agent_memory.adapters.memory.embedder import HashingEmbedder

        return HashingEmbedder(dimension or settings.embedding_dimension), "hashing"
    if settings.embeddings_url is None:
        raise ConfigurationError(
            f"re-embedding with {model!r} needs AGENT_MEMORY_EMBEDDINGS_URL (an "
            "OpenAI-compatible endpoint); the built-in embedder is --to-model hashing"
        )
    evolved = attrs.evolve(
        settings,
        embeddings_model=model,
        embedding_dimension=dimension or settings.embedding_dimension,
    )
    embedder: Embedder = _adapter("openai").embedder_from_settings(evolved)
    return embedder, "openai"


async def reembed(
    url: str,
    *,
    to_model: str,
    dimension: int | None = None,
    batch_size: int = 64,
    drop_old: bool = False,
    settings: Settings | None = None,
    embedder: Embedder | None = None,
    from_space: EmbeddingSpace | None = None,
    progress: Progress | None = None,
) -> ReembedSummary:
    """Build the `to_model` space of `url` from the stored content of the space
    reads use now (the configured one, or the last switch's), resumably; when
    every record is in the new space, record the switch (reads follow it), and
    with `drop_old` delete the old space's records."""
    settings = Settings.from_env() if settings is None else settings
    provider = "custom"
    if embedder is None:
        embedder, provider = embedder_for(settings, to_model, dimension)
    try:
        old_space = from_space or await _configured_space(settings)
        async with open_ports(url, space=old_space, settings=settings) as old:
            if old.cache is None:
                raise UnsupportedBackend(f"{_redact(url)} serves no cache to record the switch in")
            switch = await read_switch(old.cache)
            if (
                from_space is None
                and switch is not None
                and switch.old == old_space.identity
                and switch.new.identity != embedder.space.identity
            ):
                old_space = switch.new  # reads use the switched space: move on from it
        async with (
            open_ports(url, space=old_space, settings=settings) as old,
            open_ports(url, space=embedder.space, settings=settings) as new,
        ):
            summary = await reembed_store(
                old.store, new.store, embedder, batch_size=batch_size, progress=progress
            )
            if summary.complete:
                assert old.cache is not None
                await write_switch(
                    old.cache,
                    EmbeddingSwitch(
                        old=(await _configured_space(settings)).identity,
                        new=embedder.space,
                        provider=provider,
                        switched_at=datetime.now(UTC),
                    ),
                )
                if drop_old:
                    await drop_space(old.store)
            return summary
    finally:
        closer = getattr(embedder, "aclose", None)
        if closer is not None and provider != "custom":
            await closer()
