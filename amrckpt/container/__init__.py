"""The checkpoint container (layer 3½): the on-disk convention of amrckpt, alone.

Everything that knows how a checkpoint lies in its scda file is here, and
the layers above (schemas, restart, manager, CLI) go through this package:

- the convention's models: :class:`Manifest` (what the file holds, with
  :class:`MeshSpec`, :class:`GeometrySpec` and :class:`FieldSpec`),
  :class:`Index` and the footer, the :class:`RunRecord` of the run that
  wrote it (kept beside the file, not in it), format 1's
  :class:`Provenance`;
- per-kind field handlers (:class:`FieldHandler`, orbax's ``TypeHandler``
  pattern): each owns its kind on disk (sections, layout, manifest entry,
  writing, and the plan of a rank's reads), seeing a :class:`FieldSource`
  or a :class:`SectionSink`, never the reader or writer;
- :class:`CheckpointWriter` (header, manifest, fields, index, footer,
  CRC32s) and :class:`CheckpointReader` (footer → index → manifest →
  fields, CRC32s against the index, random access by field and by leaf
  range);
- :func:`read_info` and :func:`verify`.

gsd's split of its file layer (``gsd.fl``) from its schema layer
(``gsd.hoomd``) is the model.  The layout, section by section, is in
``docs/checkpoints.md``; the JSON Schemas of the models in ``schemas/``.
"""

from __future__ import annotations

from ._agree import AgreedField, SaveField, agree_fields
from ._chunks import DEFAULT_CHUNK
from ._convention import (
    CONNECTIVITY_FORMAT_VERSION,
    FOOTER_NBYTES,
    FOOTER_USER_STRING,
    FORMAT_VERSION,
    INDEX_USER_STRING,
    MANIFEST_USER_STRING,
    READ_FORMAT_VERSIONS,
    ConnectivitySpec,
    FieldSpec,
    GeometryMap,
    GeometrySpec,
    Index,
    IndexEntry,
    Manifest,
    MeshSpec,
    Provenance,
    RunRecord,
    dtype_from_json,
    dtype_to_json,
    footer_bytes,
    format_version_of,
    json_schemas,
    mesh_record_dtype,
    parse_footer,
    write_json_schemas,
)
from ._geometry import Geometry
from ._handlers import HANDLERS, FieldHandler, Payload, count_dtype, handler_for
from ._reader import CheckpointInfo, CheckpointReader, checksum_error, read_info, read_run_record
from ._sections import FieldSource, Section, SectionSink, Span
from ._tools import ConvertResult, RawMetadata, convert, convert_file, read_raw_metadata
from ._values import HpData
from ._verify import Problem, VerifyReport, is_checkpoint, locate_index, verify, verify_file
from ._writer import (
    RUN_RECORD_LIMIT,
    RUN_RECORD_SUFFIX,
    CheckpointWriter,
    WriteResult,
    run_record,
    run_record_json,
    run_record_path,
    write_run_record,
)

__all__ = [
    "CONNECTIVITY_FORMAT_VERSION",
    "DEFAULT_CHUNK",
    "FOOTER_NBYTES",
    "FOOTER_USER_STRING",
    "FORMAT_VERSION",
    "HANDLERS",
    "HpData",
    "INDEX_USER_STRING",
    "MANIFEST_USER_STRING",
    "READ_FORMAT_VERSIONS",
    "RUN_RECORD_SUFFIX",
    "AgreedField",
    "CheckpointInfo",
    "CheckpointReader",
    "CheckpointWriter",
    "ConnectivitySpec",
    "ConvertResult",
    "FieldHandler",
    "FieldSource",
    "FieldSpec",
    "Geometry",
    "GeometryMap",
    "GeometrySpec",
    "Index",
    "IndexEntry",
    "Manifest",
    "MeshSpec",
    "Payload",
    "Problem",
    "Provenance",
    "RawMetadata",
    "RunRecord",
    "SaveField",
    "Section",
    "SectionSink",
    "Span",
    "VerifyReport",
    "WriteResult",
    "agree_fields",
    "checksum_error",
    "convert",
    "convert_file",
    "count_dtype",
    "dtype_from_json",
    "dtype_to_json",
    "footer_bytes",
    "format_version_of",
    "handler_for",
    "is_checkpoint",
    "json_schemas",
    "locate_index",
    "mesh_record_dtype",
    "parse_footer",
    "read_info",
    "read_raw_metadata",
    "RUN_RECORD_LIMIT",
    "read_run_record",
    "run_record",
    "run_record_json",
    "run_record_path",
    "verify",
    "verify_file",
    "write_json_schemas",
    "write_run_record",
]
