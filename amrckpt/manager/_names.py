"""The names in a checkpoint directory: one step, its records, its temporary and kept-aside files (orbax's ``NameFormat``).

Every name the manager writes, and ``amrckpt ls`` reads, is built and
recognised here, and nowhere else::

    ckpt-000000000040.scda                        the checkpoint of step 40 (committed)
    ckpt-000000000040.scda.run.json               its run record (writers, partition, host, save time)
    ckpt-000000000040.scda.step.json              its step record (reason, metrics, metadata)
    .ckpt-000000000040.scda.partial-<token>       a commit in progress (the checkpoint or a record)
    .ckpt-000000000040.scda.previous-<token>      what a commit of the same step replaces, until it is done
    ckpt-000000000040.scda.damaged-<token>        a checkpoint found damaged, kept aside (with its records)
    ckpt-000000000040.scda.unreadable-<token>     one that an older release could not read: a restart renames it back

The step takes at least 12 digits (``{step:012d}``), so that the names sort
as the steps do.  A second level of the same directory layout (a node-local
cache) uses the same names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from ..container import RUN_RECORD_SUFFIX
from ..errors import ManagerError

__all__ = ["ASIDE_REASONS", "Listing", "Name", "StepNames"]

STEP_RECORD = ".step.json"
RECORDS = (RUN_RECORD_SUFFIX, STEP_RECORD)  # ".run.json", the container's
ASIDE_REASONS = ("damaged", "unreadable")

Kind = Literal["checkpoint", "record", "partial", "previous", "aside"]


@dataclass(frozen=True, slots=True)
class Name:
    """A name of the directory, parsed.

    Attributes
    ----------
    kind : {"checkpoint", "record", "partial", "previous", "aside"}
    step : int
    base : str
        The committed name it stands for (``ckpt-…scda`` or one of its records).
    token : str
        The commit's token (partial, previous) or the kept-aside file's ("" otherwise).
    suffix : str
        ``""`` for the checkpoint, or the record's suffix (``".run.json"``, ``".step.json"``).
    reason : str
        For a kept-aside file: ``"damaged"`` or ``"unreadable"``.
    """

    kind: Kind
    step: int
    base: str
    token: str = ""
    suffix: str = ""
    reason: str = ""


@dataclass(frozen=True)
class StepNames:
    """Builds and recognises the names of one directory's checkpoints (orbax's ``NameFormat``).

    Parameters
    ----------
    prefix : str, optional
        Checkpoints are ``<prefix>-<step, 12 digits or more>.scda``: letters,
        digits and ``_ . + -``.
    extension : str, optional
        What follows the step (default ``".scda"``; a node cache's steps
        are ``".cache"`` directories).

    Raises
    ------
    ManagerError
        For another prefix.
    """

    prefix: str = "ckpt"
    extension: str = ".scda"
    _re: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.prefix, str) or not re.fullmatch(r"[A-Za-z0-9_.+-]+", self.prefix):
            raise ManagerError(f"prefix {self.prefix!r}: use letters, digits and _ . + - only")
        if not isinstance(self.extension, str) or not re.fullmatch(r"\.[a-z]+", self.extension):
            raise ManagerError(f"extension {self.extension!r}: a dot and lower-case letters")
        records = "|".join(re.escape(s) for s in RECORDS)
        reasons = "|".join(ASIDE_REASONS)
        base = rf"{re.escape(self.prefix)}-(?P<step>\d{{12,}}){re.escape(self.extension)}"
        tbase, abase = base.replace("step", "tstep"), base.replace("step", "astep")
        pattern = (
            rf"(?P<final>{base}(?P<suffix>{records})?)"
            rf"|\.(?P<tbase>{tbase}(?P<tsuffix>{records})?)\.(?P<tkind>partial|previous)-(?P<token>[0-9a-f]+)"
            rf"|(?P<abase>{abase})\.(?P<reason>{reasons})-(?P<atoken>[0-9a-f]+)(?P<asuffix>{records})?"
        )
        object.__setattr__(self, "_re", re.compile(pattern))

    # -- building ------------------------------------------------------------------------------------

    def build_name(self, step: int) -> str:
        """Return the name of the checkpoint of ``step``: ``<prefix>-<step:012d>.scda``.

        Raises
        ------
        ManagerError
            On this rank, if ``step`` is not an int >= 0.
        """
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ManagerError(f"a step is an int >= 0, not {step!r}")
        return f"{self.prefix}-{step:012d}{self.extension}"

    @staticmethod
    def record_names(name: str) -> tuple[str, ...]:
        """Return the names of the records of the checkpoint ``name`` (run record, step record)."""
        return tuple(name + s for s in RECORDS)

    @staticmethod
    def step_record_name(name: str) -> str:
        """Return the name of the step record of the checkpoint ``name``."""
        return name + STEP_RECORD

    @staticmethod
    def partial_name(name: str, token: str) -> str:
        """Return the temporary name of ``name`` in the commit ``token``."""
        return f".{name}.partial-{token}"

    @staticmethod
    def previous_name(name: str, token: str) -> str:
        """Return the name under which the commit ``token`` keeps what it replaces, until it is done."""
        return f".{name}.previous-{token}"

    @staticmethod
    def aside_name(name: str, reason: str, token: str) -> str:
        """Return the name a checkpoint ``name`` is kept aside under (``reason``: damaged or unreadable)."""
        return f"{name}.{reason}-{token}"

    # -- recognising ---------------------------------------------------------------------------------

    def parse(self, name: str) -> Name | None:
        """Return what ``name`` is in this directory's layout, or None if it is none of its names."""
        m = self._re.fullmatch(name)
        if m is None:
            return None
        if m["final"] is not None:
            suffix = m["suffix"] or ""
            return Name("record" if suffix else "checkpoint", int(m["step"]), name, "", suffix)
        if m["tbase"] is not None:
            kind: Kind = "partial" if m["tkind"] == "partial" else "previous"
            return Name(kind, int(m["tstep"]), m["tbase"], m["token"], m["tsuffix"] or "")
        return Name("aside", int(m["astep"]), m["abase"], m["atoken"], m["asuffix"] or "", m["reason"])

    def step_of(self, name: str) -> int | None:
        """Return the step of a committed checkpoint's name, or None (orbax's ``step_from_name``)."""
        n = self.parse(name)
        return n.step if n is not None and n.kind == "checkpoint" else None

    def find_all(self, names: Iterable[str]) -> dict[int, str]:
        """Return the committed checkpoints among ``names``, by step (orbax's ``find_all``)."""
        out = {}
        for name in names:
            step = self.step_of(name)
            if step is not None:
                out[step] = name
        return out

    def listing(self, names: Iterable[str]) -> Listing:
        """Sort ``names`` (a directory's) into checkpoints, records, commits in progress and kept-aside files."""
        out = Listing()
        for name in sorted(names):
            n = self.parse(name)
            if n is None:
                continue
            if n.kind == "checkpoint":
                out.checkpoints[n.step] = name
            elif n.kind == "record":
                out.records.setdefault(n.step, {})[n.suffix] = name
            elif n.kind in ("partial", "previous"):
                out.pending.append((name, n))
            elif n.suffix == "":
                out.aside.append((name, n))
        return out


@dataclass
class Listing:
    """One directory's names, sorted by :meth:`StepNames.listing`.

    Attributes
    ----------
    checkpoints : dict of int to str
        Committed checkpoints by step.
    records : dict of int to dict of str to str
        Each step's record files by suffix (also for steps without a checkpoint).
    pending : list of (str, Name)
        Temporary and previous files of commits in progress or cut short.
    aside : list of (str, Name)
        Checkpoints kept aside (damaged, unreadable).
    """

    checkpoints: dict[int, str] = field(default_factory=dict)
    records: dict[int, dict[str, str]] = field(default_factory=dict)
    pending: list[tuple[str, Name]] = field(default_factory=list)
    aside: list[tuple[str, Name]] = field(default_factory=list)

    def partial(self) -> list[str]:
        """Return the temporary files of checkpoints (commits that did not finish, or are in progress)."""
        return [name for name, n in self.pending if n.kind == "partial" and n.suffix == ""]
