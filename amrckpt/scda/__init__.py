"""The scda file format: serial-equivalent files for parallel I/O.

A complete implementation of scda (Griesbach and Burstedde, "scda: A Minimal,
Serial-Equivalent Format for Parallel I/O", arXiv:2307.06789): all section
types F, I, B, A and V, both line-break styles, counts of up to 26 digits,
and the per-element compression convention of the paper's section 3.  The
API mirrors libsc's ``sc_scda.h`` without the ``sc_scda_`` prefix.

Write a file on any number of processes and read it on any other; its bytes
do not depend on how many processes wrote it::

    from amrckpt import scda

    with scda.fopen_write("f.scda", b"my file", comm=comm) as f:
        f.fwrite_inline(b"x" * 32, b"an inline section")
        f.fwrite_array(local, elem_counts, 8, b"doubles", encode=True)

    with scda.fopen_read("f.scda", comm=comm) as f:
        hdr = f.fread_section_header()
        f.fread_inline_data()
        hdr = f.fread_section_header(decode=True)
        mine = f.fread_array_data(read_counts).view("<f8")

Below libsc's calling convention, a reader that knows where its sections are
reads many at once through a :class:`ReadPlan` (this rank's byte ranges,
prefix sums between two reads, the sections whose CRC32 is checked), run by
a :class:`GatheredExecutor` (one collective read per phase) or a
:class:`LocalExecutor` (one rank alone).  :class:`FileAccess` is how every
file is opened (MPI-IO hints, the byte backend or a :class:`BackendOpener`,
truncation, sync, line breaks).
"""

from __future__ import annotations

from ._access import BackendOpener, FileAccess, LocalFileOpener, open_backend, open_sink, open_source
from ._backend import MAX_CALL_NBYTES, Backend, ByteSink, ByteSource, Capabilities, PosixBackend, capabilities_of
from ._checksummed import Checksummed
from ._codec import MAX_INFLATE_RATIO, decode_elements, encode_elements
from ._copy import SectionData, copy_section, read_section_data, write_section_data
from ._entries import format_entries, parse_entries
from ._format import (
    FILE_HEADER_NBYTES,
    MAX_COUNT,
    MAX_USER_STRING_NBYTES,
    MAX_VENDOR_NBYTES,
    Style,
    count_entry,
    data_padding,
    data_padding_nbytes,
    pad_string,
    parse_count_entry,
    unpad_string,
)
from ._io import open_read, os_error
from ._layout import MAGIC_A, MAGIC_B, MAGIC_V, RawSection, SectionHeader, Share, read_raw_section, read_section
from ._mpiio import HINTS_ENV, MPIIOBackend, hints
from ._plan import GatheredExecutor, LocalExecutor, LocalFile, PlanExecutor, ReadPlan, checksum_error
from ._reader import ScdaReader, fopen_read, read_file_header
from ._rewrite import RewriteResult, rewrite
from ._scan import FileInfo, RawSectionInfo, SectionInfo, exact_reader, scan, scan_partial
from ._verify import FileReport, Problem, ProblemKind, is_scda, line_style, problem_of, safe_text, verify
from ._writer import ScdaWriter, SectionRecord, fopen_write

__all__ = [
    "FILE_HEADER_NBYTES",
    "HINTS_ENV",
    "MAGIC_A",
    "MAGIC_B",
    "MAGIC_V",
    "MAX_CALL_NBYTES",
    "MAX_COUNT",
    "MAX_INFLATE_RATIO",
    "MAX_USER_STRING_NBYTES",
    "MAX_VENDOR_NBYTES",
    "Backend",
    "ByteSink",
    "ByteSource",
    "Capabilities",
    "Checksummed",
    "BackendOpener",
    "FileAccess",
    "FileInfo",
    "FileReport",
    "GatheredExecutor",
    "LocalExecutor",
    "LocalFile",
    "LocalFileOpener",
    "MPIIOBackend",
    "PlanExecutor",
    "PosixBackend",
    "Problem",
    "ProblemKind",
    "RawSection",
    "RawSectionInfo",
    "ReadPlan",
    "RewriteResult",
    "ScdaReader",
    "ScdaWriter",
    "SectionData",
    "SectionHeader",
    "SectionInfo",
    "SectionRecord",
    "Share",
    "Style",
    "capabilities_of",
    "checksum_error",
    "copy_section",
    "count_entry",
    "data_padding",
    "data_padding_nbytes",
    "decode_elements",
    "encode_elements",
    "exact_reader",
    "fopen_read",
    "fopen_write",
    "format_entries",
    "hints",
    "is_scda",
    "line_style",
    "open_backend",
    "open_sink",
    "open_source",
    "open_read",
    "os_error",
    "pad_string",
    "parse_count_entry",
    "parse_entries",
    "problem_of",
    "read_file_header",
    "read_raw_section",
    "read_section",
    "read_section_data",
    "rewrite",
    "safe_text",
    "scan",
    "scan_partial",
    "unpad_string",
    "verify",
    "write_section_data",
]
