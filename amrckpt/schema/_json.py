"""JSON forms of global field values: what inline and block sections hold, and digests of their meaning."""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

from pydantic import TypeAdapter

from ..errors import SchemaError

__all__ = ["digest", "encode_inline", "json_bytes", "json_value"]


@functools.cache
def _adapter(cls: Any, name: str) -> TypeAdapter[Any]:
    annotation: Any = cls.model_fields[name].annotation
    return TypeAdapter(annotation)


def adapter(cls: Any, name: str) -> TypeAdapter[Any]:
    """Return the pydantic TypeAdapter of field ``name`` of schema ``cls`` (cached)."""
    return _adapter(cls, name)


def digest(data: bytes) -> int:
    """Return a 62-bit digest of ``data`` (blake2b), for checking that ranks agree."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") >> 2


def _canonical(obj: Any) -> Any:
    """Return a form of a Python-mode dump that equal values share: dict keys and set elements sorted."""
    if isinstance(obj, dict):
        return ("dict", sorted(((repr(k), _canonical(v)) for k, v in obj.items()), key=lambda kv: kv[0]))
    if isinstance(obj, (set, frozenset)):
        return ("set", sorted((_canonical(v) for v in obj), key=repr))
    if isinstance(obj, (list, tuple)):
        return [_canonical(v) for v in obj]
    return obj


def json_value(cls: Any, name: str, value: Any) -> tuple[Any, int]:
    """Return the JSON-compatible form of a global field's value and a digest of its meaning.

    Raises
    ------
    SchemaError
        If the value cannot be serialized (naming the field).
    """
    ad = _adapter(cls, name)
    try:
        jv = ad.dump_python(value, mode="json")
        canonical = repr(_canonical(ad.dump_python(value, mode="python")))
    except Exception as exc:  # pydantic's serialization errors are not ours: name the field
        raise SchemaError(f"field {name!r}: the value cannot be serialized to JSON: {exc}") from exc
    return jv, digest(canonical.encode())


def json_bytes(value: Any, name: str) -> bytes:
    """Compact JSON text (``Infinity``/``NaN`` for non-finite floats, as Python's json writes them).

    Raises
    ------
    SchemaError
        On this rank, if the value cannot be serialized to JSON.
    """
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=True).encode()
    except (TypeError, ValueError) as exc:
        raise SchemaError(f"field {name!r}: the value cannot be serialized to JSON: {exc}") from exc


def encode_inline(value: Any, name: str) -> bytes:
    """Return the 32 data bytes of an inline field: JSON, left-aligned, spaces, a line feed.

    Raises
    ------
    SchemaError
        If the JSON is longer than 31 bytes.
    """
    text = json_bytes(value, name)
    if len(text) > 31:
        raise SchemaError(f"field {name!r}: {len(text)} bytes of JSON do not fit an inline section (31); declare it with Block()")
    return text.ljust(31) + b"\n"
