"""The browser the page tests open pages in (tools/browser.py: the system's headless Chromium
through chromedriver): a test where Chromium or chromedriver is missing is skipped, saying which
and how to install it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tools import browser as _browser
from tools.browser import Browser, BrowserMissing, Image, PageView

__all__ = ["Browser", "Image", "PageView", "binaries", "chromium"]


def binaries() -> tuple[str, str]:
    """The Chromium and chromedriver to run; skips the test when either is missing."""
    try:
        return _browser.binaries()
    except BrowserMissing as missing:
        pytest.skip(str(missing))


@contextmanager
def chromium() -> Iterator[Browser]:
    """One headless Chromium for the test, quit on the way out; skips the test without one."""
    binaries()
    with _browser.chromium() as browser:
        yield browser
