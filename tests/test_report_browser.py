"""The smoke run's report.html in headless Chromium (the Debian package `chromium`, driven by Playwright): it
renders with no console error and no network request, and its front, headline sentence and baselines are on the
page and answer the mouse. `scripts/install.sh --tests` installs the browser."""
import shutil

import numpy as np
import pytest
from PIL import Image
from playwright.sync_api import sync_playwright

from nas.rundir import read_csv


@pytest.fixture(scope="module")
def browser():
    executable = shutil.which("chromium")
    assert executable, "the Debian package chromium is missing: run scripts/install.sh --tests"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable)
        yield browser
        browser.close()


@pytest.fixture
def opened(browser, smoke_run):
    """The smoke run's report loaded offline: (page, console and page errors, requests other than the file)."""
    context = browser.new_context(offline=True, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors, requests = [], []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("request", lambda request: None if request.url.startswith(("file:", "data:"))
            else requests.append(request.url))
    page.goto(smoke_run.report_html.resolve().as_uri(), wait_until="load")
    yield page, errors, requests
    context.close()


def test_report_renders_offline_without_errors(opened, smoke_run, tmp_path):
    page, errors, requests = opened
    screenshot = tmp_path / "report.png"
    page.screenshot(path=str(screenshot), full_page=True)
    assert errors == [] and requests == []
    pixels = np.asarray(Image.open(screenshot).convert("RGB"))
    assert pixels.shape[0] > 900 and len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50  # a drawn page, not blank

    # the headline: the smoke run's one baseline is a subnet on inherited weights, not like with like: no papers'
    # sentence, but its match is listed and marked
    headline = page.locator("p.headline")
    assert headline.is_visible()
    assert headline.inner_text().startswith("No headline: no baseline of this run is a network trained from scratch")
    assert "(inherited weights: not like with like)" in page.locator("p.headline + p + ul").inner_text()
    # the front: one view shown, with a visible point per evaluated arch (finalised ones twice) and the baseline
    rows = read_csv(smoke_run.candidates)
    shown = page.locator("div.view:not([hidden])")
    assert shown.count() == 1
    final = [r for r in rows if r["final_top1"] != ""]
    assert shown.locator("circle[data-key]").count() == len(rows) + len(final)
    assert shown.locator("circle[data-key]").first.is_visible() and shown.locator('rect[data-key="b0"]').is_visible()
    # the baselines table
    baselines = page.locator("h2:text-is('Baselines') + table")
    assert baselines.is_visible() and "largest" in baselines.inner_text()


def test_report_answers_the_mouse(opened, smoke_run):
    page, errors, _ = opened
    shown = page.locator("div.view:not([hidden])")
    # hovering a point shows its arch and figures
    point = shown.locator("circle[data-key]").first
    point.hover(force=True)
    tip = page.locator("#tip")
    assert tip.is_visible() and "MACs" in tip.inner_text() and "params" in tip.inner_text()
    # clicking another arch than the one shown at first puts it in the side panel, with the picture of its blocks
    initial = page.evaluate("JSON.parse(document.getElementById('vpunas-data').textContent).initial")
    first_panel = page.locator("#selected").inner_text()
    other = shown.locator(f'circle[data-key]:not([data-key="{initial}"])').first
    key = other.get_attribute("data-key")
    other.click(force=True)
    assert page.locator("#selected svg.arch").is_visible() and page.locator("#selected").inner_text() != first_panel
    assert page.locator(f'circle.sel[data-key="{key}"]').count() >= 1
    assert page.locator(f'circle.sel[data-key="{initial}"]').count() == 0
    # another latency source shows another view
    before = shown.get_attribute("data-view")
    page.locator('input[name=source][value="VPU_2_0"]').check()
    after = page.locator("div.view:not([hidden])")
    assert after.count() == 1 and after.get_attribute("data-view").startswith("VPU_2_0|")
    assert not before.startswith("VPU_2_0|")
    # a table header click sorts the rows by that column
    table = page.locator("table.sortable").first
    header = table.locator("th", has_text="params")
    header.click()
    column = header.evaluate("th => th.cellIndex")
    values = [float(v) for v in table.locator(f"tbody tr td:nth-child({column + 1})").all_inner_texts() if v]
    assert len(values) > 1 and values == sorted(values)
    assert errors == []
