"""The web UI in a real browser: Debian's chromium driven by Playwright (never a downloaded
browser), against a broker process. Log in, see a queue fill up, get a message, publish
one, create a user, add a policy, download the definitions."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pika
import pytest
import requests

from tests.integration.mgmt_support import AUTH, MgmtBroker, start_mgmt_broker

if TYPE_CHECKING:
    from collections.abc import Iterator

# Left out of the compiled pass (scripts/test): the management web UI in a browser.
pytestmark = [pytest.mark.leveret_only, pytest.mark.pure_only]

CHROMIUM = os.environ.get("LEVERET_TEST_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
TIMEOUT_MS = 10_000


@pytest.fixture(scope="module")
def mgmt() -> Iterator[MgmtBroker]:
    m = start_mgmt_broker()
    try:
        yield m
    finally:
        m.broker.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not shutil.which(CHROMIUM):
        pytest.skip(f"no chromium at {CHROMIUM} (scripts/test installs Debian's chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser: Any, mgmt: MgmtBroker) -> Iterator[Any]:
    context = browser.new_context(accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(mgmt.url + "/")
    try:
        yield page
    finally:
        context.close()
    assert not errors, errors


def _login(page: Any, user: str = "guest", password: str = "guest") -> None:
    page.fill("#login-username", user)
    page.fill("#login-password", password)
    page.click("#login-submit")


def test_login_refused_then_accepted(page: Any) -> None:
    _login(page, "guest", "wrong")
    page.wait_for_selector("#login-error:not([hidden])")
    assert page.inner_text("#login-error") == "Login failed"
    _login(page)
    page.wait_for_selector("#totals")
    assert page.inner_text("#who-name") == "guest"
    page.wait_for_function("document.querySelector('#chart-rates') !== null")


def test_queue_fills_up_get_and_publish(page: Any, mgmt: MgmtBroker) -> None:
    _login(page)
    page.wait_for_selector("#totals")
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", mgmt.broker.port))
    try:
        ch = conn.channel()
        ch.queue_declare("ui-q")
        page.click("a[data-tab=queues]")
        page.wait_for_selector("#queues-table a[data-queue='ui-q']")
        for i in range(7):
            ch.basic_publish("", "ui-q", f"message {i}".encode())
        # The list refreshes on its own (every 5 s) and shows the queue filled up.
        page.wait_for_function(
            """() => [...document.querySelectorAll('#queues-table tr')].some(
                 (tr) => tr.querySelector("a[data-queue='ui-q']")
                         && tr.querySelector('td.total').textContent === '7')"""
        )
        page.click("#queues-table a[data-queue='ui-q']")
        page.wait_for_selector("#queue-title")
        assert page.inner_text("#q-total") == "7"
        page.select_option("#get-ackmode", "ack_requeue_false")
        page.click("#get-submit")
        page.wait_for_selector("#get-result pre.payload")
        assert page.inner_text("#get-result pre.payload") == "message 0"
        page.wait_for_function("document.querySelector('#q-total').textContent === '6'")
        page.fill("#publish-payload", "typed in the browser")
        page.click("#publish-submit")
        page.wait_for_function("document.querySelector('#q-total').textContent === '7'")
        bodies = []
        for _ in range(7):
            _method, _props, body = ch.basic_get("ui-q", auto_ack=True)
            bodies.append(body)
        assert bodies[-1] == b"typed in the browser"
        assert bodies[0] == b"message 1"
    finally:
        conn.close()


def test_create_user_and_policy_then_download_definitions(page: Any, mgmt: MgmtBroker) -> None:
    _login(page)
    page.wait_for_selector("#totals")
    page.click("a[data-tab=admin]")
    page.wait_for_selector("#users-table")
    page.fill("#add-user-name", "ui-user")
    page.fill("#add-user-password", "ui-pass")
    page.fill("#add-user-tags", "management")
    page.click("#add-user-submit")
    page.wait_for_selector("#users-table td:text-is('ui-user')")
    user = requests.get(mgmt.api("users/ui-user"), auth=AUTH, timeout=10).json()
    assert user["tags"] == ["management"]
    page.fill("#add-policy input[name=name]", "ui-policy")
    page.fill("#add-policy input[name=pattern]", "^ui-")
    page.select_option("#add-policy select[name=apply_to]", "queues")
    page.click("#add-policy button[type=submit]")
    page.wait_for_selector("#policies-table td:text-is('ui-policy')")
    policy = requests.get(mgmt.api("policies/%2F/ui-policy"), auth=AUTH, timeout=10).json()
    assert policy["definition"] == {"max-length": 1000}
    page.click("a[data-tab=overview]")
    page.wait_for_selector("#defs-download")
    with page.expect_download() as download_info:
        page.click("#defs-download")
    path = download_info.value.path()
    text = Path(path).read_text(encoding="utf-8")
    assert '"ui-user"' in text
    assert '"ui-policy"' in text
    # The new user logs in to the UI too.
    page.click("#logout")
    _login(page, "ui-user", "ui-pass")
    page.wait_for_selector("#totals")
    assert page.inner_text("#who-name") == "ui-user"


def test_delayed_exchange_page_and_browse_move_on_a_queue(page: Any, mgmt: MgmtBroker) -> None:
    _login(page)
    page.wait_for_selector("#totals")
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", mgmt.broker.port))
    try:
        ch = conn.channel()
        ch.exchange_declare(
            "ui-delayed", "x-delayed-message", arguments={"x-delayed-type": "direct"}
        )
        for i in range(3):
            props = pika.BasicProperties(headers={"x-delay": 600_000 + i}, message_id=f"ui-{i}")
            ch.basic_publish("ui-delayed", "k", f"later {i}".encode(), props)
        ch.queue_declare("ui-browse")
        ch.queue_declare("ui-moved")
        for i in range(4):
            ch.basic_publish("", "ui-browse", f"browse {i}".encode())
        page.click("a[data-tab=exchanges]")
        page.click("#exchanges-table a[data-exchange='ui-delayed']")
        page.wait_for_selector("#exchange-title")
        assert page.inner_text("#x-delayed") == "3"
        assert page.locator("#delayed-table tr").count() == 4  # a header row and three
        page.locator("#delayed-table button[data-cancel]").first.click()
        page.wait_for_function("document.querySelector('#x-delayed').textContent === '2'")
        page.fill("#cancel-delayed input[name=message_id]", "ui-2")
        page.click("#cancel-delayed button[type=submit]")
        page.wait_for_function("document.querySelector('#x-delayed').textContent === '1'")
        left = requests.get(mgmt.api("exchanges/%2F/ui-delayed/delayed"), auth=AUTH, timeout=10)
        assert [r["properties"]["message_id"] for r in left.json()] == ["ui-1"]
        page.click("#back")
        page.click("a[data-tab=queues]")
        page.click("#queues-table a[data-queue='ui-browse']")
        page.wait_for_selector("#queue-title")
        page.fill("#browse-messages input[name=offset]", "1")
        page.fill("#browse-messages input[name=count]", "2")
        page.click("#browse-submit")
        page.wait_for_selector("#browse-result pre.payload")
        shown = page.locator("#browse-result pre.payload").all_inner_texts()
        assert shown == ["browse 1", "browse 2"]
        page.fill("#move-messages input[name=to_queue]", "ui-moved")
        page.fill("#move-messages input[name=limit]", "3")
        page.click("#move-submit")
        page.wait_for_function(
            "document.querySelector('#move-result').textContent.startsWith('Moved 3')"
        )
        moved = [ch.basic_get("ui-moved", auto_ack=True)[2] for _ in range(3)]
        assert moved == [b"browse 0", b"browse 1", b"browse 2"]
        assert ch.basic_get("ui-browse", auto_ack=True)[2] == b"browse 3"
    finally:
        conn.close()
