"""The admin web in a real headless browser: Debian's chromium driven through Debian's
chromium-driver by Selenium (never a browser or driver downloaded at run time: the driver's path is
given, so Selenium Manager is not asked, and SE_OFFLINE forbids it anyway).

A real daemon on a real Redis behind a real uvicorn on loopback, the app mounted under a prefix in a
FastAPI host (as the platform mounts it). Screenshots of each page go to
``$TENDER_POOL_WEB_SCREENSHOTS`` (else the test's temp dir); ``docs/admin-web-*.png`` came from here.

Without the browser the tests skip locally and fail under CI (the Makefile installs it)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from conftest import wait_until
from tender_pool.web import create_app, local_only
from .webhelp import Server, client_for

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
PREFIX = "/a/b/tender-parse"
XSS = '"><img src=x onerror=alert(1)>'
XSS2 = "</script><script>alert(2)</script>"


def _missing(msg: str):
    if os.environ.get("CI"):
        pytest.fail(msg)
    pytest.skip(msg)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not (os.path.exists(CHROMIUM) and os.path.exists(DRIVER)):
        _missing("chromium / chromium-driver are not installed (apt-get install chromium chromium-driver)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing("selenium is not installed (the test extra)")
    os.environ["SE_OFFLINE"] = "true"
    o = webdriver.ChromeOptions()
    o.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--disable-dev-shm-usage", "--disable-extensions", "--window-size=1400,1000",
              f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        o.add_argument(a)
    o.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    d = webdriver.Chrome(service=Service(DRIVER), options=o)
    d.set_page_load_timeout(20)
    yield d
    d.quit()


@pytest.fixture
def shots(tmp_path) -> Path:
    d = Path(os.environ.get("TENDER_POOL_WEB_SCREENSHOTS") or tmp_path / "screenshots")
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture
def site(h, browser):
    """(client, base URL of the mounted app): a daemon with 2 slots, the app under PREFIX. The
    browser starts on a blank page with its logs drained, and leaves the server before it stops."""
    from fastapi import FastAPI

    (h.tmp / "in").mkdir()
    d = h.daemon(workers=2, input_roots=[str(h.tmp / "in")])
    d.wait_slots(2)
    c = client_for(h)
    wait_until(lambda: c.status().online == 2, 15, what="2 slots online")
    host = FastAPI()
    app = create_app(c, auth=local_only, interval=0.25)
    host.mount(PREFIX, app)
    h.web_app = app
    browser.get("about:blank")
    browser.get_log("browser")
    browser.get_log("performance")
    with Server(host) as srv:
        yield c, srv.url + PREFIX
        browser.get("about:blank")  # closes the page's streams before the server stops
    c.close()


def page_problems(d, base: str) -> tuple[list[str], list[str]]:
    """(console errors and CSP violations, requests that left our server) since the last call."""
    errors = [e["message"] for e in d.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
    origin = base.split(PREFIX)[0]
    outside = []
    for e in d.get_log("performance"):
        m = json.loads(e["message"])["message"]
        if m["method"] == "Network.requestWillBeSent":
            url = m["params"]["request"]["url"]
            if url.split(":")[0] in ("chrome", "about", "data", "devtools"):
                continue  # the browser's own pages (its first new tab), not the page's requests
            if not url.startswith(origin + "/"):
                outside.append(url)
    return errors, outside


def no_dialog(d) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    try:
        text = d.switch_to.alert.text
    except NoAlertPresentException:
        return
    raise AssertionError(f"a dialog opened: {text!r}")


def texts(d, selector: str) -> list[str]:
    """The visible text of each match, read in one script (rows redrawn meanwhile cannot go stale)."""
    return d.execute_script("return [...document.querySelectorAll(arguments[0])].map(e => e.innerText)", selector)


def css(d, selector: str):
    from selenium.webdriver.common.by import By

    return d.find_elements(By.CSS_SELECTOR, selector)


def test_overview_live_slots_clean_console_loopback_only(h, site, browser, shots):
    client, base = site
    d = browser
    d.get(base + "/")
    wait_until(lambda: "on" in css(d, "#live-state")[0].get_attribute("class"), 10, what="the live stream open")
    errors, outside = page_problems(d, base)
    assert errors == [] and outside == [], (errors, outside)
    # a slot row changes when a job starts and when it ends, without a reload
    jid = h.submit("behave", user="alice", payload={"sleep": 1.5})
    rows = lambda: texts(d, "#slots tr")  # noqa: E731
    wait_until(lambda: any(jid in t and "busy" in t and "alice" in t for t in rows()), 10, what="the job in a slot row")
    d.save_screenshot(str(shots / "admin-web-overview.png"))
    hrefs = d.execute_script("return [...document.querySelectorAll('#slots a')].map(a => a.href)")
    assert f"{base}/jobs/{jid}" in hrefs
    wait_until(lambda: not any(jid in t for t in rows()) and sum("idle" in t for t in rows()) == 2, 15,
               what="the slot idle again")
    assert d.execute_script("return performance.getEntriesByType('navigation').length") == 1  # no reload
    errors, outside = page_problems(d, base)
    assert errors == [] and outside == [], (errors, outside)
    # a hidden tab closes its stream (and the app's one reader stops with its last viewer); shown
    # again, it reopens
    hub = h.web_app.dashboard.hub
    assert hub.viewers == 1
    visibility = ("Object.defineProperty(document, 'hidden', {value: %s, configurable: true});"
                  "document.dispatchEvent(new Event('visibilitychange'))")
    d.execute_script(visibility % "true")
    wait_until(lambda: hub.viewers == 0, 10, what="the hidden tab's stream closed")
    wait_until(lambda: hub._task is None, 5, what="the reader stopped")
    d.execute_script(visibility % "false")
    wait_until(lambda: hub.viewers == 1, 10, what="the stream reopened")


def test_run_progress_advances_and_survives_offline(h, site, browser, shots):
    client, base = site
    d = browser
    run = client.submit_run("bob", "behave", [{"key": f"section {i}", "payload": {"sleep": 0.4}} for i in range(8)])
    d.get(f"{base}/runs/{run.id}")
    bar = lambda: int(css(d, "#run-progress")[0].get_attribute("value") or 0)  # noqa: E731
    wait_until(lambda: bar() >= 2, 20, what="progress to advance")
    # offline: the page closes its stream; the run goes on; back online it resumes after the last id
    d.set_network_conditions(offline=True, latency=0, download_throughput=-1, upload_throughput=-1)
    wait_until(lambda: d.execute_script("return navigator.onLine") is False, 5, what="offline")
    at = bar()
    wait_until(lambda: client.run(run.id).counts.completed >= at + 2, 20, what="the run to go on meanwhile")
    assert bar() <= at + 1  # nothing arrived while offline (one event may have been in flight)
    d.delete_network_conditions()
    d.execute_script("window.dispatchEvent(new Event('online'))")  # what the browser fires on reconnect
    wait_until(lambda: bar() == 8, 30, what="progress to reach 8/8")
    wait_until(lambda: css(d, "#run-state")[0].text == "completed", 10, what="run completed")
    assert not css(d, "form[action$='/cancel']")[0].is_displayed()  # nothing left to cancel
    d.save_screenshot(str(shots / "admin-web-run.png"))
    shown = [li.get_attribute("data-id") for li in css(d, "#events li")]
    assert len(shown) == len(set(shown))  # every event once
    snapshot = shown[-1]
    stored = [i.decode() for i, _ in h.r.xrange(h.k.run_events(run.id))]
    assert sorted(shown[:-1], key=_sid) == [s for s in stored if _sid(s) > _sid(snapshot)]
    assert all(b.text == "completed" for b in css(d, "#run-jobs td.state .badge"))
    errors, outside = page_problems(d, base)
    assert outside == [] and not [e for e in errors if "Content Security Policy" in e], errors


def _sid(s: str) -> tuple[int, int]:
    a, _, b = s.partition("-")
    return int(a), int(b or 0)


def test_cancel_asks_first_and_cancels_in_redis(h, site, browser, shots):
    client, base = site
    d = browser
    jid = h.submit("behave", user="carol", payload={"sleep": 30})
    wait_until(lambda: client.job(jid).state == "running", 15, what="running")
    d.get(f"{base}/jobs/{jid}")
    d.save_screenshot(str(shots / "admin-web-job.png"))
    css(d, "#cancel-job")[0].click()
    alert = d.switch_to.alert
    assert f"Cancel job {jid}?" in alert.text
    alert.dismiss()  # no: nothing happens
    time.sleep(0.3)
    assert client.job(jid).state == "running" and d.current_url == f"{base}/jobs/{jid}"
    css(d, "#cancel-job")[0].click()
    d.switch_to.alert.accept()
    wait_until(lambda: "done=cancel_job" in d.current_url, 10, what="the redirect after the action")
    assert "cancel_job:signalled" in css(d, ".flash")[0].text
    wait_until(lambda: h.job(jid).state.value == "cancelled", 15, what="cancelled in Redis")
    d.refresh()
    assert css(d, "#job-state")[0].text == "cancelled" and not css(d, "#cancel-job")


def test_filters_change_the_url_and_back_restores_them(h, site, browser, shots):
    from selenium.webdriver.common.by import By

    client, base = site
    d = browser
    ids = [h.submit("behave", user=u, payload={"exit": 1} if n == 2 else {}) for n, u in
           enumerate(["dave", "erin", "dave", "erin"])]
    for jid in ids:
        h.wait_state(jid, ("completed", "failed"), timeout=30)
    d.get(base + "/history")
    assert len(css(d, "#history-rows tr")) == 4
    user = d.find_element(By.NAME, "user")
    user.send_keys("dave")
    d.find_element(By.CSS_SELECTOR, "#history-filters button[type=submit]").click()
    wait_until(lambda: "user=dave" in d.current_url, 10, what="the filter in the URL")
    assert len(css(d, "#history-rows tr")) == 2
    d.find_element(By.CSS_SELECTOR, "input[name=status][value=failed]").click()
    d.find_element(By.CSS_SELECTOR, "#history-filters button[type=submit]").click()
    wait_until(lambda: "status=failed" in d.current_url, 10, what="the state in the URL")
    assert [t.split()[0] for t in texts(d, "#history-rows tr")] == [ids[2]]
    d.save_screenshot(str(shots / "admin-web-history.png"))
    d.back()
    wait_until(lambda: "status=failed" not in d.current_url and "user=dave" in d.current_url, 10, what="Back")
    assert d.find_element(By.NAME, "user").get_attribute("value") == "dave"
    assert not d.find_element(By.CSS_SELECTOR, "input[name=status][value=failed]").is_selected()
    assert len(css(d, "#history-rows tr")) == 2
    d.back()
    wait_until(lambda: d.current_url == base + "/history", 10, what="Back to no filter")
    assert len(css(d, "#history-rows tr")) == 4


def test_xss_payloads_never_fire(h, site, browser, shots):
    client, base = site
    d = browser
    inbox = h.tmp / "in"
    (inbox / f"{XSS}<").mkdir()
    doc = inbox / f"{XSS}<" / "script>.doc"
    doc.write_text("x")
    err = json.dumps({"error": {"kind": "corrupt", "message": f"broken {XSS} {XSS2}"}})
    failed = h.submit("behave", user=f"u{XSS}", payload={"file": str(doc), "note": XSS2, "stdout": err, "exit": 3})
    h.wait_state(failed, ("failed",))
    running = h.submit("behave", user=f"v{XSS2}", payload={"file": str(doc), "sleep": 30})
    run = client.submit_run(f"w{XSS}", "behave", [{"key": XSS, "payload": {}}, {"key": XSS2, "payload": {}}])
    wait_until(lambda: client.job(running).state == "running", 15, what="running")
    pages = ["/", f"/jobs/{failed}", f"/jobs/{running}", "/history", f"/runs/{run.id}", "/runs",
             f"/history?user={XSS}"]
    for p in pages:
        d.get(base + p)
        time.sleep(0.4)  # the live script has rendered (overview slots, run events)
        no_dialog(d)
        assert d.execute_script("return document.querySelectorAll('img').length") == 0, p
    d.get(base + "/")
    wait_until(lambda: any(f"v{XSS2}" in t for t in texts(d, "#slots tr")), 10, what="the row drawn by the script")
    no_dialog(d)
    d.get(f"{base}/jobs/{failed}")
    body = css(d, "main")[0].text
    assert f"broken {XSS} {XSS2}" in body and f"u{XSS}" in body  # shown as text, literally
    errors, outside = page_problems(d, base)
    assert outside == []
    client.cancel(running)


def test_each_page_renders_for_a_screenshot(h, site, browser, shots):
    client, base = site
    d = browser
    run = client.submit_run("frank", "behave", [{"key": f"2.{i}", "payload": {"exit": 1} if i == 3 else {}}
                                                 for i in range(5)])
    wait_until(lambda: client.run(run.id).finished, 30, what="run finished")
    for name, path in (("runs", "/runs"), ("run-finished", f"/runs/{run.id}")):
        d.get(base + path)
        d.save_screenshot(str(shots / f"admin-web-{name}.png"))
    assert "partial_success" in css(d, "#run-state")[0].text and css(d, "form[action$='/retry'] button")
    errors, outside = page_problems(d, base)
    assert errors == [] and outside == [], (errors, outside)
    for name in ("runs", "run-finished"):
        assert (shots / f"admin-web-{name}.png").stat().st_size > 10_000
    # dark mode follows prefers-color-scheme
    background = "return getComputedStyle(document.body).backgroundColor"
    assert d.execute_script(background) == "rgb(255, 255, 255)"
    d.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    try:
        d.get(base + "/history")
        assert d.execute_script(background) == "rgb(17, 20, 24)"
        d.save_screenshot(str(shots / "admin-web-history-dark.png"))
    finally:
        d.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
