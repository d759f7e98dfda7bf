"""``@checkpointable``: a simulation's own class saves and restores itself through a schema."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from ..errors import SchemaError
from ..restart import Loaded, load
from ..schema import CheckpointSchema, SaveResult, save

__all__ = ["as_schema", "checkpointable"]

T = TypeVar("T")
SchemaT = TypeVar("SchemaT", bound=CheckpointSchema)


def checkpointable(schema: type[CheckpointSchema], *, attributes: dict[str, str] | None = None) -> Callable[[type[T]], type[T]]:
    """Make a simulation state class save and restore itself through ``schema``.

    Each schema field maps onto the attribute of the same name (or the one
    ``attributes`` names).  The class gains:

    - ``to_checkpoint(self) -> schema``: the state as a schema instance
      (pydantic validates it);
    - ``save(self, path, *, comm=None, **kw) -> SaveResult``: :func:`amrckpt.save`;
    - ``from_checkpoint(cls, loaded) -> instance``: builds an object from a
      :class:`~amrckpt.Loaded` (used by :meth:`CheckpointManager.restore_latest`);
    - ``restore(cls, path, *, comm=None, partition="uniform", **kw) -> instance``:
      :func:`amrckpt.load` on the current communicator, then ``from_checkpoint``.

    How an object is built: a class method ``__amrckpt_restore__(cls,
    values, loaded)`` if the class has one; a pydantic model by
    ``model_validate``; a dataclass by calling it with the fields that are
    ``__init__`` arguments and setting the rest; any other class without
    calling ``__init__``, by setting the attributes.  Afterwards, a method
    ``__amrckpt_restored__(self, loaded)``, if present, can rebuild derived
    data (neighbour lists, ghost layers) and read the partition from
    ``loaded.partition``.  Methods the class defines itself are kept.

    Parameters
    ----------
    schema : type of CheckpointSchema
        The schema that describes the state.
    attributes : dict of str to str, optional
        Schema field name to attribute name, where they differ.

    Returns
    -------
    callable
        The class decorator.

    Raises
    ------
    SchemaError
        If ``attributes`` names fields the schema lacks.
    """
    if not (isinstance(schema, type) and issubclass(schema, CheckpointSchema)):
        raise SchemaError(f"checkpointable: {schema!r} is not a CheckpointSchema subclass")
    mapping = {name: name for name in schema.__amrckpt_fields__}
    unknown = sorted(set(attributes or {}) - set(mapping))
    if unknown:
        raise SchemaError(f"checkpointable: the schema {schema.__name__} has no fields {unknown}")
    mapping.update(attributes or {})

    def to_checkpoint(self: Any) -> CheckpointSchema:
        values = {}
        for field, attr in mapping.items():
            if not hasattr(self, attr):
                raise SchemaError(f"{type(self).__name__} has no attribute {attr!r} for the field {field!r} of {schema.__name__}")
            values[field] = getattr(self, attr)
        return schema(**values)

    def save_method(self: Any, path: str | os.PathLike[str], *, comm: Any = None, **kwargs: Any) -> SaveResult:
        return save(self.to_checkpoint(), path, comm=comm, **kwargs)

    def from_checkpoint(cls: Any, loaded: Loaded[Any], /) -> Any:
        state = loaded.state
        values = {attr: getattr(state, field) for field, attr in mapping.items() if field in state.__dict__}
        hook = getattr(cls, "__amrckpt_restore__", None)
        if hook is not None:
            obj: Any = hook(values, loaded)
        elif isinstance(cls, type) and issubclass(cls, BaseModel):
            obj = cls.model_validate(values)
        elif isinstance(cls, type) and dataclasses.is_dataclass(cls):
            init = {f.name for f in dataclasses.fields(cls) if f.init}
            obj = cls(**{k: v for k, v in values.items() if k in init})
            for k, v in values.items():
                if k not in init:
                    setattr(obj, k, v)
        else:
            obj = cls.__new__(cls)
            for k, v in values.items():
                setattr(obj, k, v)
        restored = getattr(obj, "__amrckpt_restored__", None)
        if restored is not None:
            restored(loaded)
        return obj

    def restore(cls: Any, path: str | os.PathLike[str], /, *, comm: Any = None, partition: Any = "uniform", **kwargs: Any) -> Any:
        loaded = load(path, schema, comm=comm, partition=partition, **kwargs)
        return cls.from_checkpoint(loaded)

    to_checkpoint.__doc__ = f"Return this object's state as a {schema.__name__} (amrckpt.checkpointable)."
    save_method.__doc__ = f"Save this object's state as a {schema.__name__} checkpoint (amrckpt.save). Collective."
    from_checkpoint.__doc__ = f"Build an object from a loaded {schema.__name__} checkpoint (amrckpt.checkpointable)."
    restore.__doc__ = f"Load a {schema.__name__} checkpoint on the current communicator (amrckpt.load). Collective."

    def decorate(cls: type[T]) -> type[T]:
        own = vars(cls)
        for name, fn in (
            ("to_checkpoint", to_checkpoint),
            ("save", save_method),
            ("from_checkpoint", classmethod(from_checkpoint)),
            ("restore", classmethod(restore)),
        ):
            if name not in own:
                setattr(cls, name, fn)
        cls.__amrckpt_schema__ = schema  # type: ignore[attr-defined]
        return cls

    return decorate


def as_schema(schema: type[SchemaT], state: Any) -> SchemaT:
    """Return ``state`` as an instance of ``schema``: itself, or what its ``to_checkpoint()`` returns. Not collective.

    Raises
    ------
    SchemaError
        If it is neither.
    """
    if isinstance(state, schema):
        return state
    to_checkpoint = getattr(state, "to_checkpoint", None)
    if to_checkpoint is not None:
        out = to_checkpoint()
        if isinstance(out, schema):
            return out
    raise SchemaError(f"save: expected a {schema.__name__} or a checkpointable object, got {type(state).__name__}")
