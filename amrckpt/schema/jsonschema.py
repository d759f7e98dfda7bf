"""Write the JSON Schemas of the on-disk manifest, index, run record and (format 1) provenance.

Run from the repository: ``python -m amrckpt.schema.jsonschema [directory]``
(default ``schemas/``).  A test checks that the committed files are current.
"""

from __future__ import annotations

import sys

from ..container import write_json_schemas

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Write the schemas into the directory given (default ``schemas``); print their paths."""
    args = sys.argv[1:] if argv is None else argv
    for path in write_json_schemas(args[0] if args else "schemas"):
        print(path)  # noqa: T201 - a command-line tool
    return 0


if __name__ == "__main__":
    sys.exit(main())
