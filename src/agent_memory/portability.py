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

This module only re-exports: the work over ports is `services.portability`
(format, transfer, reembed, errors), opening them by URL is `bootstrap.portability`.
"""

from agent_memory.bootstrap.portability import (
    MigrateSummary,
    embedder_for,
    export,
    import_file,
    migrate,
    open_ports,
    ports_of,
    reembed,
)
from agent_memory.services.portability.errors import (
    ChecksumMismatch,
    ExportFormatError,
    ListingUnsupported,
    PortabilityError,
    SpaceMismatch,
    TruncatedExport,
    UnknownRecordType,
    UnsupportedFormatVersion,
    VerificationFailed,
    WouldReplace,
    WrongDimension,
)
from agent_memory.services.portability.format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    ExportReader,
    ExportWriter,
    Header,
    read_header,
)
from agent_memory.services.portability.reembed import EmbeddingSwitch, ReembedSummary, read_switch
from agent_memory.services.portability.transfer import (
    PORTS,
    BulkLoad,
    ExportSummary,
    ImportFailed,
    ImportSummary,
    Ports,
)

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "PORTS",
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
    "SpaceMismatch",
    "TruncatedExport",
    "UnknownRecordType",
    "UnsupportedFormatVersion",
    "VerificationFailed",
    "WouldReplace",
    "WrongDimension",
    "embedder_for",
    "export",
    "import_file",
    "migrate",
    "open_ports",
    "ports_of",
    "read_header",
    "read_switch",
    "reembed",
]
