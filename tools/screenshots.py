"""The docs' pictures of the two pages (docs/pages.md, the README): a smoke run's page and a fit
check's page, each opened in headless Chromium (tools/browser.py) and saved whole as a PNG. Made
by this script, not by hand, so they show what the code draws: `./scripts/screenshots`.

A page that does not render (a console error, a plot that did not decode) is not saved: the
script fails, naming it."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from domain.paths import PROJECT_ROOT, TRAINER_PYTHON
from tools.browser import Browser, BrowserMissing, chromium

IMAGES = PROJECT_ROOT / "docs" / "images"
RUN_PAGE_PNG, FIT_PAGE_PNG = "run-page.png", "fit-check-page.png"
# The page's width in the pictures (the page's text is at most 1000 px wide).
WIDTH = 1100
FIT_CHECK_PRESET = "llama3-8b"


def smoke_run_page() -> Path:
    """Runs the smoke run (the README's first command) and returns its page."""
    done = subprocess.run(
        [sys.executable, "-m", "workloads.smoke"], cwd=PROJECT_ROOT, stdout=subprocess.PIPE, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"screenshots: the smoke run failed (exit {done.returncode}); its error is above")
    path = json.loads(done.stdout.strip().splitlines()[-1])["report_path"]
    if path is None:
        raise SystemExit("screenshots: the smoke run wrote no page (its warning is above)")
    return Path(path)


def fit_check_page(directory: Path) -> Path:
    """Runs the fit check of the shipped preset (from this checkout's cache when it has the
    result, else it compiles: about a minute) with --report, and returns the page."""
    page = directory / "fit-check.html"
    command = [str(TRAINER_PYTHON), "-m", "trainer.fit_check", "--preset", FIT_CHECK_PRESET, "--report", str(page)]
    if subprocess.run(command, cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL, check=False).returncode != 0:
        raise SystemExit(f"screenshots: `{' '.join(command[1:])}` failed; its error is above")
    return page


def save(browser: Browser, page: Path, png: Path) -> None:
    """Saves `page` as `png` once it renders as a person would see it."""
    view = browser.open(page)
    broken = [image.key for image in view.images if not image.rendered]
    if view.console_errors or broken or not view.images:
        raise SystemExit(
            f"screenshots: {page} does not render: console errors {list(view.console_errors)}, "
            f"plots not drawn {broken}, {len(view.images)} plots"
        )
    browser.screenshot(page, png, width=WIDTH)
    print(f"wrote {png} from {page}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-page", type=Path, help="a run's page to picture (default: run the smoke run)")
    parser.add_argument("--fit-page", type=Path, help=f"a fit check's page (default: {FIT_CHECK_PRESET}'s)")
    parser.add_argument("--out", type=Path, default=IMAGES, help="where the PNGs go (default: docs/images)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        run_page = args.run_page or smoke_run_page()
        fit_page = args.fit_page or fit_check_page(Path(scratch))
        args.out.mkdir(parents=True, exist_ok=True)
        try:
            with chromium() as browser:
                save(browser, run_page, args.out / RUN_PAGE_PNG)
                save(browser, fit_page, args.out / FIT_PAGE_PNG)
        except BrowserMissing as missing:
            print(f"screenshots: {missing}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
