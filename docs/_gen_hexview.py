"""The annotated hex view of a small real checkpoint in docs/checkpoints.md.

Usage::

    python docs/_gen_hexview.py            # print the view
    python docs/_gen_hexview.py --full     # print it without eliding long JSON blocks
    python docs/_gen_hexview.py --write    # replace the view in docs/checkpoints.md (after a format change or a version bump)

The file is written by ``amrckpt.save`` like any checkpoint: its bytes are
a function of the state (format 2), the same on every machine, for the
amrckpt version recorded in its manifest.  tests/test_docs.py regenerates
the view with the amrckpt version recorded in the page and fails if a
single byte differs.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

import amrckpt as ac
from amrckpt import scda

DOC = Path(__file__).resolve().parent / "checkpoints.md"
SOURCE = re.compile(r"<!-- hexview: source -->\n```python\n(.*?)```", re.S)
BLOCK = re.compile(
    r"(<!-- hexview: amrckpt (?P<version>\S+); regenerate with python docs/_gen_hexview.py --write -->\n"
    r"```text\n)(?P<view>.*?)(```)",
    re.S,
)

BYTES_PER_LINE = 16
MAX_LINES = 6  # longer runs of data show their first 3 and last 2 lines


@contextmanager
def _fixed_environment(version: str) -> Iterator[None]:
    """Write manifests as amrckpt ``version`` (the only thing of the writer's in a file)."""
    from amrckpt.schema import _save

    saved_version = _save.__version__  # type: ignore[attr-defined]
    _save.__version__ = version  # type: ignore[attr-defined]
    try:
        yield
    finally:
        _save.__version__ = saved_version  # type: ignore[attr-defined]


def source() -> str:
    """Return the Python block of docs/checkpoints.md that writes the page's file (``tiny.scda``).

    Raises
    ------
    LookupError
        If the page has no such block (its ``<!-- hexview: source -->`` mark is gone).
    """
    m = SOURCE.search(DOC.read_text(encoding="utf-8"))
    if m is None:
        raise LookupError(f"{DOC}: no Python block after <!-- hexview: source -->")
    return m.group(1)


def tiny_checkpoint(directory: Path, version: str = ac.__version__) -> bytes:
    """Run the page's block in ``directory`` as amrckpt ``version`` would, and return the bytes of its file."""
    namespace: dict[str, Any] = {"__name__": "__hexview__"}
    cwd = os.getcwd()
    os.chdir(directory)
    try:
        with _fixed_environment(version):
            exec(compile(source(), f"{DOC.name} (hexview source)", "exec", dont_inherit=True), namespace)
        loaded = ac.load("tiny.scda", namespace["Tiny"])  # a real checkpoint: it loads and verifies
        assert loaded.state.step == namespace["state"].step
        return (directory / "tiny.scda").read_bytes()
    finally:
        os.chdir(cwd)


def _entry(data: bytes) -> str:
    """Return the text of a padded string or count entry, without its padding."""
    return data[: data.rindex(b" ")].decode() if b" " in data else data.decode()


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


# The sections of amrckpt's convention (docs/checkpoints.md), by user string.
ROLES = {
    b"amrckpt manifest": ("the manifest", "JSON: format, schema, meshes (leaves, geometry), fields, values"),
    b"amrckpt index": ("the index", "JSON: offset, end and CRC32 of every section"),
    b"amrckpt footer 1": ("the footer, always the last 96 bytes", "offset and CRC32 of the index, in hex"),
}
FIGURE = {"I": "2.3, Fig. 2", "B": "2.4, Fig. 3", "A": "2.5, Fig. 4", "V": "2.6, Fig. 5"}


def _values(data: bytes, dtype: str) -> str:
    return ", ".join(repr(v) for v in np.frombuffer(data, dtype).tolist())


_COUNTS: dict[str, list[int]] = {}  # the counts of an hp field of layout "counts", until its values are described


def _describe(s: Any, raw: bytes, manifest: dict[str, Any], sizes: list[int]) -> tuple[str, str]:
    """Say what a section is, and what its data bytes hold, from the file itself."""
    data = raw[s.data_offset : s.data_offset + s.data_nbytes]
    if s.user_string in ROLES:
        what, holds = ROLES[s.user_string]
        return what, holds
    spec = next(f for f in manifest["fields"] if f["name"] == s.user_string.decode())
    what = f"field '{spec['name']}' ({', '.join(str(x) for x in (spec['kind'], spec['dtype'], spec['units']) if x)})"
    if spec["kind"] == "inline":
        return what, f"JSON {data.decode().strip()!r}, padded with spaces by amrckpt"
    if spec["kind"] == "mesh":
        return what, f"{s.elem_count} records: " + ", ".join(f"{n} {d}" for n, d in manifest["meshes"][0]["record"])
    if spec["kind"] == "cells":
        return what, f"{s.elem_count} x {spec['dtype']}: {_values(data, spec['dtype'])}"
    if spec["kind"] == "hp" and spec.get("layout") == "counts":  # two A sections: the counts, then the values
        name = spec["name"]
        if name not in _COUNTS:
            _COUNTS[name] = np.frombuffer(data, spec["count_dtype"]).tolist()
            return what + ", its counts", f"values per leaf, {spec['count_dtype']}: {', '.join(map(str, _COUNTS[name]))}"
        bounds = np.cumsum([0, *_COUNTS.pop(name)]) * np.dtype(spec["dtype"]).itemsize
        per_leaf = " ".join(f"[{_values(data[a:b], spec['dtype'])}]" for a, b in itertools.pairwise(bounds))
        return what + ", its values", f"{s.elem_count} x {spec['dtype']}, leaf after leaf: {per_leaf}"
    if spec["kind"] == "hp":
        bounds = np.cumsum([0, *sizes])
        per_leaf = " ".join(f"[{_values(data[a:b], spec['dtype'])}]" for a, b in itertools.pairwise(bounds))
        return what, f"values {spec['dtype']} per element: {per_leaf}"
    return what, "JSON"


def _parts(raw: bytes) -> Iterator[tuple[int, int, str]]:
    """(offset, end, annotation) of every entry of the file, in order; end 0 for a title line."""
    yield 0, 0, "F  file header, 128 bytes (scda 2.2, Fig. 1)"
    yield 0, 32, "magic 'scdata0', vendor 'amrckpt', '-' padding to 24 (2.1.1)"
    yield 32, 96, f"'F', user string '{_entry(raw[34:96])}', '-' padding to 62"
    yield 96, 128, "no data bytes; '=' data padding to 32 (2.1.2)"
    sections = _scan(raw)
    manifest = json.loads(raw[sections[0].data_offset : sections[0].data_offset + sections[0].data_nbytes])
    for s in sections:
        o = s.offset
        sizes = [int(_entry(raw[e + 2 : e + 32])) for e in range(o + 96, s.data_offset, 32)] if s.type == "V" else []
        what, data = _describe(s, raw, manifest, sizes)
        name, nbytes = s.user_string.decode(), s.end - s.offset
        yield o, 0, f"{s.type}  {what}: {s.type} section '{name}', {nbytes} bytes (scda {FIGURE[s.type]})"
        yield o, o + 64, f"'{s.type}', user string, '-' padding to 62 (2.1.1)"
        o += 64
        if s.type == "I":
            yield o, o + 32, f"32 data bytes, no padding: {data}"
            continue
        if s.type in "AV":
            yield o, o + 32, f"count entry: N = {_plural(int(_entry(raw[o + 2 : o + 32])), 'element')}"
            o += 32
        if s.type == "V":
            for i in range(s.elem_count):
                yield o, o + 32, f"count entry: E_{i} = {_plural(int(_entry(raw[o + 2 : o + 32])), 'byte')} (element {i})"
                o += 32
        else:
            label = "data bytes" if s.type == "B" else "bytes per element"
            yield o, o + 32, f"count entry: E = {_entry(raw[o + 2 : o + 32])} {label}"
            o += 32
        yield o, s.data_offset + s.data_nbytes, f"data, {s.data_nbytes} bytes: {data}"
        yield s.data_offset + s.data_nbytes, s.end, "'=' data padding to a multiple of 32 (2.1.2)"


def _scan(raw: bytes) -> list[Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.scda"
        path.write_bytes(raw)
        return [s.raw[0] for s in scda.scan(path).sections]


def hexview(raw: bytes, *, full: bool = False) -> str:
    """Show a file as offset, hex and ASCII lines (16 bytes each), each entry annotated on its first line."""
    lines: list[str | None] = []
    for offset, end, note in _parts(raw):
        if end == 0:
            lines += ["" if lines else None, note]
            continue
        rows = list(range(offset - offset % BYTES_PER_LINE, end, BYTES_PER_LINE))
        shown = rows if full or len(rows) <= MAX_LINES else [*rows[:3], -1, *rows[-2:]]
        for i, row in enumerate(shown):
            if row < 0:
                lines.append(f"{'':6}  {'...':<47}  {'':16}  ... {len(rows) - 5} more lines")
                continue
            cells = [raw[b] if offset <= b < end else None for b in range(row, row + BYTES_PER_LINE)]
            hexes = " ".join("  " if c is None else f"{c:02x}" for c in cells)
            text = "".join(" " if c is None else chr(c) if 32 <= c < 127 else "." for c in cells)
            lines.append(f"{row:06x}  {hexes}  {text}  {note if i == 0 else ''}".rstrip())
    lines.append(f"{len(raw):06x}  end of file: {len(raw)} bytes")
    return "\n".join(line for line in lines if line is not None) + "\n"


def view(version: str = ac.__version__, *, full: bool = False) -> str:
    """Return the view of the page, for amrckpt ``version``."""
    with tempfile.TemporaryDirectory() as tmp:
        return hexview(tiny_checkpoint(Path(tmp), version), full=full)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="do not elide long JSON blocks")
    ap.add_argument("--write", action="store_true", help="replace the view in docs/checkpoints.md")
    args = ap.parse_args()
    if not args.write:
        sys.stdout.write(view(full=args.full))
        return 0
    doc = DOC.read_text(encoding="utf-8")
    m = BLOCK.search(doc)
    if m is None:
        sys.stderr.write(f"{DOC}: no hexview block\n")
        return 1
    head = m.group(1).replace(f"amrckpt {m.group('version')};", f"amrckpt {ac.__version__};")
    DOC.write_text(doc[: m.start()] + head + view() + m.group(4) + doc[m.end() :], encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
