"""threshold-count checks its own answer: it verifies and catches its mutations at both depths.

Run it from this directory after ``pip install -e .`` (the workers import the plugin as any
installed package): ``pytest tests``.
"""

import threshold_count.pipeline  # noqa: F401  (registers "threshold-count")

from daskgpu.testing import check_pipeline


def test_threshold_count_checks_its_answer():
    """The unaltered result verifies at fast and full; every tenth row changed is caught."""
    report = check_pipeline("threshold-count", shape="600,400", chunks="100,200", seed=3)
    assert report.depths == ("fast", "full")
    assert report.params["threshold"] == 0.5
    assert {c.mutation for c in report.caught} == {"every tenth row changed"}
