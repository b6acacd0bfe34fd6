"""What join-pipeline and its independent check share: the group count.

The aggregate groups joined rows by ``key % GROUPS``: the run (:mod:`pipelines.join.tasks`)
groups by it, the reported value (``present`` in :mod:`pipelines.join.pipeline`) lists its
groups, and the check (:mod:`pipelines.join.check`) totals its lookup by it, so neither the run
nor the check imports the other.
"""

from __future__ import annotations

GROUPS = 16  # the aggregate groups by key % GROUPS
