"""TEMPORARY adapter: the reader API of ``amrckpt.container`` implemented with today's code.

The lead's container layer (``amrckpt.container.CheckpointReader``) is the
only code meant to know the on-disk convention.  Until it is on main, this
module gives the exporters the same API, built on :func:`amrckpt.read_info`
and the scda reader, so that they and their tests run.  It is deleted when
the branch is rebased on the container layer; nothing outside
``amrckpt.export`` may import it.

Leaf ranges of uncompressed sections are read with ``os.pread`` at the
offsets the scda format gives (an A section's data start 128 bytes after it,
a V section's after its ``N`` entry and its ``N`` size entries); compressed
sections are read whole once and sliced.  Only the metadata is checked
against CRC32s here (``verify``); the container layer checks every section.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np

from .. import scda
from ..errors import CheckpointError
from ..restart import read_info
from ..schema import Manifest, mesh_record_dtype
from ..schema._manifest import FieldSpec, dtype_from_json

__all__ = ["CheckpointReader", "Geometry"]

_HEADER = 64  # section type and user string
_COUNT = 32  # one count entry (N, E or E_i)


@dataclass(frozen=True)
class Geometry:
    """The physical box of each tree of a forest.

    Attributes
    ----------
    tree_lower, tree_upper : (num_trees, dim) numpy.ndarray of float64
        Lower and upper corner of each tree.
    """

    tree_lower: np.ndarray
    tree_upper: np.ndarray

    @classmethod
    def unit_row(cls, num_trees: int, dim: int) -> Geometry:
        """Return the default geometry: a row of unit trees, tree i at x in [i, i + 1)."""
        lower = np.zeros((num_trees, dim), dtype=np.float64)
        lower[:, 0] = np.arange(num_trees, dtype=np.float64)
        return cls(lower, lower + 1.0)


class CheckpointReader:
    """Random access to the leaves of one checkpoint (temporary stand-in; see the module docstring).

    Parameters
    ----------
    path : str or os.PathLike
        The checkpoint.
    comm : optional
        Ignored here (every caller reads its own ranges serially).
    verify : bool, optional
        Check the footer, index, manifest and provenance against their CRC32s.
    """

    def __init__(self, path: str | os.PathLike[str], comm: Any = None, verify: bool = True) -> None:
        self.path = os.fspath(path)
        self._info = read_info(self.path, verify=verify)
        self.manifest: Manifest = self._info.manifest
        m = self.manifest.mesh
        self.geometry = Geometry.unit_row(m.num_trees, m.dim) if m is not None else None
        self._fh = open(self.path, "rb")  # closed by close()
        self._cache: dict[str, Any] = {}

    def __enter__(self) -> CheckpointReader:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Close the file."""
        self._fh.close()

    def _pread(self, nbytes: int, offset: int) -> bytes:
        data = os.pread(self._fh.fileno(), nbytes, offset)
        if len(data) != nbytes:
            raise CheckpointError(f"{self.path!r}: {nbytes} bytes at {offset} reach past the end of the file")
        return data

    def _whole(self, fs: FieldSpec, elem_size: int) -> Any:
        """Return a compressed section, read whole once: fixed-size data, or (sizes, data) of a V section."""
        if fs.name not in self._cache:
            with scda.fopen_read(self.path) as f:
                f.fseek_section(self._info.index.entry(fs.name).offset)
                h = f.fread_section_header(decode=True)
                assert h is not None
                if h.type == "A":
                    self._cache[fs.name] = f.fread_array_data([h.elem_count])
                else:
                    sizes = f.fread_varray_sizes([h.elem_count])
                    data = f.fread_varray_data([h.elem_count], sizes, f.proc_sizes())
                    self._cache[fs.name] = (sizes, data)
        return self._cache[fs.name]

    def _fixed(self, fs: FieldSpec, elem_size: int, start: int, count: int) -> bytes:
        if not 0 <= start <= start + count <= self.manifest.num_leaves:
            raise IndexError(f"leaves {start}..{start + count} are outside 0..{self.manifest.num_leaves}")
        if fs.compressed:
            raw = self._whole(fs, elem_size)
            return bytes(raw[start * elem_size : (start + count) * elem_size])
        base = self._info.index.entry(fs.name).offset + _HEADER + 2 * _COUNT
        return self._pread(count * elem_size, base + start * elem_size)

    def read_mesh(self, start: int, count: int) -> np.ndarray:
        """Return leaves ``start .. start + count - 1``: records with tree, x, y[, z], level."""
        m = self.manifest.mesh
        if m is None:
            raise CheckpointError(f"{self.path!r} holds no mesh")
        rec = mesh_record_dtype(m.dim)
        return np.frombuffer(self._fixed(self.manifest.field(m.field), rec.itemsize, start, count), dtype=rec)

    def read_cells(self, name: str, start: int, count: int) -> np.ndarray:
        """Return ``(count, *shape)`` values of cell field ``name``, native byte order."""
        fs = self.manifest.field(name)
        dt = dtype_from_json(fs.dtype, f"{self.path!r}: field {name!r}")
        per = math.prod(fs.shape)
        raw = self._fixed(fs, dt.itemsize * per, start, count)
        return np.frombuffer(raw, dtype=dt).reshape(count, *fs.shape).astype(dt.newbyteorder("="))

    def read_hp(self, name: str, start: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(counts, values)`` of hp field ``name`` for leaves ``start .. start + count - 1``."""
        fs = self.manifest.field(name)
        dt = dtype_from_json(fs.dtype, f"{self.path!r}: field {name!r}")
        value_nbytes = dt.itemsize * math.prod(fs.shape)
        key = name + "\0sizes"
        if key not in self._cache:
            if fs.compressed:
                self._cache[key] = self._whole(fs, 0)[0]
            else:
                with scda.fopen_read(self.path) as f:
                    f.fseek_section(self._info.index.entry(name).offset)
                    h = f.fread_section_header()
                    assert h is not None
                    self._cache[key] = f.fread_varray_sizes([h.elem_count])
            self._cache[key] = np.concatenate([[0], np.cumsum(self._cache[key].astype(np.int64))])
        first = self._cache[key]
        sizes = np.diff(first[start : start + count + 1])
        lo, hi = int(first[start]), int(first[start + count])
        if fs.compressed:
            raw = bytes(self._whole(fs, 0)[1][lo:hi])
        else:
            N = self.manifest.num_leaves
            base = self._info.index.entry(name).offset + _HEADER + _COUNT + N * _COUNT
            raw = self._pread(hi - lo, base + lo)
        values = np.frombuffer(raw, dtype=dt).reshape(-1, *fs.shape).astype(dt.newbyteorder("="))
        return sizes // value_nbytes, values
