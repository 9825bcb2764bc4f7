"""The first screen of a report page, as a reader's browser shows it: Debian's chromium, headless and offline
(tools/browser.py, the one way the suite starts a browser; `make setup-browser` installs it).

    python -m tools screenshot results/index.html results/screenshots/first_screen.png [--width 1440 --height 1000]

The committed one, results/screenshots/first_screen.png, is the committed report's first page in a 1440 x 1000
window (a laptop's screen); the README links it. A browser's pixels differ between chromium versions, so it is
redrawn by hand after the page changes, never by `make reference-report` (which stays byte for byte).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from tools.browser import chromium_and_driver, offline_driver


def first_screen(page: Path, png: Path, width: int = 1440, height: int = 1000) -> int:
    """Open `page` from disk in a window of width x height and save what it shows as `png`; the page's full height
    in pixels."""
    driver = offline_driver(*chromium_and_driver())
    try:
        driver.set_window_size(width, height)
        driver.get(Path(page).resolve().as_uri())
        png.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(png))
        return int(driver.execute_script("return document.documentElement.scrollHeight"))
    finally:
        driver.quit()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools screenshot", description=__doc__.split("\n\n")[0])
    parser.add_argument("page", type=Path)
    parser.add_argument("png", type=Path)
    parser.add_argument("--width", type=int, default=1440)
    parser.add_argument("--height", type=int, default=1000)
    args = parser.parse_args(argv)
    try:
        tall = first_screen(args.page, args.png, args.width, args.height)
    except (FileNotFoundError, ImportError) as exc:  # no chromium, chromedriver or Selenium: one line
        print(f"screenshot: {exc} (make setup-browser installs them)")
        return 2
    print(f"screenshot: {args.png} ({args.width} x {args.height} window, a page {tall} px tall)")
    return 0
