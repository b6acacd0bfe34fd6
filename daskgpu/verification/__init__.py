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

See ``docs/verification.md``.
"""

from daskgpu.toolkit.workload import Mutation, Verification
from daskgpu.verification.bounds import (
    FALSE_ALARM,
    chi_square_log_tail,
    hoeffding,
    rounding,
    sigmas,
    tolerance,
    unit_roundoff,
)
from daskgpu.verification.certificates import (
    cell_totals,
    exact_total,
    fingerprint,
    fingerprint_weights,
    parts_add_up,
)
from daskgpu.verification.declared import Check, Unreadable
from daskgpu.verification.depths import CHECKED, DEFAULT, DEPTHS
from daskgpu.verification.plans import Cells, Grid, Plan
from daskgpu.verification.probes import compare_probes
from daskgpu.verification.sampling import CONFIDENCE, FRACTION, Sampler, detection, sample_size
from daskgpu.verification.verdict import LISTED, Verdict, differences

__all__ = [
    "CHECKED", "CONFIDENCE", "DEFAULT", "DEPTHS", "FALSE_ALARM", "FRACTION", "LISTED", "Cells",
    "Check", "Grid", "Mutation", "Plan", "Sampler", "Unreadable", "Verdict", "Verification",
    "cell_totals", "chi_square_log_tail", "compare_probes", "detection", "differences",
    "exact_total", "fingerprint", "fingerprint_weights", "hoeffding", "parts_add_up",
    "rounding", "sample_size", "sigmas", "tolerance", "unit_roundoff",
]
