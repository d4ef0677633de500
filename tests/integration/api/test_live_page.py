"""The live run page in a real headless Chromium (Debian's, driven by Selenium with the system
chromedriver): log in with the API key, watch a simulated run's numbers move, and find them
equal to ``dreads status --json`` once it is finished, with the failures, the rejected
decision, the label-mass warnings and the report link."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.fixtures.api import ServeProcess
from tests.fixtures.browser import needs_chromium
from tests.fixtures.services import VENV_BIN, wait_until
from tests.integration.durability.harness import Sim

pytestmark = needs_chromium

KEY = "live-page-key-0123456789abcdef"
ROOT = Path(__file__).resolve().parents[3]
#: Slow enough to watch (6 reads per 100 ms step), with 500s, low label mass and a small
#: context so the one long decision is rejected before any read.
SIM_ARGS = ("--step-ms", "100", "--max-batch", "6", "--fail-rate", "0.05",
            "--low-mass-rate", "0.3", "--max-model-len", "1024", "--seed", "5")
#: Where a copy of the final screenshot goes (for the closing note), when set.
SCREENSHOT_ENV = "LIVE_PAGE_SCREENSHOT"


def _job(n: int) -> bytes:
    lines = (ROOT / "examples" / "contracts.jsonl").read_text().splitlines()[:n]
    # over the simulator's 1,024 tokens, so rejected when read, yet under the length a line
    # is refused by at submit (1,024 tokens of at most 10 characters)
    long = {"id": "too-long", "cell": "C9/long", "state": "word " * 1500,
            "questions": {"q": {"type": "noul", "instructions": "Is it long?"}}}
    return ("\n".join([*lines, json.dumps(long)]) + "\n").encode()


#: Reads what the page shows in one go (a render between two reads cannot mix them).
_READ_PAGE = """
const num = (id) => parseInt(document.getElementById(id).textContent, 10);
const cells = {};
for (const tr of document.querySelectorAll("#cells tr[data-cell]")) {
  const get = (k) => parseInt(tr.querySelector("td." + k).textContent, 10);
  cells[tr.dataset.cell] = {"done": get("done"), "total": get("total"),
                            "failures": get("failures"), "low-mass": get("low-mass")};
}
const failures = {};
for (const tr of document.querySelectorAll("#failures tr[data-kind]")) {
  failures[tr.dataset.kind] = [parseInt(tr.cells[2].textContent, 10), tr.cells[3].textContent,
                               tr.cells[1].textContent];
}
return {
  status: document.getElementById("run-status").textContent,
  done: num("done"), total: num("total"), remaining: num("remaining"),
  failed: num("failed"), rejected: num("rejected"), cells: cells, failures: failures,
  rejections: document.getElementById("rejections").textContent,
  infrastructure: [...document.querySelectorAll("#infrastructure li")].map((l) => l.textContent),
  warnings: [...document.querySelectorAll("#warnings .warn")].map((w) => w.textContent),
  report: !document.getElementById("report-link").hidden,
};
"""


def _page(driver: Any) -> dict[str, Any]:
    """What the page shows now, read from the DOM."""
    return dict(driver.execute_script(_READ_PAGE))


def _status_json(db_url: str, run: str) -> dict[str, Any]:
    out = subprocess.run([str(VENV_BIN / "dreads"), "status", run, "--json", "--database-url",
                          db_url], capture_output=True, text=True, timeout=60, check=True)
    return dict(json.loads(out.stdout))


def test_live_page_follows_a_run_and_matches_status(
        tmp_path: Path, serve_factory: Callable[..., ServeProcess], browser: Any) -> None:
    from selenium.webdriver.common.by import By

    sim = Sim(tmp_path / "sim.log", *SIM_ARGS)
    try:
        db_url = f"sqlite:///{tmp_path / 'live.db'}"
        server = serve_factory("--upstream", sim.url, "--database-url", db_url, env={
            "DREADS_API_KEY": KEY, "DREADS_READ_RETRIES": "0"})
        submitted = httpx.post(f"{server.url}/v1/runs", params={"run": "live"},
                               content=_job(150), timeout=60.0,
                               headers={"authorization": f"Bearer {KEY}",
                                        "content-type": "application/x-ndjson"})
        assert submitted.status_code == 201, submitted.text

        # The page is behind the key: the login form, then the page with a session cookie.
        browser.get(f"{server.url}/runs/live")
        assert "/login" in browser.current_url
        browser.find_element(By.ID, "key").send_keys("not-the-key")
        browser.find_element(By.ID, "login").click()
        error = wait_until(lambda: browser.find_elements(By.ID, "login-error"), timeout_s=20,
                           what="the login form to refuse the wrong key")
        assert "API key" in error[0].text
        browser.find_element(By.ID, "key").send_keys(KEY)
        browser.find_element(By.ID, "login").click()
        wait_until(lambda: browser.current_url == f"{server.url}/runs/live" and
                   browser.find_elements(By.ID, "cells"), timeout_s=20,
                   what="the run page after the login")
        assert httpx.get(f"{server.url}/runs/live/live").status_code == 401

        # The numbers move by themselves while the run progresses.
        seen: list[int] = []
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            page = _page(browser)
            if not seen or page["done"] != seen[-1]:
                seen.append(page["done"])
            if page["status"] == "finished":
                break
            time.sleep(0.3)
        assert page["status"] == "finished", seen
        assert len(seen) >= 4 and seen == sorted(seen), seen

        # Finished: the page shows what `dreads status --json` reports.
        status = _status_json(db_url, "live")
        page = wait_until(lambda: (p := _page(browser))["report"] and p, timeout_s=20,
                          what="the report link")
        _save_screenshot(browser, tmp_path)
    finally:
        sim.stop()
    counts = status["counts"]
    assert (page["done"], page["total"], page["remaining"]) == \
        (counts.get("done", 0), status["total"], 0)
    assert (page["failed"], page["rejected"]) == (counts.get("failed", 0), 1)
    assert page["cells"] == {
        c["cell"]: {"done": c["done"], "total": c["total"], "low-mass": c["low_mass"],
                    "failures": sum(c["failures"].values())} for c in status["cells"]}
    by_kind: dict[str, int] = {}
    for cell in status["cells"]:
        for kind, n in cell["failures"].items():
            by_kind[kind] = by_kind.get(kind, 0) + n
    infrastructure = {k["kind"]: k["attempts"] for k in status["infrastructure"]["kinds"]}
    assert {k: n for k, (n, _, _) in page["failures"].items()} == by_kind | infrastructure
    # a 500 is the server's: the run's infrastructure, never a cell's failure
    assert "server_error" not in by_kind and infrastructure.get("server_error", 0) > 0
    _, latest, shown_class = page["failures"]["server_error"]
    assert latest and shown_class == "infrastructure"
    assert page["infrastructure"] == status["infrastructure"]["lines"]
    assert "too-long" in page["rejections"] and "1024" in page["rejections"]
    flagged = {c["cell"] for c in status["cells"]
               if c["questions"] > c["unanswered"]
               and c["low_mass"] / (c["questions"] - c["unanswered"]) >= 0.1}
    assert flagged and len(page["warnings"]) == len(flagged)
    assert all(any(f"cell {cell} " in w for w in page["warnings"]) for cell in flagged)
    browser.find_element(By.ID, "report-link").click()
    assert "dreads report" in browser.title


def _save_screenshot(browser: Any, tmp_path: Path) -> None:
    path = tmp_path / "live-page.png"
    browser.save_screenshot(str(path))
    target = os.environ.get(SCREENSHOT_ENV)
    if target:
        shutil.copy(path, target)
