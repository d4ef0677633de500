"""The HTML report in a real headless Chromium: the headline and the reviewer's lists are
visible (displayed, of non-zero size, within the page's width) and show the figures of
``dreads report --json``; no table is wider than the page at 1280 px; every plot has one size.

``REPORT_PAGE_SCREENSHOT=docs/images/report.png`` saves the top of the page there (the
screenshot in docs/commands.md).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from app.cli import app
from tests.fixtures.browser import needs_chromium
from tests.fixtures.sim import MakeSim

pytestmark = needs_chromium

ROOT = Path(__file__).resolve().parents[3]
SCREENSHOT_ENV = "REPORT_PAGE_SCREENSHOT"
runner = CliRunner()

#: The element's box and whether Chromium shows it, read from the DOM.
_BOX = """
const e = arguments[0], r = e.getBoundingClientRect();
return {left: r.left, right: r.right, width: r.width, height: r.height,
        page: document.documentElement.clientWidth};
"""
_WIDTHS = """
const page = document.documentElement;
return {scroll: page.scrollWidth, client: page.clientWidth,
        tables: [...document.querySelectorAll("table")].map(
            (t) => t.getBoundingClientRect().right),
        plots: [...document.querySelectorAll("#plots img")].map(
            (i) => [i.naturalWidth, i.naturalHeight, Math.round(i.getBoundingClientRect().width)])};
"""


def _report(make_sim: MakeSim, tmp_path: Path) -> tuple[dict[str, Any], Path]:
    """The example contracts run against a simulator that misses a positive and flags many
    negatives; its ``--json`` report and its HTML page."""
    sim = make_sim(key_path=str(ROOT / "examples" / "contracts.key.jsonl"), separation=1.0,
                   miscalibration=0.5, record_bodies=0)
    db = tmp_path / "runs.db"
    result = runner.invoke(app, ["run", str(ROOT / "examples" / "contracts.jsonl"),
                                 "--upstream", sim.url, "--db", str(db), "--run", "contracts"])
    sim.stop()
    assert result.exit_code == 0, result.output
    page = tmp_path / "report.html"
    result = runner.invoke(app, ["report", "contracts", "--json", "--html", str(page),
                                 "--database-url", f"sqlite:///{db}"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), page


def _visible(browser: Any, element: Any) -> None:
    box = browser.execute_script(_BOX, element)
    assert element.is_displayed()
    assert box["width"] > 0 and box["height"] > 0
    assert box["left"] >= 0 and box["right"] <= box["page"], box


def _card(browser: Any, key: str) -> str:
    from selenium.webdriver.common.by import By

    card = browser.find_element(By.CSS_SELECTOR, f'#headline [data-figure="{key}"]')
    _visible(browser, card)
    return str(card.text)


def _listed(browser: Any, list_id: str) -> list[list[str]]:
    from selenium.webdriver.common.by import By

    section = browser.find_element(By.ID, list_id)
    _visible(browser, section)
    rows = section.find_elements(By.CSS_SELECTOR, "tbody tr")
    for row in rows:
        _visible(browser, row)
    return [[c.text for c in row.find_elements(By.TAG_NAME, "td")] for row in rows]


def test_report_page_shows_headline_and_lists(make_sim: MakeSim, tmp_path: Path,
                                              browser: Any) -> None:
    doc, page = _report(make_sim, tmp_path)
    (one,) = doc["headline"]["noul"]["questions"].values()
    h, lists = one["figures"], doc["review"]
    assert lists["missed_positives"]["total"] >= 1
    assert lists["false_positives"]["total"] > len(lists["false_positives"]["items"]) == 20
    browser.set_window_size(1280, 1000)
    browser.get(page.as_uri())

    assert f"{h['auc']:.4g}" in _card(browser, "auc")
    assert f"{h['recall_hits']}/{h['positives']}" in _card(browser, "recall")
    assert f"{h['top_share_hits']}/{h['positives']}" in _card(browser, "top_share")
    assert _card(browser, "false_positives").split("\n")[1].startswith(f"{h['fp_count']} (")
    assert f"{h['ece']:.3g} raw [" in _card(browser, "ece")
    assert f"{h['auc']:.4g} [" in _card(browser, "auc")  # every figure with its interval
    questions = doc["headline"]["questions"]
    assert f"{doc['headline']['unanswered']}/{questions}" in _card(browser, "unanswered")
    assert "dgemma" in _card(browser, "model") and "yes" in _card(browser, "simulator")

    for list_id, key in (("missed-positives", "missed_positives"),
                         ("false-positives", "false_positives")):
        shown = _listed(browser, list_id)
        items = lists[key]["items"]
        assert [(r[0], r[3]) for r in shown] == [(i["decision"], f"{i['p_yes']:.3f}")
                                                 for i in items]
        assert all(r[5] == i["state"] for r, i in zip(shown, items, strict=True))
    p_false = [i["p_yes"] for i in lists["false_positives"]["items"]]
    assert p_false == sorted(p_false, reverse=True)

    widths = browser.execute_script(_WIDTHS)
    assert widths["scroll"] <= widths["client"], widths
    assert all(right <= widths["client"] for right in widths["tables"]), widths
    assert len(widths["plots"]) == 4 and len({tuple(p) for p in widths["plots"]}) == 1, widths
    _save_screenshot(browser, tmp_path)


def _save_screenshot(browser: Any, tmp_path: Path) -> None:
    """The top of the page (headline and lists) as a small palette PNG, when asked for."""
    from PIL import Image

    path = tmp_path / "report.png"
    browser.save_screenshot(str(path))
    target = os.environ.get(SCREENSHOT_ENV)
    if target:
        with Image.open(path) as shot:
            shot.convert("RGB").quantize(colors=64).save(target, optimize=True)
