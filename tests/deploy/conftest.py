"""Fixtures for the deploy tests: a real network-namespace lab (skipped without root)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nictune.deploy.lab import Lab, LabUnavailable, check_lab_possible, lab_hosts


def lab_unavailable_reason() -> str | None:
    """Why no lab can be built here (None when it can)."""
    try:
        check_lab_possible()
    except LabUnavailable as exc:
        return str(exc)
    return None


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A 3-host lab (sender, rx1, rx2) shared by one test module, torn down after it."""
    reason = lab_unavailable_reason()
    if reason:
        pytest.skip(reason)
    with lab_hosts(tmp_path_factory.mktemp("deploy-lab"), hosts=3) as made:
        yield made
