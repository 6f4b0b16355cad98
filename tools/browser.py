"""A page as a person sees it: opened in a real headless Chromium through chromedriver, on
Selenium's public API only. The tests (tests/support/browser.py) and the screenshots in the docs
(tools/screenshots.py) both use it.

`chromium()` starts one browser (the system's Chromium and chromedriver, found on the PATH or
named by the CHROMIUM and CHROMEDRIVER environment variables; Selenium Manager is never asked,
so nothing is fetched) and always quits it. `Browser.open(path)` loads a local file and returns a
`PageView`: its title, visible text, keyed facts, each figure's image as drawn, and the console's
errors. Where Chromium or chromedriver is missing, BrowserMissing says which and how to install
it."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

INSTALL = "apt-get install chromium chromium-driver"
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
WINDOW = (1280, 1024)
# Seconds a page may take to load before the test fails (a local file loads in milliseconds).
PAGE_LOAD_TIMEOUT = 30


@dataclass(frozen=True)
class Image:
    """A figure's <img> as drawn: `complete` once the browser is done with it (loaded or broken),
    its decoded size (`natural_*`, 0 when the data did not decode) and its size on the page."""

    key: str
    complete: bool
    natural_width: int
    natural_height: int
    width: float
    height: float

    @property
    def rendered(self) -> bool:
        return self.complete and self.natural_width > 0 and self.natural_height > 0


@dataclass(frozen=True)
class PageView:
    """What a person sees of a page: the console's SEVERE messages, each <figure data-key>'s
    image, each <td data-key>'s text by key, the title and the visible text."""

    title: str
    text: str
    facts: Mapping[str, str]
    images: tuple[Image, ...]
    console_errors: tuple[str, ...]

    def image(self, key: str) -> Image:
        [found] = [image for image in self.images if image.key == key]
        return found


class BrowserMissing(RuntimeError):
    """Chromium or chromedriver is not installed: the message says which, and how to install it."""


def binaries() -> tuple[str, str]:
    """The Chromium and chromedriver to run (CHROMIUM, CHROMEDRIVER, else the PATH); raises
    BrowserMissing when either is missing."""
    missing = []
    browser = _find("CHROMIUM", BROWSERS)
    if browser is None:
        missing.append("Chromium (" + ", ".join(BROWSERS) + " on the PATH, or CHROMIUM)")
    driver = _find("CHROMEDRIVER", ("chromedriver",))
    if driver is None:
        missing.append("chromedriver (on the PATH, or CHROMEDRIVER)")
    if browser is None or driver is None:
        raise BrowserMissing(
            f"no {' and no '.join(missing)}: install them with `{INSTALL}` (./scripts/setup does as root)"
        )
    return browser, driver


def _find(variable: str, names: tuple[str, ...]) -> str | None:
    named = os.environ.get(variable)
    if named:
        return shutil.which(named)
    return next((found for name in names if (found := shutil.which(name))), None)


@contextmanager
def chromium() -> Iterator[Browser]:
    """One headless Chromium, quit on the way out whatever happened."""
    browser, driver_path = binaries()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    options.add_argument("--headless=new")
    options.add_argument("--disable-gpu")
    options.add_argument(f"--window-size={WINDOW[0]},{WINDOW[1]}")
    # Chromium's sandbox refuses to start as root.
    if os.geteuid() == 0:
        options.add_argument("--no-sandbox")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    try:
        driver.set_page_load_timeout(PAGE_LOAD_TIMEOUT)
        yield Browser(driver)
    finally:
        driver.quit()


class Browser:
    def __init__(self, driver: webdriver.Chrome) -> None:
        self.driver = driver

    def open(self, page: Path) -> PageView:
        """Loads `page` (a local file) and reads it once its load event has fired, so every image
        is loaded or broken by then."""
        self.driver.get_log("browser")  # what an earlier page left
        self.driver.set_window_size(*WINDOW)
        self.driver.get(page.resolve().as_uri())
        images: list[dict[str, Any]] = self.driver.execute_script(_IMAGES)
        facts = {
            str(cell.get_attribute("data-key")): cell.text
            for cell in self.driver.find_elements(By.CSS_SELECTOR, "td[data-key]")
        }
        errors = tuple(entry["message"] for entry in self.driver.get_log("browser") if entry["level"] == "SEVERE")
        return PageView(
            title=self.driver.title,
            text=self.driver.find_element(By.TAG_NAME, "body").text,
            facts=MappingProxyType(facts),
            images=tuple(
                Image(
                    key=image["key"],
                    complete=bool(image["complete"]),
                    natural_width=int(image["naturalWidth"]),
                    natural_height=int(image["naturalHeight"]),
                    width=float(image["width"]),
                    height=float(image["height"]),
                )
                for image in images
            ),
            console_errors=errors,
        )

    def screenshot(self, page: Path, png: Path, width: int = WINDOW[0]) -> Path:
        """Saves the whole of `page`, `width` pixels wide, as a PNG at `png`: the window is made as
        tall as the document first, so nothing is cut off below the first screen."""
        self.driver.set_window_size(width, WINDOW[1])
        self.driver.get(page.resolve().as_uri())
        # The window's height counts the frame headless Chromium draws around the page (143 px in
        # Chromium 150): the page's height is the viewport's, so the frame is added to it.
        height, frame = self.driver.execute_script(
            "return [document.documentElement.scrollHeight, window.outerHeight - window.innerHeight]"
        )
        self.driver.set_window_size(width, int(height) + int(frame))
        if not self.driver.get_screenshot_as_file(str(png)):
            raise OSError(f"Chromium could not write the screenshot {png}")
        return png


_IMAGES = """
return Array.from(document.querySelectorAll("figure[data-key] img")).map((img) => {
  const box = img.getBoundingClientRect();
  return {
    key: img.closest("figure").dataset.key,
    complete: img.complete,
    naturalWidth: img.naturalWidth,
    naturalHeight: img.naturalHeight,
    width: box.width,
    height: box.height,
  };
});
"""
