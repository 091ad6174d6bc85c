"""Debian's Chromium, headless, driven by selenium through the system chromedriver.

Never downloads a browser or a driver: the binary and driver paths are given explicitly
(``/usr/bin/chromium``, ``/usr/bin/chromedriver``; apt packages ``chromium chromium-driver``,
installed by scripts/test.sh), so Selenium Manager is not consulted. The network is cut twice:
Chromium gets a proxy on a closed loopback port and a host resolver that resolves nothing, and
DevTools' network emulation is switched to offline before a page is opened.

``chromium()`` is a context manager yielding a selenium WebDriver; ``artifacts_dir(name, tmp)``
is where tests save screenshots (``$LEMONPACK_TEST_ARTIFACTS/<name>`` when set, else under the
test's temporary directory).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

CHROMIUM = os.environ.get("LEMONPACK_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("LEMONPACK_CHROMEDRIVER", "/usr/bin/chromedriver")

ARGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-extensions", "--disable-default-apps", "--disable-dev-shm-usage", "--mute-audio",
    "--metrics-recording-only", "--password-store=basic", "--window-size=1280,1000",
    # no route anywhere: every non-file request fails fast
    "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
    "--host-resolver-rules=MAP * ~NOTFOUND",
)


def _fail(message: str) -> None:
    """Fail the test (``pytest.fail``), or raise RuntimeError where pytest is not installed:
    ``bench/catalogue_site.py`` uses this module from a plain install (no test extras)."""
    try:
        import pytest
    except ImportError:
        raise RuntimeError(message) from None
    pytest.fail(message)


def artifacts_dir(name: str, fallback: Path) -> Path:
    """A directory for screenshots: ``$LEMONPACK_TEST_ARTIFACTS/name`` or ``fallback/name``."""
    base = os.environ.get("LEMONPACK_TEST_ARTIFACTS")
    d = Path(base) / name if base else Path(fallback) / name
    d.mkdir(parents=True, exist_ok=True)
    return d


@contextlib.contextmanager
def chromium(*, offline: bool = True, javascript: bool = True,
             performance_log: bool = False, loopback: bool = False) -> Iterator["object"]:
    """A headless Chromium WebDriver (selenium), offline by default; quit on exit.
    ``javascript=False`` disables scripts (content setting); ``performance_log=True`` records
    DevTools network events (``driver.get_log("performance")``); ``loopback=True`` (with
    ``offline=False``) lets requests to 127.0.0.1 through and nothing else (every other host
    still goes to the closed proxy port and resolves nothing: a page served by a test server).
    Fails (never skips) when Chromium, chromedriver or selenium is missing: CI must run these."""
    for exe, pkg in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not shutil.which(exe):
            _fail(f"{exe} is missing: apt-get install -y {pkg} (or run scripts/test.sh)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ARGS:
        if loopback and a.startswith("--proxy-bypass-list="):
            continue  # loopback bypasses the dead proxy
        if loopback and a.startswith("--host-resolver-rules="):
            a += ", EXCLUDE 127.0.0.1"  # an address literal, resolved to itself
        opts.add_argument(a)
    prefs = {"browser": "ALL"}
    if performance_log:
        prefs["performance"] = "ALL"
    opts.set_capability("goog:loggingPrefs", prefs)
    if not javascript:
        opts.add_experimental_option("prefs", {"profile.managed_default_content_settings.javascript": 2})
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must not go looking for anything
    driver = webdriver.Chrome(service=Service(shutil.which(CHROMEDRIVER) or CHROMEDRIVER), options=opts)
    try:
        if offline:
            driver.execute_cdp_cmd("Network.enable", {})
            driver.execute_cdp_cmd("Network.emulateNetworkConditions", {
                "offline": True, "latency": 0, "downloadThroughput": 0, "uploadThroughput": 0})
        yield driver
    finally:
        driver.quit()
