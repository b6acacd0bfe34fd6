"""What every check shares, written once: the verification toolkit.

A pipeline's check holds only its own mathematics; the rest is here.

- :mod:`~daskgpu.verification.depths`: ``fast``, ``full``, ``off``; the default and the parser.
- :mod:`~daskgpu.verification.declared`: :class:`Check`, a pipeline's steps at each depth.
- :mod:`~daskgpu.verification.verdict`: :class:`Verdict`, the problems and facts a check notes,
  rendered the same way everywhere; :func:`differences`, where values first disagree.
- :mod:`~daskgpu.verification.sampling`: :class:`Sampler`, a check's seeded choices apart from
  the run's streams; sample sizes and what they establish.
- :mod:`~daskgpu.verification.plans`: :class:`Plan`, the parts a depth recomputes;
  :class:`Grid` and :class:`Cells`, the geometry of blocks and cells.
- :mod:`~daskgpu.verification.certificates`: parts that add up from their cells; fingerprints.
- :mod:`~daskgpu.verification.probes`: Freivalds-style random probes of products.
- :mod:`~daskgpu.verification.bounds`: one rule for rounding tolerances; statistical bounds.
- :mod:`~daskgpu.verification.replay`: recomputing a part on the workers, from the data's
  definition or the input file.

See ``docs/verification.md``. Importing this package loads nothing: each name loads its module on
first use (the command line reads :mod:`~daskgpu.verification.depths` without NumPy).
"""

from __future__ import annotations

import importlib

# name -> module, imported on first access.
_LAZY = {
    "Mutation": "daskgpu.toolkit.workload",
    "Verification": "daskgpu.toolkit.workload",
    **dict.fromkeys(("FALSE_ALARM", "chi_square_log_tail", "hoeffding", "rounding", "sigmas",
                     "tolerance", "unit_roundoff"), "daskgpu.verification.bounds"),
    **dict.fromkeys(("cell_totals", "exact_total", "fingerprint", "fingerprint_weights",
                     "parts_add_up", "sums_by_cell"), "daskgpu.verification.certificates"),
    **dict.fromkeys(("Check", "Unreadable"), "daskgpu.verification.declared"),
    **dict.fromkeys(("CHECKED", "DEFAULT", "DEPTHS"), "daskgpu.verification.depths"),
    **dict.fromkeys(("Cells", "Grid", "Plan"), "daskgpu.verification.plans"),
    "compare_probes": "daskgpu.verification.probes",
    **dict.fromkeys(("CONFIDENCE", "FRACTION", "Sampler", "detection", "run_seed",
                     "sample_size"),
                    "daskgpu.verification.sampling"),
    **dict.fromkeys(("LISTED", "Verdict", "apart", "differences"),
                    "daskgpu.verification.verdict"),
}
#: The modules, by name (``from daskgpu.verification import replay``).
_MODULES = ("bounds", "certificates", "declared", "depths", "plans", "probes", "replay",
            "sampling", "verdict")


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name in _MODULES:
        value = importlib.import_module(f"daskgpu.verification.{name}")
    else:
        raise AttributeError(f"module 'daskgpu.verification' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | set(_MODULES))


__all__ = sorted(_LAZY)
