"""The page at / in a real browser: headless Chromium (or Chrome) driven by Playwright loads it
from a real server, uploads an image file and shows the class predict.py gives it. On the
digits' export: the page uploads a digit's PNG file. A table's page is a form of its columns, a
text model's a text box."""

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import FAST_LATENCY, compose_config, run_predict, save_pngs
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


def open_page(browser, server) -> tuple:
    """The server's page in a new tab, and the list its script errors go to."""
    page, errors = browser.new_page(), []
    page.on("pageerror", lambda error: errors.append(error))  # Playwright takes no builtins
    page.goto(f"{server.url}/")
    return page, errors


def test_the_page_shows_the_top_classes_of_an_uploaded_image(
    browser, server, digits_export, tmp_path
):
    (png,) = save_pngs(load_digits().images[3:4], tmp_path / "images")
    (expected,) = run_predict(digits_export, png, tmp_path / "predict", "top_k=5")
    page, errors = open_page(browser, server)
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


def accessibility_violations(page) -> list:
    """What axe-core finds on the page: each rule broken, with the elements that break it."""
    if not AXE.is_file():
        pytest.fail(
            f"no axe-core at {AXE}: npm install --prefix ~/.cache/axe-core axe-core, or set "
            "AXE_CORE to axe.min.js",
            pytrace=False,
        )
    page.add_script_tag(path=AXE)
    violations = page.evaluate("async () => (await axe.run()).violations")
    return [(v["id"], [n["target"] for n in v["nodes"]]) for v in violations]


def test_the_page_has_no_accessibility_violations_and_says_what_training_images_look_like(
    browser, server, digits_export
):
    page = browser.new_page()
    page.goto(f"{server.url}/")
    assert accessibility_violations(page) == []
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


@pytest.fixture(scope="module")
def table_export(tmp_path_factory):
    """A classifier of a table with a number, a category, a date and a time column, briefly
    trained and exported."""
    from {{ cookiecutter.package }}.tasks.export import export
    from {{ cookiecutter.package }}.tasks.train import train

    folder = tmp_path_factory.mktemp("table_page")
    days = pd.date_range("2024-01-01", periods=80, freq="D")
    colours = np.array(["red", "green", "blue", "amber"])[np.arange(80) % 4]
    size = np.linspace(0, 10, 80)
    pd.DataFrame(
        {
            "size": size,
            "colour": colours,
            "day": days.strftime("%Y-%m-%d"),
            "time": (days + pd.Timedelta(hours=9)).strftime("%Y-%m-%d %H:%M"),
            "label": np.where(size > 5, "large", "small"),
        }
    ).to_csv(folder / "rows.csv", index=False)
    data = ["data=table", f"data.path={folder / 'rows.csv'}", "data.target=label"]
    train(compose_config("train", folder / "run", [*data, "trainer.max_epochs=2", "test=false"]))
    best = folder / "run" / "checkpoints" / "best.ckpt"
    overrides = [f"ckpt_path={best}", "formats=[onnx]", *FAST_LATENCY]
    export(compose_config("export", folder / "export", overrides, quiet=False))
    return folder / "export"


def test_a_tables_page_offers_each_columns_choices_and_shows_the_class_predict_py_gives(
    browser, table_export, tmp_path
):
    row = {"size": 7.5, "colour": "blue", "day": "2024-02-03", "time": "2024-02-03T09:00"}
    pd.DataFrame([row]).to_csv(tmp_path / "row.csv", index=False)
    (expected,) = run_predict(table_export, tmp_path / "row.csv", tmp_path / "predict")
    manifest = Manifest.read(table_export / "manifest.json")
    (colour,) = [c for c in manifest.preprocessing.columns if c.name == "colour"]
    (tmp_path / "serve").mkdir()
    with Server(table_export, tmp_path / "serve") as server:
        page, errors = open_page(browser, server)
        # A category is chosen among those seen in training, or left empty (a missing value).
        options = page.locator("select[name=colour] option").all_inner_texts()
        assert options == ["", *colour.vocabulary]
        assert page.locator("input[name=size]").get_attribute("type") == "number"
        assert page.locator("input[name=day]").get_attribute("type") == "date"
        assert page.locator("input[name=time]").get_attribute("type") == "datetime-local"
        assert accessibility_violations(page) == []
        page.fill("input[name=size]", str(row["size"]))
        page.select_option("select[name=colour]", row["colour"])
        page.fill("input[name=day]", row["day"])
        page.fill("input[name=time]", row["time"])
        page.click("#table-form button[type=submit]")
        page.wait_for_function(SHOWN, timeout=30_000)
        assert page.locator("#top-class").text_content() == expected["class"]
    assert not errors


def test_a_texts_page_has_a_text_box_and_shows_the_class_predict_py_gives(
    browser, text_export, tmp_path
):
    sentence = "The rocket left its orbit for the moon."
    (tmp_path / "text.txt").write_text(sentence)
    (expected,) = run_predict(text_export, tmp_path / "text.txt", tmp_path / "predict")
    (tmp_path / "serve").mkdir()
    with Server(text_export, tmp_path / "serve") as server:
        page, errors = open_page(browser, server)
        assert accessibility_violations(page) == []
        page.fill("textarea[name=text]", sentence)
        page.click("#table-form button[type=submit]")
        page.wait_for_function(SHOWN, timeout=30_000)
        assert page.locator("#top-class").text_content() == expected["class"]
    assert not errors
