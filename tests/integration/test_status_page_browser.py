"""The status page in a real headless browser (Debian's chromium + selenium).

Loads a node's page, sees every node and a queue created after the page
loaded, kill -9s another node and sees it shown as down within 10 s, all
without a reload. RAFTQ_SCREENSHOT_DIR=dir keeps the screenshots there.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raft_queue.testing.cluster import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.browser, pytest.mark.slow]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
if not (CHROMIUM and CHROMEDRIVER):
    pytest.skip(
        "needs Debian's chromium and chromium-driver (make setup installs them)",
        allow_module_level=True,
    )
webdriver = pytest.importorskip("selenium.webdriver")


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage", "--window-size=1400,1000",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):  # fmt: skip
        options.add_argument(arg)
    service = webdriver.ChromeService(executable_path=CHROMEDRIVER)
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()


def wait_until(driver: Any, what: str, check: Any, timeout_s: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if check():
            return time.monotonic() - start
        time.sleep(0.1)
    page = driver.execute_script("return document.querySelector('main').innerText;")
    raise AssertionError(f"page did not show {what} within {timeout_s} s:\n{page}")


def node_status(driver: Any, node_id: str) -> str:
    return attr(driver, f'tr[data-node="{node_id}"]', "data-status")


def attr(driver: Any, selector: str, name: str) -> str:
    """An attribute of the first match, read in one script run: the page redraws
    its rows every poll, so an element found in one call may be gone by the next."""
    script = (
        "const r = document.querySelector(arguments[0]);"
        " return r ? r.getAttribute(arguments[1]) : '';"
    )
    return str(driver.execute_script(script, selector, name) or "")


def shot(driver: Any, tmp_path: Path, name: str) -> None:
    target = Path(os.environ.get("RAFTQ_SCREENSHOT_DIR", tmp_path))
    target.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(target / name))


def test_status_page_shows_nodes_new_queues_and_a_killed_node(tmp_path: Path, browser: Any) -> None:
    cluster = LocalCluster(tmp_path / "cluster", nodes=3)
    cluster.start()
    try:
        cluster.wait_ready(60)
        client = cluster.client()
        client.create_queue("orders", partitions=2)
        browser.get(cluster.metrics_urls[0] + "/")
        # Auth is on: the page asks for the admin token first (a login form
        # that sets a session cookie), then shows the cluster.
        field = browser.find_element("name", "token")
        field.send_keys(cluster.token)
        field.submit()
        ids = ("n1", "n2", "n3")
        wait_until(browser, "three nodes up",
                   lambda: all(node_status(browser, n) == "up" for n in ids), 15)  # fmt: skip
        browser.execute_script("window.__raftqLoaded = true;")  # gone if the page reloads

        client.create_queue("created-after-load", partitions=3)
        for k in range(5):
            client.send_batch("created-after-load", [b"hello %d" % i for i in range(40 + k)])
            client.send_batch("orders", [b"order %d" % i for i in range(10)])
            time.sleep(0.4)
        row = 'tr[data-queue="created-after-load"]'
        wait_until(browser, "the new queue", lambda: attr(browser, row, "data-queue"), 10)
        wait_until(
            browser, "the new queue's depth", lambda: attr(browser, row, "data-depth") == "210", 10
        )
        shot(browser, tmp_path, "raftq-status.png")

        cluster.kill(2)
        killed_at = time.monotonic()
        took = wait_until(browser, "n3 down", lambda: node_status(browser, "n3") == "down", 10)
        assert time.monotonic() - killed_at <= 10
        assert browser.execute_script("return window.__raftqLoaded === true;")  # no reload
        # n1 and n2 stay up; if n3 led the metadata group they are "not-ready"
        # (no metadata quorum) until they elect a new leader, about a second.
        wait_until(browser, "n1 and n2 up", lambda: all(
            node_status(browser, n) == "up" for n in ("n1", "n2")), 10)  # fmt: skip
        assert node_status(browser, "n3") == "down" and browser.execute_script(
            "return window.__raftqLoaded === true;")  # fmt: skip
        shot(browser, tmp_path, "raftq-status-node-down.png")
        print(f"n3 shown down {took:.1f} s after kill -9")
    finally:
        cluster.stop()
