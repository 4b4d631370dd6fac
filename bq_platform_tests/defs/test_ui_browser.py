"""The Dagster UI in a real browser: asset graph, partitions, per-partition check results.

A day (1995-08-01) of two real hours (a slice of ../shared/data's NASA log) is built and
published; 1995-08-02 has six hours built and its completeness report run, so its
``all_hours_complete`` check fails (WARN) while 1995-08-01's passes. Then ``dagster-webserver``
serves that instance on loopback and headless Chromium (Debian's ``chromium`` and
``chromium-driver``, driven by Selenium) opens the pages an operator uses. Screenshots go to
docs/screenshots/ (docs/ui.md shows them).

Skipped, with the reason, where no browser is installed: ``.ci/run`` installs it, so CI always
runs this test.
"""

import contextlib
import gzip
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from bq_platform_tests.conftest import REPO_ROOT

pytestmark = [pytest.mark.spark, pytest.mark.browser]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
SCREENSHOTS = REPO_ROOT / "docs" / "screenshots"
NASA = "ksc.nasa.gov"
WAIT_SECONDS = 120  # the UI computes partition status of ~275k hours; slow on a busy machine


def _missing_browser() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    if not CHROMIUM or not CHROMEDRIVER:
        return (
            "no headless browser: install Debian's chromium and chromium-driver "
            "(apt-get install -y chromium chromium-driver; .ci/run does this in CI)"
        )
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _materialize(home: Path, access_logs: Path) -> None:
    """Land two real hours and run the pipeline's jobs against ``$DAGSTER_HOME``."""
    from bq_platform.definitions import defs
    from bq_platform.lib.landing.producer.land import land_file
    from bq_platform.lib.storage.local import LocalObjectStore

    (log,) = (access_logs / NASA).glob("*.gz")
    lines = [
        line
        for line in gzip.open(log)
        if b"01/Aug/1995:00:" in line or b"01/Aug/1995:01:" in line  # 04-05 UTC (-0400)
    ]
    slice_path = home / "nasa-slice.log.gz"
    slice_path.write_bytes(gzip.compress(b"".join(lines)))
    land_file(LocalObjectStore(home / "lake"), NASA, slice_path)
    definitions = defs()
    hourly = definitions.resolve_job_def("pageviews_hourly_job")
    daily = definitions.resolve_job_def("pageviews_daily_job")
    with dg.DagsterInstance.get() as instance:
        for start, end in (("1995-08-01T00", "1995-08-01T23"), ("1995-08-02T00", "1995-08-02T05")):
            tags = {
                "dagster/asset_partition_range_start": start,
                "dagster/asset_partition_range_end": end,
            }
            assert hourly.execute_in_process(instance=instance, tags=tags).success
        assert daily.execute_in_process(instance=instance, partition_key="1995-08-01").success
        report_only = [dg.AssetKey(["reports", "pageviews_completeness"])]
        assert daily.execute_in_process(
            instance=instance, partition_key="1995-08-02", asset_selection=report_only
        ).success
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(
        home / "lake" / "reports" / "completeness" / "day=1995-08-01.png",
        SCREENSHOTS / "completeness_picture.png",
    )


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory, access_logs: Path, spark) -> Iterator[str]:
    """Base URL of a dagster-webserver on loopback serving a materialized temp instance."""
    reason = _missing_browser()
    if reason:
        pytest.skip(reason)
    home = tmp_path_factory.mktemp("ui")
    dagster_home = home / "dagster_home"
    dagster_home.mkdir()
    (dagster_home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    reports_port = _free_port()  # the completeness pictures, served as `make dev` does
    env = {
        "BQ_PLATFORM_HOME": str(home),
        "DAGSTER_HOME": str(dagster_home),
        "BQ_PLATFORM_REPORTS_URL": f"http://127.0.0.1:{reports_port}",
    }
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        mp.delenv("BQ_PLATFORM_ENV", raising=False)
        _materialize(home, access_logs)
    pictures = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(reports_port), "--bind", "127.0.0.1"],
        cwd=home / "lake" / "reports",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    port = _free_port()
    webserver = Path(sys.executable).parent / "dagster-webserver"
    log = (home / "webserver.log").open("w")
    process = subprocess.Popen(
        [str(webserver), "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=REPO_ROOT,
        env={**os.environ, **env, "BQ_PLATFORM_ENV": "local"},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            with contextlib.suppress(OSError):
                urllib.request.urlopen(f"{base}/server_info", timeout=2)
                break
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"dagster-webserver did not start: {(home / 'webserver.log').read_text()}"
                )
            time.sleep(1)
        yield base
    finally:
        pictures.terminate()
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
        pictures.wait(timeout=30)
        log.close()


@pytest.fixture(scope="module")
def browser(ui: str) -> Iterator[object]:
    """Headless Chromium, with Dagster's first-visit newsletter dialog dismissed."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    options.add_argument("--window-size=1600,1000")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    # A page of ~275k partitions can keep a busy 2-core machine's browser longer than
    # Selenium's default 120 s per command.
    driver.command_executor.client_config.timeout = 180
    driver.set_page_load_timeout(180)
    try:
        driver.get(f"{ui}/overview")
        _wait_for(driver, "Overview")
        time.sleep(2)
        for button in driver.find_elements(By.XPATH, "//button[normalize-space()='Skip']"):
            button.click()
        yield driver
    finally:
        driver.quit()


def _wait_for(driver, *texts: str) -> str:
    """Wait until the page shows every one of ``texts``; return the page text."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def shown(d) -> str | bool:
        body = d.find_element(By.TAG_NAME, "body").text
        return body if all(t in body for t in texts) else False

    try:
        return WebDriverWait(driver, WAIT_SECONDS, poll_frequency=1).until(shown)
    except Exception:
        body = driver.find_element(By.TAG_NAME, "body").text
        missing = [t for t in texts if t not in body]
        raise AssertionError(
            f"{driver.current_url} does not show {missing}:\n{body[:3000]}"
        ) from None


def _select_range(driver, text: str) -> None:
    """Type a partition range into the partitions view's range box (the one showing ``[``)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    (box,) = [
        i for i in driver.find_elements(By.TAG_NAME, "input") if i.get_attribute("value")[:1] == "["
    ]
    box.click()
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.BACKSPACE)
    box.send_keys(text, Keys.ENTER)
    time.sleep(1)
    box.send_keys(Keys.TAB)


def _shot(driver, name: str) -> None:
    time.sleep(1)  # let charts and icons settle
    driver.save_screenshot(str(SCREENSHOTS / f"{name}.png"))


def test_asset_graph_shows_the_pipeline_and_its_checks(browser, ui):
    browser.get(f"{ui}/locations/bq_platform/asset-groups/warehouse")
    _wait_for(
        browser,
        "pageview_files",
        "pageviews_stage",
        "pageviews_sample_stage",
        "pageviews_audit",
        "pageviews_sample",
        "pageviews_completeness",
        "1 / 1 Passed",
        "2 / 2 Passed",
    )
    _shot(browser, "asset_graph")


def test_partitions_view_shows_materialized_hours_and_their_metadata(browser, ui):
    browser.get(f"{ui}/assets/lake/pageview_files?view=partitions&partition=1995-08-01T04")
    # 24 hours of 1995-08-01 and 6 of 1995-08-02; the selected hour's numbers.
    # The per_site_hour table renders after its label: wait for its row, not only the label.
    body = _wait_for(
        browser,
        "Materialized (30)",
        "Failed (0)",
        "source_lines",
        "per_site_hour",
        "ksc.nasa.gov 1995-08-01T04",
        "pageviews_hourly_job",
    )
    assert "1995-08-01T04" in body
    _select_range(browser, "[1995-08-01T00...1995-08-02T23]")
    _wait_for(browser, "48 Partitions Selected", "Materialized (30)", "Missing (18)")
    _shot(browser, "partitions")


def test_checks_tab_shows_each_partitions_result(browser, ui):
    browser.get(f"{ui}/assets/lake/pageview_files?view=checks")
    # The latest hourly result names its partition (the last hour of the last run).
    _wait_for(browser, "accounting_identity", "Partition", "1995-08-02T05", "Passed", "difference")
    _shot(browser, "checks")
    # (The hourly check's own Partitions tab lists ~275k hours: too slow for a test browser on
    # a 2-core machine. Hourly results per partition are asserted in test_backfill.py.)

    browser.get(f"{ui}/assets/reports/pageviews_completeness?view=checks")
    _wait_for(browser, "all_hours_complete")
    _open_check_partitions(browser)
    # One day passed (1995-08-01: 24/24 hours), one failed (1995-08-02: 6 of 24 built).
    _wait_for(browser, "Failed (1)", "Passed (1)")
    _filter_partitions(browser, "1995-08-0")
    _click_partition(browser, "1995-08-02")
    _wait_for(browser, "6/24 hours complete", "not built or not audited", "difference", "-18")
    _shot(browser, "check_partitions")


def _open_check_partitions(driver) -> None:
    """Open the selected check's own Partitions tab (the asset has one too: take the last)."""
    from selenium.webdriver.common.by import By

    _wait_for(driver, "Execution history")
    driver.find_elements(By.XPATH, "//*[normalize-space()='Partitions']")[-1].click()


def _filter_partitions(driver, prefix: str) -> None:
    from selenium.webdriver.common.by import By

    (box,) = [
        i
        for i in driver.find_elements(By.TAG_NAME, "input")
        if i.get_attribute("placeholder") == "Filter by partition…"
    ]
    box.send_keys(prefix)


def _click_partition(driver, key: str) -> None:
    from selenium.webdriver.common.by import By

    _wait_for(driver, key)
    shown = [
        e
        for e in driver.find_elements(By.XPATH, f"//*[normalize-space()='{key}']")
        if e.is_displayed()
    ]
    shown[-1].click()


def test_completeness_report_shows_the_gap(browser, ui):
    from selenium.webdriver.common.by import By

    browser.get(f"{ui}/assets/reports/pageviews_completeness?view=partitions&partition=1995-08-01")
    _wait_for(browser, "complete_hours", "Show Markdown")
    links = browser.find_elements(By.XPATH, "//*[contains(text(), 'Show Markdown')]")
    links[-1].click()
    body = _wait_for(browser, "24/24 hours complete", "source_lines", "pageviews", "rejected")
    assert "ksc.nasa.gov" in body
    # The PNG heat map is shown in the report (served like `make dev` serves lake/reports).
    (picture,) = [
        img
        for img in browser.find_elements(By.TAG_NAME, "img")
        if "completeness/day=1995-08-01.png" in (img.get_attribute("src") or "")
    ]
    loaded = "return arguments[0].complete && arguments[0].naturalWidth"
    deadline = time.monotonic() + WAIT_SECONDS
    while not browser.execute_script(loaded, picture) and time.monotonic() < deadline:
        time.sleep(1)
    assert browser.execute_script(loaded, picture) > 400, "the picture did not load"
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", picture)
    _shot(browser, "completeness_report")
