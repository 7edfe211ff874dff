"""The default render's own test suite passes, run as its users run it."""

import re

import pytest
from conftest import SUITES, run_in


@pytest.mark.slow
@pytest.mark.xdist_group(SUITES)
def test_default_project_test_suite_passes(default_project):
    result = run_in(
        default_project,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--durations=15",
        timeout=2400,  # a guard against a hang only: the suite took over 15 minutes on 2 cores
    )
    summary = result.stdout.strip().splitlines()[-1]
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert (
        re.search(r"\d+ passed", summary) and "failed" not in summary and "skipped" not in summary
    )
    print(result.stdout[-2500:])  # the slowest tests, for the CI log
