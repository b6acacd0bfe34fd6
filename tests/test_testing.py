"""``daskgpu.testing.check_pipeline``: a plugin author's test that a check passes and can fail.

Each test defines a tiny pipeline (the sum of an n x n array of ones, which must be n²) with
a check that is right, or wrong in one way, and runs ``check_pipeline`` on the shared CPU
cluster: a right check passes; each wrong one is refused in one line saying what is wrong.
"""

from __future__ import annotations

import re

import dask.array as da
import pytest

import daskgpu
from daskgpu.testing import CheckReport, check_pipeline, compute_as_a_run

N = 40
OFF_BY_ONE = daskgpu.Mutation("sum off by one", lambda raw: raw + 1, r"sum \S+ != n²")
DOUBLED = daskgpu.Mutation("sum doubled", lambda raw: raw * 2, r"sum \S+ != n²")


def _detail(raw, n: int) -> daskgpu.Verification:
    ok = raw == n * n
    return daskgpu.Verification(ok, f"sum {int(raw)} {'=' if ok else '!='} n² = {n * n}")


def right_check(workload, raw, depth):
    """fast: against the closed form; full: against the ones summed again on the cluster."""
    n = workload.resolved["size"]
    if depth == "full":
        again = da.ones((n, n), chunks=(n // 4, n)).sum().compute()
        if again != n * n:
            return daskgpu.Verification(False, f"ones summed again: {again} != n²")
    return _detail(raw, n)


@pytest.fixture
def ones_pipeline():
    """``ones_pipeline(name, verify, mutations)`` registers a tiny pipeline for one test."""
    from daskgpu.toolkit import registry

    names = []

    def register(name, verify, mutations=(OFF_BY_ONE, DOUBLED), in_a_dict=False):
        @daskgpu.pipeline(name, "Sum of an n x n array of ones", (
            daskgpu.Param("size", daskgpu.positive_int, 100, "Side n of the array.", "N"),
        ), verify, mutations=mutations)
        def prepare(resolved):
            n = resolved["size"]
            total = da.ones((n, n), chunks=(n // 4, n)).sum()
            return daskgpu.Workload(collection={"sum": total} if in_a_dict else total,
                                    elements=n * n, nbytes=8 * n * n, bytes_are="generated")

        names.append(name)
        return prepare

    yield register
    for name in names:  # the other tests of this process list the pipelines
        registry._REGISTRY.pop(name, None)


def _refused(session, name, *fragments, **kwargs) -> str:
    """check_pipeline's one-line AssertionError, which names the pipeline and ``fragments``."""
    with pytest.raises(AssertionError) as info:
        check_pipeline(name, session=session, size=N, **kwargs)
    message = str(info.value)
    assert "\n" not in message and message.startswith(name), message
    for fragment in fragments:
        assert re.search(fragment, message), (fragment, message)
    return message


def test_a_right_check_passes_at_both_depths_and_reports_what_it_checked(cpu_client,
                                                                          ones_pipeline):
    ones_pipeline("test-ones-right", right_check)
    report = check_pipeline("test-ones-right", session=cpu_client, size=N)
    assert isinstance(report, CheckReport)
    assert report.depths == ("fast", "full") and report.params["size"] == N
    assert report.verified == {"fast": f"sum {N * N} = n² = {N * N}",
                               "full": f"sum {N * N} = n² = {N * N}"}
    assert [(c.mutation, c.depth) for c in report.caught] == [
        ("sum off by one", "fast"), ("sum doubled", "fast"),
        ("sum off by one", "full"), ("sum doubled", "full")]
    assert str(report) == ("test-ones-right verifies at fast and full; 2 mutations caught at "
                           "each: sum off by one, sum doubled")


def test_the_pipeline_object_one_depth_and_a_plain_client_may_be_given(cpu_client, ones_pipeline):
    spec = ones_pipeline("test-ones-object", right_check)
    report = check_pipeline(spec, session=cpu_client, depths=("fast",), size=N)
    assert report.depths == ("fast",) and {c.depth for c in report.caught} == {"fast"}
    workload, raw = compute_as_a_run(spec, cpu_client.client, size=N)  # a plain Client too
    assert raw == N * N and workload.resolved["size"] == N


def test_a_check_without_depths_runs_once_as_full(cpu_client, ones_pipeline):
    ones_pipeline("test-ones-depthless",
                  lambda workload, raw: _detail(raw, workload.resolved["size"]))
    report = check_pipeline("test-ones-depthless", session=cpu_client, size=N)
    assert report.depths == ("full",) and len(report.caught) == 2


def test_a_check_that_cannot_fail_is_refused_naming_the_mutations_that_escape(cpu_client,
                                                                              ones_pipeline):
    ones_pipeline("test-ones-always-ok",
                  lambda workload, raw, depth: daskgpu.Verification(True, "looks fine"))
    _refused(cpu_client, "test-ones-always-ok", "4 of 4 mutation checks failed",
             "at fast, mutation 'sum off by one' still verifies: looks fine",
             "at full, mutation 'sum doubled' still verifies")


def test_a_check_that_misses_one_depth_is_refused_at_that_depth(cpu_client, ones_pipeline):
    def fast_sees_nothing(workload, raw, depth):
        if depth == "fast":
            return daskgpu.Verification(True, "not looked at")
        return right_check(workload, raw, depth)

    ones_pipeline("test-ones-blind-fast", fast_sees_nothing)
    message = _refused(cpu_client, "test-ones-blind-fast", "2 of 4 mutation checks failed",
                       "at fast, mutation 'sum off by one' still verifies")
    assert "at full" not in message


def test_a_mutation_that_alters_its_argument_alters_a_copy(cpu_client, ones_pipeline):
    """The result a mutation is given is a copy: altered in place, the next check is unspoilt."""
    def in_place(raw):
        raw["sum"] += 1
        return raw

    def check_dict(workload, raw, depth):
        return right_check(workload, raw["sum"], depth)

    ones_pipeline("test-ones-in-place", check_dict, in_a_dict=True,
                  mutations=(daskgpu.Mutation("sum +1 in place", in_place, r"sum \S+ != n²"),))
    report = check_pipeline("test-ones-in-place", session=cpu_client, size=N)
    assert len(report.caught) == 2


def test_a_pipeline_without_mutations_is_refused_before_it_computes(ones_pipeline):
    ones_pipeline("test-ones-no-mutations", right_check, mutations=())
    # no session is started for it: the refusal comes first (an unusable session proves it)
    _refused("not a session", "test-ones-no-mutations", "cannot be shown to fail",
             r"declare .*mutations=")


def test_a_failure_that_does_not_name_what_disagreed_is_refused(cpu_client, ones_pipeline):
    ones_pipeline("test-ones-vague", lambda workload, raw, depth: daskgpu.Verification(
        raw == workload.resolved["size"] ** 2, "something is wrong"))
    _refused(cpu_client, "test-ones-vague",
             r"mutation 'sum off by one' fails without naming what disagreed \(the detail must "
             r"match 'sum \\\\S\+ != n²'\): something is wrong")


def test_an_unaltered_result_that_does_not_verify_is_refused(cpu_client, ones_pipeline):
    ones_pipeline("test-ones-wrong-expectation", lambda workload, raw, depth: _detail(raw, N + 1))
    _refused(cpu_client, "test-ones-wrong-expectation",
             f"at fast: the unaltered result does not verify: sum {N * N} != n² = {(N + 1) ** 2}")


def test_a_check_that_keeps_state_is_refused(cpu_client, ones_pipeline):
    failures = []

    def remembers_failures(workload, raw, depth):
        check = right_check(workload, raw, depth)
        failures.extend([] if check.ok else [check])
        return daskgpu.Verification(not failures, check.detail)

    ones_pipeline("test-ones-stateful", remembers_failures)
    _refused(cpu_client, "test-ones-stateful", "at fast: the unaltered result verified before "
             "the mutations, not after them")


def test_a_detail_of_several_lines_is_refused(cpu_client, ones_pipeline):
    def two_lines(workload, raw, depth):
        check = right_check(workload, raw, depth)
        return daskgpu.Verification(check.ok, check.detail.replace(" = n²", "\n= n²"))

    ones_pipeline("test-ones-two-lines", two_lines)
    _refused(cpu_client, "test-ones-two-lines", "at fast: the verification detail is not one line")


def test_a_check_that_crashes_on_an_altered_result_is_refused(cpu_client, ones_pipeline):
    def crashes(workload, raw, depth):
        if raw != workload.resolved["size"] ** 2:
            raise KeyError("no such block")
        return right_check(workload, raw, depth)

    ones_pipeline("test-ones-crashes", crashes)
    _refused(cpu_client, "test-ones-crashes", "result altered by mutation 'sum off by one' raised",
             "no such block")


def test_skipped_mutations_must_be_declared_and_leave_one(cpu_client, ones_pipeline):
    ones_pipeline("test-ones-skips", right_check)
    report = check_pipeline("test-ones-skips", session=cpu_client,
                            skip_mutations=["sum doubled"], size=N)
    assert report.skipped == ("sum doubled",) and {c.mutation for c in report.caught} == {
        "sum off by one"}
    with pytest.raises(ValueError, match="declares no mutation named 'sum tripled'"):
        check_pipeline("test-ones-skips", session=cpu_client, skip_mutations=["sum tripled"])
    _refused(cpu_client, "test-ones-skips", "no mutations to apply",
             skip_mutations=["sum doubled", "sum off by one"])
    with pytest.raises(ValueError, match="choose from fast, full"):
        check_pipeline("test-ones-skips", session=cpu_client, depths=("off",))


def test_a_bad_parameter_is_one_line_naming_the_keyword(cpu_client, ones_pipeline):
    ones_pipeline("test-ones-bad-size", right_check)
    with pytest.raises(daskgpu.ParameterError, match="size=0"):
        check_pipeline("test-ones-bad-size", session=cpu_client, size=0)


def test_without_a_session_it_starts_a_small_cpu_cluster_and_closes_it(ones_pipeline):
    import time

    import psutil

    ones_pipeline("test-ones-own-cluster", right_check)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    report = check_pipeline("test-ones-own-cluster", size=N)
    assert len(report.caught) == 4
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # its scheduler's and workers' processes end
        started = {p.pid for p in psutil.Process().children(recursive=True)} - before
        if not started:
            break
        time.sleep(0.1)
    assert not started, started
