"""How deeply a run checks its answer: the depths, the default, and the one place they are read.

- ``fast`` (the default): certificates the run computes beside its answer, seeded spot checks
  with a stated detection probability, cheap independent invariants; at most about a tenth of
  the compute.
- ``full``: the exhaustive audit, every reported value recomputed by an independent path; never
  weaker than ``fast``.
- ``off``: no check, and the result says so.

The command line's ``--verify``, ``daskgpu.run(verify=...)``, ``bench`` and
:func:`daskgpu.testing.check_pipeline` all read a depth through :func:`parse`.
"""

from __future__ import annotations

from daskgpu.errors import ParameterError

#: Every depth, the default first.
DEPTHS = ("fast", "full", "off")
#: The depth a run checks at unless told otherwise.
DEFAULT = "fast"
#: The depths at which a check runs.
CHECKED = ("fast", "full")


def parse(depth: str | None) -> str:
    """``depth`` as asked for by a user: one of :data:`DEPTHS` (:data:`DEFAULT` for None).

    Raises
    ------
    ParameterError
        In one line naming the depths there are.

    >>> parse(None), parse("full")
    ('fast', 'full')
    """
    if depth is None:
        return DEFAULT
    if depth not in DEPTHS:
        raise ParameterError(f"--verify {depth}: choose {', '.join(DEPTHS)}")
    return depth


def checked(depth: str) -> str:
    """``depth`` where a check is about to run: one of :data:`CHECKED`.

    Raises
    ------
    ValueError
        For any other (``off`` runs no check: the caller should not have asked).
    """
    if depth not in CHECKED:
        raise ValueError(f"depth {depth!r}: choose one of {', '.join(CHECKED)}")
    return depth
