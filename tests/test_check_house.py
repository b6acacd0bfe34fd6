"""Checks written once: every built-in's check is declared on daskgpu.verification and holds
only its own mathematics.

The rules a test walks: the same check files for the same jobs in every pipeline; the check is
a declared ``Check`` (one default depth, ``fast``); no check file defines what the toolkit holds
once (a sampler, seeds of its own, tolerance or false-alarm constants, problem-list limits,
verdict text); no module of the library or the pipelines imports another's private names; and
the check code stays within its line budget.
"""

from __future__ import annotations

import ast
import inspect

import pytest
from conftest import ROOT

from daskgpu.toolkit import registry
from daskgpu.verification import Check
from pipelines import BUILTIN

#: Every built-in pipeline, by its package's name.
DECLARED = tuple(sorted(module.split(".")[1] for module in BUILTIN.values()))
#: All check code together, and one pipeline's, in lines at most (9,014 and 1,969 before the
#: checks were declared on the toolkit).
TOTAL_LINES, PIPELINE_LINES = 6_500, 1_200
#: Pipelines allowed more: train's check also replays Adam and draws epochs' batches again,
#: reads arrays in memory as files, and at fast replays Adam's last step and sampled weights.
PIPELINE_BUDGETS = {"train": 1_340}
#: check.py declares the check; check_mutations.py the wrong results it must catch; the rest,
#: where a pipeline has them: fast-only and full-only steps, and independent recomputations.
REQUIRED = {"check.py", "check_mutations.py"}
OPTIONAL = {"check_fast.py", "check_full.py", "check_replay.py"}
#: Module-level names that restate what daskgpu.verification holds once.
TOOLKIT_NAMES = {"FALSE_ALARM", "EPS", "EPS64", "LAMBDA", "MAX_LISTED", "LISTED", "SHOWN",
                 "SAFETY", "TINY", "SIGMAS", "RTOL", "FRACTION", "CONFIDENCE", "FAST_FRACTION",
                 "FAST_CONFIDENCE", "TOLERANCE_SE", "SAMPLE_SHARE", "SAMPLE_MIN", "SAMPLE_MAX",
                 "SAMPLE_TAG", "PROBE_KEY"}
#: Calls that make a sampler, a seed stream, a tolerance or a verdict of a check's own.
TOOLKIT_CALLS = {("random", "default_rng"), ("random", "SeedSequence"), ("random", "PCG64"),
                 ("random", "Generator"), ("np", "finfo"), ("spot_checks", "sample_size"),
                 ("spot_checks", "seeded_sample")}


def _check_files(name: str):
    return sorted((ROOT / "pipelines" / name).glob("check*.py"))


@pytest.mark.parametrize("name", DECLARED)
def test_the_same_check_files_for_the_same_jobs(name):
    files = {p.name for p in _check_files(name)}
    assert REQUIRED <= files, sorted(REQUIRED - files)
    assert files <= REQUIRED | OPTIONAL, sorted(files - REQUIRED - OPTIONAL)


@pytest.mark.parametrize("name", DECLARED)
def test_the_check_is_declared_with_one_default_depth(name):
    spec = registry.get(f"{name}-pipeline")
    assert isinstance(spec.verify, Check), type(spec.verify)
    assert spec.mutations and spec.mutations == tuple(spec.verify.mutations)
    depth = inspect.signature(spec.verify).parameters["depth"].default
    assert depth == "fast"


def _restated(path) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) else [])
        for target in targets:
            if isinstance(target, ast.Name) and (target.id in TOOLKIT_NAMES
                                                 or target.id.endswith("_RTOL")):
                found.append(f"{path.name}:{node.lineno} defines {target.id}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            owner = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if (owner, node.func.attr) in TOOLKIT_CALLS:
                found.append(f"{path.name}:{node.lineno} calls {owner}.{node.func.attr}")
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Verification":
            found.append(f"{path.name}:{node.lineno} makes its own Verification")
        if isinstance(node, ast.ImportFrom) and node.module in ("daskgpu.toolkit.spot_checks",
                                                                 "daskgpu.toolkit.checks"):
            found.append(f"{path.name}:{node.lineno} imports {node.module}")
    return found


@pytest.mark.parametrize("name", DECLARED)
def test_a_check_restates_nothing_the_toolkit_holds(name):
    restated = [line for path in _check_files(name) for line in _restated(path)]
    assert not restated, restated


def test_no_module_imports_another_modules_private_names():
    imported = []
    for folder in ("daskgpu", "pipelines"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom):
                    imported += [f"{path.relative_to(ROOT)}:{node.lineno} {node.module}."
                                 f"{a.name}" for a in node.names
                                 if a.name.startswith("_") and not a.name.startswith("__")]
    assert imported == []


def test_the_check_code_stays_within_its_budget():
    lines = {name: sum(p.read_text().count("\n") for p in _check_files(name))
             for name in DECLARED}
    assert len(lines) == 10 and sum(lines.values()) <= TOTAL_LINES, lines
    assert all(n <= PIPELINE_BUDGETS.get(name, PIPELINE_LINES) for name, n in lines.items()), lines
