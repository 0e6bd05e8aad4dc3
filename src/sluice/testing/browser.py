"""Headless Chromium for the console's tests, through Debian's ``chromium-driver``
(``make setup`` installs both): Selenium drives the real browser, no download."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from sluice.errors import SluiceError

INSTALL = "apt-get install -y chromium chromium-driver (make setup does)"


def find_chromium() -> tuple[str, str]:
    """``(browser, driver)`` paths, or ``SluiceError`` saying how to install them."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or (
        "/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists() else None
    )
    if browser is None or driver is None:
        raise SluiceError(f"headless Chromium or its driver is missing: {INSTALL}")
    return browser, driver


def start_chromium(width: int = 1400, height: int = 1100) -> Any:
    """A headless Chromium WebDriver (``quit()`` it)."""
    from selenium import webdriver  # noqa: PLC0415 - a test dependency only
    from selenium.webdriver.chrome.service import Service  # noqa: PLC0415

    browser, driver = find_chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in (
        "--headless=new",
        "--no-sandbox",  # root in CI containers
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
    ):
        options.add_argument(arg)
    os.environ.setdefault("SE_AVOID_STATS", "true")
    return webdriver.Chrome(service=Service(driver), options=options)
