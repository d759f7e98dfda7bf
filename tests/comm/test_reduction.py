"""Named reductions (issue 34): channels by name, one allreduce or one exscan, the same on every rank."""

from __future__ import annotations

from typing import Any

import pytest

from amrckpt import errors
from amrckpt.comm import NONE, SerialComm, collective, run_threads


def test_named_channels_combine_over_ranks_in_one_allreduce() -> None:
    def body(comm: Any) -> tuple[Any, ...]:
        r = comm.rank
        with collective(comm, "test: reduction") as call:
            red = call.reduction("test").sum("n", r + 1).max("n", 10 * r).min("n", 10 * r).xor("bits", 1 << r)
            got = red.sum("v", [r, 2 * r]).max("v", [r, -r]).equal("same", 7).equal("rank", r).root(f"from {r}", 2).run()
            return (
                got.sum("n"), got.max("n"), got.min("n"), got.xor("bits"), got.sum("v"), got.max("v"),
                got.equal("same"), got.equal("rank"), got.value,
            )  # fmt: skip

    want = (6, 20, 0, 0b111, [3, 6], [2, 0], True, False, "from 2")
    assert run_threads(3, body) == [want] * 3


def test_below_is_one_exscan_of_named_channels() -> None:
    def body(comm: Any) -> tuple[Any, ...]:
        r = comm.rank
        with collective(comm, "test: scan") as call:
            got = call.reduction("scan").sum("n", r + 1).sum("v", [1, r]).max("last", 10 * r).below()
            return got.sum("n"), got.sum("v"), got.max("last")

    assert run_threads(3, body) == [(0, [0, 0], NONE), (1, [1, 0], 0), (3, [2, 1], 10)]


def test_a_rank_that_failed_before_the_reduction_fails_it_on_every_rank() -> None:
    def body(comm: Any) -> str:
        with collective(comm, "test: failed") as call:
            call.run(lambda: (_ for _ in ()).throw(errors.SchemaError("bad on rank 1")) if comm.rank == 1 else None)
            try:
                call.reduction("after").max("x", 1).run()
            except errors.SchemaError as exc:
                return str(exc)
        return "no error"

    assert all("bad on rank 1" in s for s in run_threads(3, body))


def test_a_channel_is_named_once_per_operation_and_read_by_its_operation() -> None:
    with collective(SerialComm(), "test: names") as call:
        red = call.reduction("names").max("x", 1).min("x", 1)
        with pytest.raises(ValueError, match="max channel 'x' added twice"):
            red.max("x", 2)
        got = red.run()
        with pytest.raises(KeyError, match="no sum channel 'x'"):
            got.sum("x")
        with pytest.raises(ValueError, match="no equal channel"):
            call.reduction("scan").equal("d", 1).below()
