"""Debian's chromium driven through Debian's chromedriver, offline: the one way the suite starts a browser (the report
page's browser test; a screenshot of the report). `make setup-browser` installs the two and Selenium.

    driver = offline_driver(chromium, chromedriver)      # chromium_and_driver() finds them on PATH

Nothing it starts reaches the network. Selenium is given the driver by path, so it never starts Selenium Manager
(which downloads drivers and browsers and sends usage statistics): a missing driver is refused here instead. Chromium
is started with OFFLINE_FLAGS, which keep its own traffic off the network: what the flags Puppeteer starts it with
keep quiet (updates, field trials, metrics, sync, safe browsing), the network clock, and two services no flag turns
off -- an on-demand component install (`--disable-component-update` does not stop it) and Google sign-in's account
check -- whose addresses are pointed at a closed loopback port. tests/test_report_page.py holds it to that: every
request the browser makes for a network goes to a loopback proxy of the test's, which must see none (issue 64).
"""
from __future__ import annotations

import shutil

DEAD = "http://127.0.0.1:9"  # the discard port, closed: a request there fails at once and never leaves the machine
HEADLESS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage")  # --no-sandbox: as root
OFFLINE_FLAGS = ("--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-default-apps", "--disable-extensions", "--disable-domain-reliability",
                 "--disable-client-side-phishing-detection", "--disable-breakpad", "--metrics-recording-only",
                 "--no-first-run", "--no-default-browser-check", "--no-pings", "--dns-prefetch-disable",
                 # one --disable-features: Chromium reads only the last; NetworkTimeServiceQuerying is the clock
                 # (clients2.google.com/time)
                 "--disable-features=NetworkTimeServiceQuerying,OptimizationHints,MediaRouter,Translate,"
                 "AutofillServerCommunication",
                 f"--component-updater=url-source={DEAD}/service/update2/json",  # update.googleapis.com
                 f"--gaia-url={DEAD}/")  # accounts.google.com


def chromium_and_driver() -> tuple[str | None, str | None]:
    """Debian's chromium and chromedriver on PATH (None where one is missing: make setup-browser installs them)."""
    return shutil.which("chromium"), shutil.which("chromedriver")


def offline_driver(chromium: str, chromedriver: str, proxy: str | None = None, log_console: bool = False):
    """A headless Chrome WebDriver of these two programs that reaches no network. proxy: a proxy every request for a
    network is sent through, loopback ones too (a test's sentinel); log_console: keep the page's console messages
    (driver.get_log("browser"))."""
    if not (chromium and chromedriver):  # Selenium would fetch them from the internet (Selenium Manager)
        raise FileNotFoundError("no chromium or chromedriver on PATH: make setup-browser installs Debian's")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    routed = (f"--proxy-server={proxy}", "--proxy-bypass-list=<-loopback>") if proxy else ()
    for arg in (*HEADLESS, *OFFLINE_FLAGS, *routed):
        options.add_argument(arg)
    if log_console:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(chromedriver), options=options)  # the given driver: no download
