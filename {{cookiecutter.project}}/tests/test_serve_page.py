"""The page at / in a real browser: headless Chromium (or Chrome) driven by Playwright loads it
from a real server, uploads an image file and shows the class predict.py gives it. On the
digits' export: the page uploads a digit's PNG file."""

import os
from pathlib import Path

import numpy as np
import pytest
from conftest import run_predict, save_pngs
from playwright.sync_api import sync_playwright
from servers import Server
from sklearn.datasets import load_digits

from {{ cookiecutter.package }} import kinds
from {{ cookiecutter.package }}.contract import Manifest

pytestmark = pytest.mark.slow  # a server of several processes, and a browser
# Debian's chromium package (`apt-get install chromium`); CHROME_BIN names another Chromium or
# Chrome, such as the one GitHub's runners have. Playwright only drives it (no `playwright
# install`).
BROWSER = Path(os.environ.get("CHROME_BIN", "/usr/bin/chromium"))
# axe-core, the accessibility checker, as npm installs it (.ci/run: `npm install --prefix
# ~/.cache/axe-core axe-core`); AXE_CORE names another copy of axe.min.js.
AXE = Path(
    os.environ.get("AXE_CORE", Path.home() / ".cache/axe-core/node_modules/axe-core/axe.min.js")
)
SHOWN = "() => !['-', '…'].includes(document.getElementById('top-class').textContent)"


@pytest.fixture(scope="module")
def browser():
    if not BROWSER.is_file():
        pytest.fail(
            f"no browser at {BROWSER}: install Chromium (apt-get install chromium) or set "
            "CHROME_BIN to a Chromium or Chrome executable",
            pytrace=False,
        )
    with sync_playwright() as playwright:
        # Without the sandbox: it needs privileges that containers and CI jobs often lack.
        browser = playwright.chromium.launch(
            executable_path=BROWSER, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def server(digits_export, tmp_path_factory):
    with Server(digits_export, tmp_path_factory.mktemp("serve")) as server:
        yield server


def test_the_page_shows_the_top_classes_of_an_uploaded_image(
    browser, server, digits_export, tmp_path
):
    (png,) = save_pngs(load_digits().images[3:4], tmp_path / "images")
    (expected,) = run_predict(digits_export, png, tmp_path / "predict", "top_k=5")
    page = browser.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(error))
    page.goto(f"{server.url}/")
    page.set_input_files("#file", png)
    page.wait_for_function(SHOWN, timeout=30_000)
    assert page.locator("#top-class").text_content() == expected["class"]
    rows = [row.split("\t") for row in page.locator("#result tr").all_inner_texts()]
    assert [row[0] for row in rows] == [entry["class"] for entry in expected["top"]]
    shown = [float(row[1].rstrip("%")) for row in rows]
    assert np.allclose(shown, [100 * e["probability"] for e in expected["top"]], atol=0.05)

    (tmp_path / "broken.png").write_bytes(b"not an image")
    page.set_input_files("#file", tmp_path / "broken.png")
    page.wait_for_function("() => document.getElementById('error').textContent !== ''")
    error = page.locator("#error").text_content()
    assert error == "400: broken.png is not an image that Pillow can read"
    assert page.locator("#preview").is_hidden()  # no broken-image icon
    assert not errors


def test_the_page_has_no_accessibility_violations_and_says_what_training_images_look_like(
    browser, server, digits_export
):
    if not AXE.is_file():
        pytest.fail(
            f"no axe-core at {AXE}: npm install --prefix ~/.cache/axe-core axe-core, or set "
            "AXE_CORE to axe.min.js",
            pytrace=False,
        )
    page = browser.new_page()
    page.goto(f"{server.url}/")
    page.add_script_tag(path=AXE)
    violations = page.evaluate("async () => (await axe.run()).violations")
    assert [(v["id"], [n["target"] for n in v["nodes"]]) for v in violations] == []
    manifest = Manifest.read(digits_export / "manifest.json")
    hint = kinds.get(manifest.input.kind).form(manifest.preprocessing).get("hint")
    assert page.locator("#hint").text_content() == (hint or "")


def test_a_keyboard_alone_chooses_a_file_and_gets_its_prediction(
    browser, server, digits_export, tmp_path
):
    (png,) = save_pngs(load_digits().images[5:6], tmp_path / "images")
    (expected,) = run_predict(digits_export, png, tmp_path / "predict")
    page = browser.new_page()
    # Listened for before the page loads: Playwright asks the browser to report file choosers
    # without waiting for its answer, and an Enter that arrives first opens no reported chooser.
    page.on("filechooser", lambda chooser: None)
    page.goto(f"{server.url}/")
    for _ in range(10):  # Tab through the page to the file chooser's button
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.id") == "choose":
            break
    assert page.evaluate("document.activeElement.id") == "choose"
    with page.expect_file_chooser() as chooser:
        page.keyboard.press("Enter")
    chooser.value.set_files(png)
    page.wait_for_function(SHOWN, timeout=30_000)
    assert page.locator("#top-class").text_content() == expected["class"]
