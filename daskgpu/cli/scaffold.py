"""``new-pipeline NAME``: a plugin package to start from, which installs, runs and tests as written.

The package holds a ``pyproject.toml`` declaring the ``daskgpu.pipelines`` entry point, the
pipeline module and a test that calls :func:`daskgpu.testing.check_pipeline`. The module is a
:func:`daskgpu.array_pipeline` with a ``numba.njit`` kernel and a check that recomputes seeded
row blocks by plain NumPy, or (``--table``) the table example ``examples/top_values``: a
:func:`daskgpu.table_pipeline` keeping each key's largest values, with a check that recomputes
seeded keys by NumPy. Nothing is written unless all of it can be.
"""

from __future__ import annotations

import os
import re

from daskgpu.errors import ParameterError

NAME = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")

PYPROJECT = '''[build-system]
requires = ["setuptools>=68", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "{package_dashed}"
version = "0.1.0"
description = "{name}: a daskgpu pipeline"
requires-python = ">=3.11"
dependencies = ["daskgpu", {dependencies}]

[project.entry-points."daskgpu.pipelines"]
{package} = "{package}.pipeline"

[tool.setuptools]
packages = ["{package}"]
'''

PIPELINE = '''"""{name}: how many values of each row lie above a threshold (make it yours)."""

import numba
import numpy as np

import daskgpu


@numba.njit
def kernel(block, threshold):
    """Per-row counts of one block's values above ``threshold`` (NumPy blocks: CPU workers)."""
    out = np.zeros(block.shape[0], np.int64)
    for i in range(block.shape[0]):
        for j in range(block.shape[1]):
            out[i] += block[i, j] > threshold
    return out


def reference(rows, threshold):
    """The same answer by plain NumPy, sharing no code with the kernel: the check's path."""
    return (rows > threshold).sum(axis=1)


@daskgpu.array_pipeline(
    "{name}", "Values above a threshold, per row",
    params=[daskgpu.Param("threshold", daskgpu.finite_float, 0.5, "Count values above this.")],
    check=daskgpu.checks.rows_recomputed(reference))
def {function}(data, threshold):
    """Every row block through the kernel: one count per row."""
    return data.map_blocks(kernel, threshold, drop_axis=1, dtype=np.int64, meta=np.empty(0, int))
'''

TABLE_PIPELINE = '''\
"""{name}: the k largest values of each key, over a Parquet or CSV table or random rows."""

import numpy as np
import pandas as pd

import daskgpu


def top(frame, k):
    """Each key's k largest values in ``frame`` (pandas or cuDF), by key, largest first."""
    ranked = frame.sort_values(["key", "value"], ascending=[True, False])
    return ranked.groupby("key").head(k).reset_index(drop=True)


def reference(rows, k):
    """One key's k largest values by NumPy alone: the check's independent path."""
    return pd.DataFrame({{"value": np.sort(rows["value"].to_numpy())[::-1][:k]}})


@daskgpu.table_pipeline(
    "{name}", "The k largest values of each key",
    columns={{"key": daskgpu.Column.integers(0, 1000), "value": daskgpu.Column.uniform()}},
    params=[daskgpu.Param("k", daskgpu.positive_int, 3, "Values kept per key.")],
    check=daskgpu.checks.groups_recomputed(reference, by="key"),
    mutations=[daskgpu.every_tenth_group_changed("key")])
def {function}(frame, k):
    """Top k per key in every partition, then of those, until one table is left."""
    return frame.reduction(top, top, chunk_kwargs={{"k": k}}, aggregate_kwargs={{"k": k}},
                           combine=top, combine_kwargs={{"k": k}}, meta=frame._meta)
'''

TEST = '''"""{name} checks its own answer: it verifies and catches its mutations at both depths.

After ``pip install -e .`` (the workers import the pipeline as an installed package): ``pytest``.
"""

import {package}.pipeline  # noqa: F401  (registers "{name}")

from daskgpu.testing import check_pipeline


def test_{function}_checks_its_answer():
    """It verifies at fast and full, and every declared mutation is caught at both."""
    report = check_pipeline("{name}", {small})
    assert report.depths == ("fast", "full") and report.caught
'''

#: Small parameters for the generated test: several blocks or partitions, seconds to run.
SMALL = {False: 'shape="600,400", chunks="100,200", seed=3',
         True: "rows=20_000, partitions=4, seed=3"}


def files(name: str, table: bool = False) -> dict[str, str]:
    """``{relative path: text}`` of the package for pipeline ``name``.

    An array pipeline (a ``numba.njit`` kernel per row block), or with ``table`` a table
    pipeline (each key's largest values, over random rows or a Parquet or CSV input).

    Raises
    ------
    ParameterError
        A name that is not lowercase words joined by hyphens.
    """
    if not NAME.fullmatch(name):
        raise ParameterError(f"new-pipeline {name}: give lowercase letters and digits in words "
                             "joined by hyphens, starting with a letter (e.g. my-count)")
    package = name.replace("-", "_")
    fields = {"name": name, "package": package, "package_dashed": name,
              "function": package, "small": SMALL[table],
              "dependencies": '"pandas>=2.0"' if table else '"numba>=0.60", "numpy>=1.26"'}
    return {
        "pyproject.toml": PYPROJECT.format(**fields),
        f"{package}/__init__.py": f'"""The {name} pipeline (registered by its module '
                                  f'``pipeline``)."""\n',
        f"{package}/pipeline.py": (TABLE_PIPELINE if table else PIPELINE).format(**fields),
        f"tests/test_{package}.py": TEST.format(**fields),
    }


def write(name: str, folder: str, table: bool = False) -> list[str]:
    """Write the package for pipeline ``name`` into the new directory ``folder``.

    ``table``: a table pipeline (see :func:`files`).

    Returns
    -------
    list of str
        The paths written.

    Raises
    ------
    ParameterError
        A bad name, or a ``folder`` that exists already (nothing is written then).
    """
    contents = files(name, table)
    if os.path.lexists(folder):
        raise ParameterError(f"new-pipeline {name}: {folder} exists; choose another --dir or "
                             "remove it")
    written = []
    for relative, text in contents.items():
        path = os.path.join(folder, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as out:
            out.write(text)
        written.append(path)
    return written
