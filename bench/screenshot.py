"""Screenshot of the service's web page (GET /) after it has parsed two typed sentences.

    python bench/screenshot.py [--out docs/service-page.png] [--width 1280] [--text TEXT] [--url URL]

Starts the service (``python -m service --port <free port> --data-dir <tmpdir>`` from the repo root), waits
until ``GET /readyz`` answers 200, opens ``/`` in headless Chromium driven by Selenium (Debian:
``apt-get install chromium chromium-driver``; ``CHROMIUM`` and ``CHROMEDRIVER`` name other binaries), types
``--text`` into the page without tags, presses Parse, waits until the page says its three requests answered
(``data-parsed="ok"`` on ``<body>``; ``error`` stops the script), and saves the whole page at ``--width``
pixels. ``--url`` takes the picture of an already running service instead of starting one.
``tests/test_service_page.py`` drives the page the same way and checks what it shows.
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

from _service import ROOT, service  # (bench/ is on sys.path when this script runs)

TEXT = "My neighbour's dog didn't bark. It slept in the garden."


def driver(width: int):  # type: ignore[no-untyped-def]
    """Headless Chromium through the system chromedriver (no driver download)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    chromedriver = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
    for path in (chromium, chromedriver):
        if shutil.which(path) is None:
            raise SystemExit(f"{path} not found (apt-get install chromium chromium-driver, or set CHROMIUM and "
                             "CHROMEDRIVER)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--hide-scrollbars", f"--window-size={width},1000", "--force-device-scale-factor=1"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(chromedriver), options=options)


def shoot(url: str, out: Path, width: int, text: str, timeout: float) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    state = "const s = document.body.dataset.parsed; return s === 'ok' || s === 'error' ? s : null"
    browser = driver(width)
    try:
        browser.get(url + "/")
        WebDriverWait(browser, timeout).until(lambda d: d.execute_script(state))  # the example sentence
        for field, value in (("sentence", text), ("tags", "")):
            box = browser.find_element(By.ID, field)
            box.clear()
            box.send_keys(value)
        browser.execute_script("delete document.body.dataset.parsed")
        browser.find_element(By.ID, "go").click()
        if WebDriverWait(browser, timeout).until(lambda d: d.execute_script(state)) != "ok":
            raise SystemExit(f"the page did not parse: {browser.find_element(By.ID, 'errors').text}")
        height = browser.execute_script("return document.documentElement.scrollHeight")
        browser.set_window_size(width, height)
        out.parent.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(out))
    finally:
        browser.quit()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "service-page.png")
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--text", default=TEXT, help="what to type into the page (no tags)")
    ap.add_argument("--url", help="screenshot this running service instead of starting one")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for each parse")
    ap.add_argument("--ready-timeout", type=float, default=180.0)
    args = ap.parse_args()

    with service(args.url, args.ready_timeout) as (url, _, _):
        shoot(url, args.out, args.width, args.text, args.timeout)
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main()
