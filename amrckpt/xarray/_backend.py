"""The xarray backend: ``xr.open_dataset(path, engine="amrckpt")`` and ``xr.open_datatree(path, engine="amrckpt")``."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import xarray as xr
from xarray.backends import BackendEntrypoint

from .. import scda
from ..container import FOOTER_USER_STRING
from ._dataset import CHUNK_NBYTES, ROOT, checkpoint_groups, group_name
from ._source import CheckpointSource

__all__ = ["AmrckptBackendEntrypoint", "open_groups"]

SCDA_MAGIC = b"scdata0 "
"""The first bytes of every scda file (the file header's magic and its space, scda paper 2.2)."""


def _path(filename_or_obj: Any) -> str:
    if isinstance(filename_or_obj, (str, os.PathLike)):
        return os.fspath(filename_or_obj)
    raise TypeError(f"the amrckpt engine opens checkpoints by path, not {type(filename_or_obj).__name__} objects")


def open_groups(
    filename_or_obj: Any,
    *,
    drop_variables: str | Iterable[str] | None = None,
    groups: Iterable[str] | None = None,
    verify: bool = True,
    chunk_nbytes: int = CHUNK_NBYTES,
    access: scda.FileAccess | None = None,
) -> dict[str, xr.Dataset]:
    """Open a checkpoint's groups lazily (:func:`amrckpt.xarray.checkpoint_groups`), closing the file with them. Not collective."""
    drop = [drop_variables] if isinstance(drop_variables, str) else list(drop_variables or ())
    source = CheckpointSource(_path(filename_or_obj), verify=verify, access=access)
    try:
        out = checkpoint_groups(source, groups=groups, drop_variables=drop, chunk_nbytes=chunk_nbytes)
    except BaseException:
        source.close()
        raise
    for ds in out.values():
        ds.set_close(source.close)
    return out


class AmrckptBackendEntrypoint(BackendEntrypoint):
    """xarray's engine ``"amrckpt"``: a checkpoint opened lazily, every variable read by leaf ranges. Serial (not collective).

    ``xr.open_dataset(path, engine="amrckpt")`` gives one mesh's leaves (the
    first, or ``group="/<mesh>"``) with the checkpoint's global fields;
    ``group="/"`` the global fields alone.  ``xr.open_datatree(path,
    engine="amrckpt")`` gives every group: ``/`` and one ``/<mesh>`` per mesh.
    With ``chunks={}`` the variables are dask arrays whose chunks are
    contiguous ranges of leaves (``encoding["preferred_chunks"]``).

    Options (keywords of ``open_dataset`` and ``open_datatree``):

    verify : bool, default True
        Check CRC32s as docs/analysis.md says: the metadata when opening,
        sections read whole, and the zlib stream of each compressed chunk read.
    chunk_nbytes : int, default 64 MiB
        Bytes per preferred dask chunk of the widest per-leaf variable.
    access : amrckpt.scda.FileAccess, optional
        How each process opens the file (it must pickle for dask.distributed).
    """

    description = "Open amrckpt checkpoints (scda files) lazily: leaves in curve order, dask chunks of contiguous leaves"
    url = "https://github.com/amrckpt/amrckpt/blob/main/docs/analysis.md"
    open_dataset_parameters = ("filename_or_obj", "drop_variables", "group", "verify", "chunk_nbytes", "access")

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        """Return whether ``filename_or_obj`` is a path ending in ``.scda``, or an scda file with an amrckpt footer."""
        if not isinstance(filename_or_obj, (str, os.PathLike)):
            return False
        path = os.fspath(filename_or_obj)
        if path.endswith(".scda"):
            return True
        try:
            with open(path, "rb") as fh:
                if fh.read(len(SCDA_MAGIC)) != SCDA_MAGIC:
                    return False
                fh.seek(-96, os.SEEK_END)
                return FOOTER_USER_STRING in fh.read()
        except OSError:
            return False

    def open_dataset(
        self,
        filename_or_obj: Any,
        *,
        drop_variables: str | Iterable[str] | None = None,
        group: str | None = None,
        verify: bool = True,
        chunk_nbytes: int = CHUNK_NBYTES,
        access: scda.FileAccess | None = None,
    ) -> xr.Dataset:
        """Open one mesh's leaves with the global fields (``group=None``: the first mesh), or one group. Not collective.

        Raises
        ------
        ValueError
            If the checkpoint has no group ``group``.
        CheckpointError, ChecksumError, ScdaError
            If the checkpoint cannot be opened or its metadata is damaged.
        """
        drop = [drop_variables] if isinstance(drop_variables, str) else list(drop_variables or ())
        source = CheckpointSource(_path(filename_or_obj), verify=verify, access=access)
        try:
            meshes = [group_name(ms.field) for ms in source.manifest().meshes]
            if group is None:
                want = [ROOT, *meshes[:1]]
            else:
                want = [group if group.startswith("/") else "/" + group]
                if want[0] not in (ROOT, *meshes):
                    raise ValueError(f"{filename_or_obj!r} has no group {group!r}; its groups: {', '.join([ROOT, *meshes])}")
            out = checkpoint_groups(source, groups=want, drop_variables=drop, chunk_nbytes=chunk_nbytes)
        except BaseException:
            source.close()
            raise
        if group is None and meshes:
            ds = out[meshes[0]].merge(out[ROOT], combine_attrs="override")
        else:
            ds = out[want[0]]
        ds.set_close(source.close)
        return ds

    def open_groups_as_dict(
        self,
        filename_or_obj: Any,
        *,
        drop_variables: str | Iterable[str] | None = None,
        verify: bool = True,
        chunk_nbytes: int = CHUNK_NBYTES,
        access: scda.FileAccess | None = None,
    ) -> dict[str, xr.Dataset]:
        """Every group of the checkpoint: ``/`` (global fields) and ``/<mesh>`` per mesh. Not collective."""
        return open_groups(filename_or_obj, drop_variables=drop_variables, verify=verify, chunk_nbytes=chunk_nbytes, access=access)

    def open_datatree(
        self,
        filename_or_obj: Any,
        *,
        drop_variables: str | Iterable[str] | None = None,
        verify: bool = True,
        chunk_nbytes: int = CHUNK_NBYTES,
        access: scda.FileAccess | None = None,
    ) -> xr.DataTree:
        """Return the checkpoint as a tree of groups (:meth:`open_groups_as_dict`). Not collective."""
        groups = self.open_groups_as_dict(
            filename_or_obj, drop_variables=drop_variables, verify=verify, chunk_nbytes=chunk_nbytes, access=access
        )
        return xr.DataTree.from_dict(groups)
