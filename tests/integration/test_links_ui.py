"""The web UI's "Shovels & federation" page in a real browser (Debian's chromium through
Playwright, as test_management_ui.py): a shovel added from its form runs and moves
messages, is restarted and deleted from its row; an upstream is added and deleted."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import requests

from tests.integration.links_support import drain, publish, wait_for
from tests.integration.mgmt_support import AUTH
from tests.integration.test_management_ui import _login, browser, mgmt, page

if TYPE_CHECKING:
    from tests.integration.mgmt_support import MgmtBroker

__all__ = ["browser", "mgmt", "page"]  # the fixtures, shared with test_management_ui.py

# Left out of the compiled pass (scripts/test): the management web UI in a browser.
pytestmark = [pytest.mark.leveret_only, pytest.mark.pure_only]


def test_shovels_and_upstreams_from_the_page(page: Any, mgmt: MgmtBroker) -> None:
    publish(mgmt.broker.url, "ui-src", [b"one", b"two"])
    _login(page)
    page.wait_for_selector("#totals")
    page.click("a[data-tab=links]")
    page.wait_for_selector("#shovels-table")
    form = "#add-shovel"
    page.fill(f"{form} input[name=name]", "ui-shovel")
    page.fill(f"{form} input[name=src_queue]", "ui-src")
    page.fill(f"{form} input[name=dest_queue]", "ui-dest")
    page.click(f"{form} button[type=submit]")
    page.wait_for_selector("#shovels-table td:text-is('ui-shovel')")
    value = requests.get(mgmt.api("parameters/shovel/%2F/ui-shovel"), auth=AUTH, timeout=10)
    assert value.json()["value"]["src-queue"] == "ui-src"
    assert [body for body, _ in drain(mgmt.broker.url, "ui-dest", 2)] == [b"one", b"two"]
    page.wait_for_selector("#shovels-table .state-running", timeout=30_000)
    page.click("[data-restart-shovel=ui-shovel]")
    page.wait_for_selector("#status:text('Shovel restarted')")
    page.click("[data-delete-shovel=ui-shovel]")
    page.wait_for_selector("#status:text('Shovel deleted')")
    wait_for(
        "the parameter gone",
        lambda: (
            requests.get(
                mgmt.api("parameters/shovel/%2F/ui-shovel"), auth=AUTH, timeout=10
            ).status_code
            == 404
        ),
    )
    page.fill("#add-upstream input[name=name]", "ui-upstream")
    page.fill("#add-upstream input[name=uri]", "amqp://elsewhere.example")
    page.click("#add-upstream button[type=submit]")
    page.wait_for_selector("#upstreams-table td:text-is('ui-upstream')")
    page.click("[data-delete-upstream=ui-upstream]")
    page.wait_for_selector("#status:text('Upstream deleted')")
    # The page flashes the outcome, then re-reads the table.
    page.wait_for_selector("#upstreams-table td:text-is('ui-upstream')", state="detached")
