"""The per-element compression of paper section 3.1, against libsc's sc_io_encode."""

from __future__ import annotations

import binascii
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from _support import generate, interop_dir, interop_params, require_interop, sha256
from amrckpt.errors import ScdaDecodeError
from amrckpt.scda import _codec


def _enc_entries() -> list[dict[str, Any]]:
    base = interop_dir()
    if base is None:
        return []
    return json.loads((base / "libsc" / "sc_io_encode" / "manifest.json").read_text())["files"]


def encode_one(payload: bytes, level: int = 9, style: str = "unix") -> bytes:
    enc, sizes = _codec.encode_elements(memoryview(payload), np.array([0, len(payload)]), level=level, style=style)  # type: ignore[arg-type]
    assert int(sizes[0]) == enc.size
    return enc.tobytes()


def decode_one(text: bytes, usize: int) -> bytes:
    out = _codec.decode_elements(np.frombuffer(text, np.uint8), np.array([len(text)], np.uint64), np.array([usize], np.uint64))
    return out.tobytes()


@pytest.mark.parametrize("entry", interop_params(_enc_entries()), ids=lambda e: e["name"])
def test_libsc_encodings_decode(entry: dict[str, Any]) -> None:
    base = require_interop() / "libsc" / "sc_io_encode"
    text = (base / entry["name"]).read_bytes()
    assert sha256(text) == entry["encoding_sha256"]
    payload = decode_one(text, entry["payload"]["len"])
    assert sha256(payload) == entry["payload"]["sha256"]


@pytest.mark.parametrize("entry", interop_params(_enc_entries()), ids=lambda e: e["name"])
def test_libsc_line_structure_reproduced(entry: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Given libsc's own zlib stream, our stage 1 and stage 2 give libsc's bytes exactly."""
    base = require_interop() / "libsc" / "sc_io_encode"
    text = (base / entry["name"]).read_bytes()
    lines = [text[i : i + 78] for i in range(0, len(text), 78)]
    stage1 = binascii.a2b_base64(b"".join(line[:-2] for line in lines))
    monkeypatch.setattr(_codec, "_compress", lambda data, level: stage1[9:])
    g = entry["payload"]["generator"]
    payload = generate(g["s"], g["seed"], np.array([g["bytes_per_element"]])).tobytes()
    assert encode_one(payload, entry["zlib_level"], entry["style"]) == text


def test_empty_payload_is_26_bytes() -> None:
    # D4: an empty payload encodes to 26 bytes at level 9 (with zlib; zlib-ng gives the same length).
    text = encode_one(b"", 9)
    assert len(text) == 26 and text.endswith(b"=\n")
    assert decode_one(text, 0) == b""


@given(
    st.lists(st.binary(max_size=300), max_size=40),
    st.sampled_from([0, 1, 9]),
    st.sampled_from(["unix", "mime"]),
)
def test_roundtrip_many_elements(elems: list[bytes], level: int, style: str) -> None:
    data = b"".join(elems)
    offsets = np.concatenate([[0], np.cumsum([len(e) for e in elems])]).astype(np.int64)
    enc, sizes = _codec.encode_elements(memoryview(data), offsets, level=level, style=style)  # type: ignore[arg-type]
    assert enc.size == int(sizes.sum())
    # Every element on its own is what a single-element call gives (no cross-talk).
    pos = 0
    for e, s in zip(elems, sizes.tolist(), strict=True):
        assert enc[pos : pos + s].tobytes() == encode_one(e, level, style)
        pos += s
    usizes = np.array([len(e) for e in elems], dtype=np.uint64)
    assert _codec.decode_elements(enc, sizes, usizes).tobytes() == data


def test_batches_of_large_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_codec, "_BATCH_NBYTES", 1000)
    rng = np.random.default_rng(1)
    sizes = rng.integers(0, 700, 50)
    data = rng.integers(0, 4, int(sizes.sum()), dtype=np.uint8).tobytes()
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    enc, esz = _codec.encode_elements(memoryview(data), offsets)
    assert _codec.decode_elements(enc, esz, sizes.astype(np.uint64)).tobytes() == data


def _bad(text: bytes, usize: int, match: str, index: int = 0) -> None:
    ok = encode_one(b"first element")
    buf = np.frombuffer(ok + text, np.uint8)
    with pytest.raises(ScdaDecodeError, match=match) as info:
        _codec.decode_elements(
            buf, np.array([len(ok), len(text)], np.uint64), np.array([13, usize], np.uint64), first_index=40, offset=1000
        )
    assert f"element {41}" in str(info.value) and f"at byte {1000 + len(ok)}" in str(info.value)


def test_decode_errors_name_element_and_offset() -> None:
    good = encode_one(b"x" * 100)
    _bad(b"", 0, "empty compressed element")
    _bad(good, 101, "U entry says 101")
    _bad(good[:10] + b"!" + good[11:], 100, "outside the standard alphabet")
    _bad(good[:4] + b"=" + good[5:], 100, "padding inside")
    _bad(good[:-3] + b"\n", 100, "not the length of base64 lines")
    # A valid base64 text of a stage 1 with 'y' instead of 'z'.
    raw = binascii.a2b_base64(good[:-2])
    bad = binascii.b2a_base64(raw[:8] + b"y" + raw[9:], newline=False) + b"=\n"
    _bad(bad, 100, "not b'z'")
    # A truncated zlib stream (the size field still says 100).
    trunc = binascii.b2a_base64(raw[:-3], newline=False) + b"=\n"
    _bad(trunc, 100, "zlib")


def test_decode_bounds_memory_before_inflating() -> None:
    """A U size beyond deflate's 1032:1 ratio is refused before anything is allocated."""
    text = encode_one(b"")
    raw = binascii.a2b_base64(text[:-2])
    huge = 10**15
    forged = binascii.b2a_base64(huge.to_bytes(8, "big") + raw[8:], newline=False) + b"=\n"
    with pytest.raises(ScdaDecodeError, match="cannot inflate"):
        decode_one(forged, huge)


@pytest.mark.parametrize("threads", [1, 2, 5])
def test_threads_do_not_change_the_output(threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_codec, "_BATCH_NBYTES", 777)  # many batches, encoded by several threads at once
    rng = np.random.default_rng(2)
    sizes = rng.integers(0, 400, 300)
    data = memoryview(rng.integers(0, 8, int(sizes.sum()), dtype=np.uint8).tobytes())
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    one, one_sizes = _codec.encode_elements(data, offsets, threads=1)
    enc, esz = _codec.encode_elements(data, offsets, threads=threads)
    assert enc.tobytes() == one.tobytes() and np.array_equal(esz, one_sizes)


def test_default_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    from amrckpt import _threads

    monkeypatch.delenv("AMRCKPT_THREADS", raising=False)
    for name in _threads._LOCAL_RANKS:
        monkeypatch.delenv(name, raising=False)
    cores = _threads.default_threads()
    assert cores >= 1
    monkeypatch.setenv("SLURM_NTASKS_PER_NODE", f"{cores * 2}(x3)")  # more ranks than cores: one thread each
    assert _threads.default_threads() == 1
    monkeypatch.setenv("MPI_LOCALNRANKS", "1")
    assert _threads.default_threads() == cores
    monkeypatch.setenv("AMRCKPT_THREADS", "7")
    assert _threads.default_threads() == 7
