"""A save's agreement: every rank's fields checked against the others' before a byte is written (collective).

The writer of a checkpoint needs, for every field, what all ranks hold
together (totals, the largest count of a leaf) and where this rank's part
goes (the sums of the ranks before it); every rank must also hold the same
global values, and the meshes' parts must follow each other along the
curve.  :func:`agree_fields` finds all of it with two collectives of
``O(1)`` numbers per rank, whatever the number of ranks: one allreduce of
named channels (the call's first exchange: it also agrees on every rank's
earlier error), then one exclusive scan.  Nothing of size P is sent,
received or allocated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..comm import NONE, Call, digest_of
from ..errors import SchemaError
from ..scda import Share
from ._handlers import Payload, handler_for

__all__ = ["AgreedField", "SaveField", "agree_fields"]


@dataclass(frozen=True)
class SaveField:
    """One field of a save as this rank holds it, for :func:`agree_fields`.

    Attributes
    ----------
    name : str
        The field.
    kind : str
        Its handler's kind (:func:`~amrckpt.container.handler_for`).
    payload : Payload
        This rank's data, measured by the handler (bytes, most values of a leaf).
    count : int
        This rank's elements: leaves of a mesh, values of cells, elements of an array.
    digest : int
        Of a global value (the same on every rank, or the save is refused); 0 for a distributed field.
    shape : tuple of int
        The whole shape of a replicated array (the same on every rank).
    bounds : tuple of 4 int or None
        A mesh's ``(first tree, first key, last tree, key past the last leaf)``
        along its curve, None without leaves on this rank; None for other fields.
    mesh : bool
        Whether the field is a mesh (its parts must follow each other along the curve).
    """

    name: str
    kind: str
    payload: Payload
    count: int = 0
    digest: int = 0
    shape: tuple[int, ...] = ()
    bounds: tuple[int, int, int, int] | None = None
    mesh: bool = False


@dataclass(frozen=True)
class AgreedField:
    """What the ranks agreed on about one field (the same on every rank), and this rank's share.

    Attributes
    ----------
    counts : amrckpt.scda.Share
        This rank's elements among all ranks'.
    nbytes : amrckpt.scda.Share
        This rank's bytes of values among all ranks' (hp fields).
    max_count : int
        The most values of one leaf on any rank (an hp field's count dtype).
    """

    counts: Share
    nbytes: Share
    max_count: int


def _key(tree: int, key: int) -> int:
    """One integer ordered as ``(tree, key)`` (keys have at most 61 bits): for prefix maxima along the curve."""
    return (tree << 64) | key


def agree_fields(call: Call, fields: Sequence[SaveField] | None, equal: Mapping[str, tuple[int, str]]) -> dict[str, AgreedField]:
    """Check a save's fields across ranks; return what each rank writes of each field. Collective: two collectives.

    First one allreduce of named channels, the call's first exchange: it
    agrees on every rank's local errors (a wrong dtype on rank 0 alone is
    raised on every rank, before anything else is exchanged) and carries
    every check that all ranks must pass: the digests of ``equal``, of every
    global field and shape, of each mesh's leaves (equal on every rank or
    not), the totals, the largest counts, the last rank with data.  Then one
    exclusive scan: each rank's offsets (prefix sums of every field's count
    and bytes) and the prefix maximum of the ranks' last leaves along each
    mesh's curve, against which each rank checks its first leaf; an order
    error is kept by ``call`` for the save's next agreement (the writer's,
    before any byte is written).

    Parameters
    ----------
    call : Call
        The save's collective call.
    fields : sequence of SaveField, or None
        This rank's fields in the schema's order; None on a rank that failed
        before (its error, kept by ``call``, is raised on every rank).
    equal : mapping of str to (int, str)
        Digests that must be the same on every rank, by name, and what to
        say when they are not (e.g. the schema's).

    Returns
    -------
    dict of str to AgreedField
        By field name.

    Raises
    ------
    SchemaError
        On every rank, naming what differs: a digest of ``equal``, a global
        field's value or shape, or a mesh whose every rank passed the same
        leaves.
    AmrckptError
        On every rank, any rank's earlier error kept by ``call``.
    """
    fs = list(fields or [])
    measured = call.run(lambda: [handler_for(f.kind).measure(f.payload) for f in fs]) or [(0, 0)] * len(fs)
    nbytes = [m[0] for m in measured]
    r = call.rank
    red = call.reduction("save: check the state")
    if fields is not None:
        for name, (value, _) in equal.items():
            red.equal(name, value)
        for f in fs:
            red.equal(f"{f.name}.value", f.digest % (1 << 62)).equal(f"{f.name}.shape", digest_of(f.shape))
        for f in fs:
            if f.mesh:
                bd = digest_of(f.bounds, f.count) if f.bounds is not None else None
                red.max(f"{f.name}.leaves", bd if bd is not None else NONE).min(f"{f.name}.leaves", bd if bd is not None else -NONE)
                red.max(f"{f.name}.rank", r if f.bounds is not None else -1).min(
                    f"{f.name}.rank", r if f.bounds is not None else call.size
                )
        for f, b in zip(fs, nbytes, strict=True):
            red.sum(f"{f.name}.count", f.count).sum(f"{f.name}.nbytes", b)
            red.max(f"{f.name}.count", f.count).max(f"{f.name}.nbytes", b)
            red.max(f"{f.name}.last count", r if f.count else 0).max(f"{f.name}.last nbytes", r if b else 0)
        for f, m in zip(fs, measured, strict=True):
            red.max(f"{f.name}.per leaf", m[1])  # the largest values per leaf of an hp field (its count dtype)
    got = red.run()
    assert fields is not None  # a rank that failed before it prepared its fields made the run above raise
    for name, (_, message) in equal.items():
        if not got.equal(name):
            raise call.agreed(SchemaError(message))
    for f in fs:
        if not got.equal(f"{f.name}.value"):
            raise call.agreed(SchemaError(f"field {f.name!r} differs between ranks; it must be the same on every rank"))
        if not got.equal(f"{f.name}.shape"):
            raise call.agreed(
                SchemaError(f"field {f.name!r} has a different shape on some ranks; it must be the same on every rank")
            )
    meshes = [f for f in fs if f.mesh]
    for f in meshes:
        if got.max(f"{f.name}.rank") > got.min(f"{f.name}.rank") and got.max(f"{f.name}.leaves") == got.min(f"{f.name}.leaves"):
            raise call.agreed(
                SchemaError(
                    f"mesh {f.name!r}: every rank passed the same {f.count} leaves: each rank must pass only its own part "
                    "of the mesh (its leaves of a partition along the curve, e.g. amrckpt.Partition.uniform), not the whole mesh"
                )
            )
    scan = call.reduction("save: offsets").sum("counts", [f.count for f in fs]).sum("nbytes", nbytes)
    below = scan.max("last leaf", [_key(f.bounds[2], f.bounds[3]) if f.bounds is not None else -1 for f in meshes]).below()

    def follow() -> None:
        for f, prev in zip(meshes, below.max("last leaf"), strict=True):
            b = f.bounds
            if b is not None and prev > _key(b[0], b[1]):
                raise SchemaError(
                    f"mesh {f.name!r}: the leaves are not in curve order across ranks: the first leaf of rank {r} "
                    f"(tree {b[0]}) does not follow the last leaf of an earlier rank (tree {prev >> 64}); the ranks' parts "
                    "overlap or are out of rank order"
                )

    call.run(follow)  # agreed on by the save's next agreement (the writer's), before any byte is written
    out: dict[str, AgreedField] = {}
    for j, (f, b) in enumerate(zip(fs, nbytes, strict=True)):
        cmax, clast = got.max(f"{f.name}.count"), got.max(f"{f.name}.last count")
        bmax, blast = got.max(f"{f.name}.nbytes"), got.max(f"{f.name}.last nbytes")
        out[f.name] = AgreedField(
            Share(f.count, below.sum("counts")[j], got.sum(f"{f.name}.count"), cmax, clast),
            Share(b, below.sum("nbytes")[j], got.sum(f"{f.name}.nbytes"), bmax, blast),
            int(got.max(f"{f.name}.per leaf")),
        )
    return out
