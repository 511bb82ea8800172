"""The front-end contract (``leveret.testing.conformance``) over every front end: each check
of ``check_front_end`` is one test per driver, so a failure names both."""

from __future__ import annotations

import pytest

from leveret.testing.conformance import CHECKS, DRIVERS, Driver


@pytest.mark.parametrize("driver", DRIVERS, ids=[d.name for d in DRIVERS])
@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__.removeprefix("check_") for c in CHECKS])
def test_front_end_contract(driver: Driver, check: object) -> None:
    assert callable(check)
    check(driver)
