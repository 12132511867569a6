"""The browser console (/console) in headless Chromium through Playwright,
against a real `tensorfold serve` on the tiny model: the plots move while a
load runs, the rate rules are rates.py's, a stored response opens, is
deleted (one, or many with checkboxes), the listing pages by 20, a stored
conversation takes a new turn, and with --api-key the page asks for the key.
No test may leave a page error or console error behind. The load test keeps
a screenshot in .artifacts/console.png."""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tensorfold.client import RateTracker, State

from .conftest import SERVE_ARGS, make_supervisor

CHROMIUM = Path("/usr/bin/chromium")
try:
    from playwright.sync_api import Browser, Page, expect, sync_playwright
except ImportError:
    pytest.skip("the playwright package is not installed (pip install -e '.[test]')", allow_module_level=True)
if not CHROMIUM.is_file():
    pytest.skip(f"no system Chromium at {CHROMIUM} (scripts/test-system-packages installs it)",
                allow_module_level=True)
try:
    import tensorfold_console
except ImportError:
    pytest.skip("the tensorfold_console package is not importable (reinstall: pip install -e .)",
                allow_module_level=True)
if not tensorfold_console.vendor_built():
    pytest.skip("the console's chart library is not built: run scripts/build-console", allow_module_level=True)

pytestmark = pytest.mark.ui

ARTIFACTS = Path(__file__).resolve().parents[2] / ".artifacts"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
VIEWPORT = {"width": 1152, "height": 900}      # a laptop window at 80%
INTERVAL_MS = 250
WAIT_MS = 90_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


class Tab:
    """A fresh browser context on the console, collecting page and console errors."""

    def __init__(self, browser: Browser, base_url: str) -> None:
        self.base_url = base_url
        self.context = browser.new_context(viewport=VIEWPORT)
        self.page: Page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(f"page error: {exc}"))
        self.page.on("console", lambda msg: self.errors.append(f"console.{msg.type}: {msg.text}")
                     if msg.type in ("error", "warning") else None)

    def open(self) -> Page:
        self.page.goto(f"{self.base_url}/console/?interval={INTERVAL_MS}")
        return self.page

    def row(self, response_id: str):
        return self.page.locator(f'#responses-rows tr[data-id="{response_id}"]')

    def assert_clean(self, expected: tuple[str, ...] = ()) -> None:
        """No errors but those containing one of `expected`."""
        left = [e for e in self.errors if not any(x in e for x in expected)]
        assert left == [], left


@pytest.fixture
def tab(browser: Browser, live_daemon) -> Iterator[Tab]:
    tab = Tab(browser, live_daemon.url)
    try:
        yield tab
    finally:
        tab.context.close()


def store(http: httpx.Client, text: str, **extra) -> dict:
    r = http.post("/v1/responses", json={"input": text, "max_output_tokens": 12, **extra})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture
def http(live_daemon) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live_daemon.url, timeout=120) as client:
        yield client


class Load:
    """Threads posting chat completions and responses until stopped."""

    def __init__(self, url: str, threads: int = 2) -> None:
        self.url = url
        self.stop = threading.Event()
        self.done = 0
        self.failures: list[str] = []
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)]

    def _run(self, index: int) -> None:
        with httpx.Client(base_url=self.url, timeout=120) as http:
            turn = 0
            while not self.stop.is_set():
                turn += 1
                if (index + turn) % 2:
                    r = http.post("/v1/chat/completions", json={
                        "messages": [{"role": "user", "content": f"Count to {turn + 3}, please."}],
                        "max_tokens": 24})
                else:
                    r = http.post("/v1/responses", json={"input": f"Load turn {turn} of worker {index}.",
                                                         "max_output_tokens": 24})
                if r.status_code != 200:
                    self.failures.append(r.text)
                self.done += 1

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(120)


HAS_DECODE = """() => {
  const c = window.tensorfoldConsole;
  return !!c && c.charts.plots.tokens.data[1].some(v => v > 0)
      && c.charts.plots.requests.data[1].some(v => v > 0);
}"""


def test_plots_move_while_a_load_runs(tab: Tab, http: httpx.Client, live_daemon):
    page = tab.open()
    health = http.get("/health").json()
    expect(page.locator('[data-fact="model"]')).to_have_text(health["model"])
    expect(page.locator('[data-fact="engine"]')).to_have_text(health["engine"])
    expect(page.locator('[data-fact="lanes"]')).to_have_text("2")
    expect(page.locator('[data-fact="context"]')).to_contain_text(f"{health['context_length']:,} tokens")
    expect(page.locator('[data-fact="drafter"]')).to_have_text(health["drafter"])

    with Load(live_daemon.url) as load:
        page.wait_for_function(HAS_DECODE, timeout=WAIT_MS)
        points = page.evaluate("() => window.tensorfoldConsole.charts.plots.tokens.data[0].length")
        page.wait_for_function(f"() => window.tensorfoldConsole.charts.plots.tokens.data[0].length > {points + 8}",
                               timeout=WAIT_MS)
        page.wait_for_function("() => parseFloat(document.querySelector("
                               "'[data-rate=decode_tps] .value').textContent) > 0", timeout=WAIT_MS)
    assert load.done > 0 and load.failures == []

    tokens = page.evaluate("() => window.tensorfoldConsole.charts.plots.tokens.data")
    times, decode = tokens[0], tokens[1]
    assert len(times) == len(decode) >= 3
    assert times == sorted(times) and len(set(times)) == len(times)
    assert max(v for v in decode if v is not None) > 0
    ratios = page.evaluate("() => window.tensorfoldConsole.charts.plots.ratios.data")
    assert all(v is None or 0 <= v <= 1 for series in ratios[1:] for v in series)

    # the load's responses are listed; open the newest for the screenshot
    page.click("#responses-refresh")
    first = page.locator("#responses-rows tr[data-id] button.link").first
    expect(first).to_be_visible()
    first.click()
    expect(page.locator("#detail")).to_be_visible()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "console.png"), full_page=True)
    tab.assert_clean()


def test_the_rate_rules_are_those_of_rates_py(tab: Tab):
    samples = [
        ({"completion_tokens_total": 0, "prompt_tokens_total": 0, "requests_total": 0}, 10.0),
        ({"completion_tokens_total": 50, "prompt_tokens_total": 200, "requests_total": 2, "cached_tokens_total": 50,
          "drafted_total": 10, "accepted_total": 7, "requests_running": 2, "requests_waiting": 1}, 12.0),
        ({"completion_tokens_total": 80, "prompt_tokens_total": 200, "requests_total": 2, "cached_tokens_total": 50,
          "drafted_total": 10, "accepted_total": 7, "requests_running": True}, 12.5),
        ({"completion_tokens_total": 90, "prompt_tokens_total": 200, "requests_total": 3}, 12.5),  # no time passed
        ({"completion_tokens_total": 5, "prompt_tokens_total": 10, "requests_total": 1}, 13.0),    # a restart
        ({"completion_tokens_total": 25, "prompt_tokens_total": 30, "requests_total": 2,
          "cached_tokens_total": 30}, 14.0),
    ]
    tracker = RateTracker()
    expected = [tracker.sample(health, now) for health, now in samples]
    tab.open()
    got = tab.page.evaluate("""(samples) => {
      const tracker = new window.tensorfoldConsole.RateTracker();
      return samples.map(([health, now]) => tracker.sample(health, now));
    }""", [list(s) for s in samples])
    assert [g is None for g in got] == [e is None for e in expected] == [True, False, False, True, True, False]
    for g, e in zip(got, expected):
        if e is not None:
            assert set(g) == set(e)
            for key, value in e.items():
                assert (g[key] is None) if value is None else math.isclose(g[key], value), key
    tab.assert_clean()


def test_a_stored_response_opens_and_is_deleted(tab: Tab, http: httpx.Client):
    stored = store(http, "Remember the word lantern.", metadata={"case": "open-delete"})
    page = tab.open()
    row = tab.row(stored["id"])
    expect(row).to_have_count(1)
    row.locator("button.link").click()
    expect(page.locator("#detail")).to_be_visible()
    expect(page.locator("#detail-id")).to_have_text(stored["id"])
    expect(page.locator("#detail-input")).to_contain_text("Remember the word lantern.")
    expect(page.locator("#detail-output li")).to_have_count(len(stored["output"]))
    usage = page.locator("#detail-usage tr", has=page.locator("th", has_text=re.compile(r"^output_tokens$")))
    expect(usage.locator("td")).to_have_text(str(stored["usage"]["output_tokens"]))
    expect(page.locator("#detail-metadata")).to_contain_text("case")
    expect(page.locator("#detail-metadata")).to_contain_text("open-delete")

    page.click("#detail-delete")
    expect(row).to_have_count(0)
    expect(page.locator("#detail")).to_be_hidden()
    assert http.get(f"/v1/responses/{stored['id']}").status_code == 404
    tab.assert_clean()


def test_delete_selected_removes_the_checked_responses(tab: Tab, http: httpx.Client):
    ids = [store(http, f"Selection test {i}.")["id"] for i in range(3)]
    page = tab.open()
    for response_id in ids[:2]:
        tab.row(response_id).locator("input[type=checkbox]").check()
    expect(page.locator("#responses-delete")).to_have_text("Delete selected (2)")
    page.click("#responses-delete")
    for response_id in ids[:2]:
        expect(tab.row(response_id)).to_have_count(0)
        assert http.get(f"/v1/responses/{response_id}").status_code == 404
    expect(tab.row(ids[2])).to_have_count(1)
    assert http.get(f"/v1/responses/{ids[2]}").status_code == 200
    expect(page.locator("#responses-delete")).to_be_disabled()
    tab.assert_clean()


def test_the_listing_pages_by_twenty(tab: Tab, http: httpx.Client):
    while True:
        listing = http.get("/v1/responses", params={"limit": 21}).json()
        if len(listing["data"]) == 21:
            break
        store(http, "Paging filler.", max_output_tokens=2)
    first_page = http.get("/v1/responses", params={"limit": 20}).json()
    second_page = http.get("/v1/responses", params={"limit": 20, "after": first_page["last_id"]}).json()
    page = tab.open()
    rows = page.locator("#responses-rows tr[data-id]")
    expect(rows).to_have_count(20)
    expect(rows.first).to_have_attribute("data-id", first_page["data"][0]["id"])
    expect(page.locator("#responses-prev")).to_be_disabled()
    page.click("#responses-next")
    expect(page.locator("#responses-page")).to_have_text("page 2")
    expect(rows.first).to_have_attribute("data-id", second_page["data"][0]["id"])
    expect(rows).to_have_count(len(second_page["data"]))
    page.click("#responses-prev")
    expect(page.locator("#responses-page")).to_have_text("page 1")
    expect(rows.first).to_have_attribute("data-id", first_page["data"][0]["id"])
    tab.assert_clean()


def test_a_stored_conversation_takes_a_new_turn(tab: Tab, http: httpx.Client):
    first = store(http, "My name is Ada.")
    page = tab.open()
    tab.row(first["id"]).locator("button.link").click()
    expect(page.locator("#detail-id")).to_have_text(first["id"])
    page.fill("#continue-input", "What is my name?")
    page.click("#continue-send")
    expect(page.locator("#detail-id")).not_to_have_text(first["id"], timeout=WAIT_MS)
    new_id = page.locator("#detail-id").text_content()
    assert new_id.startswith("resp")
    assert http.get(f"/v1/responses/{new_id}").json()["previous_response_id"] == first["id"]
    expect(page.locator("#detail-summary")).to_contain_text(f"continues {first['id']}")
    conversation = page.locator("#detail-input li")
    expect(conversation.first).to_contain_text("My name is Ada.")
    expect(conversation.last).to_contain_text("What is my name?")
    expect(tab.row(new_id)).to_have_count(1)
    tab.assert_clean()


def test_with_an_api_key_the_page_asks_for_it_and_keeps_it(browser: Browser, tmp_path, tiny_model):
    sup = make_supervisor(tmp_path)
    sup.start(str(tiny_model), SERVE_ARGS + ["--api-key", "k"])
    tab = None
    try:
        assert sup.wait(State.SERVING, State.ERROR, timeout=120).state is State.SERVING
        with httpx.Client(base_url=sup.url, timeout=120, headers={"Authorization": "Bearer k"}) as http:
            stored = store(http, "Keyed conversation.")
        tab = Tab(browser, sup.url)
        page = tab.open()
        expect(page.locator("#key-panel")).to_be_visible()
        page.fill("#key-input", "wrong")
        page.click("#key-form button[type=submit]")
        expect(page.locator("#key-message")).to_contain_text("refused")
        expect(page.locator("#key-panel")).to_be_visible()
        page.fill("#key-input", "k")
        page.click("#key-form button[type=submit]")
        expect(page.locator("#key-panel")).to_be_hidden()
        expect(tab.row(stored["id"])).to_have_count(1)
        assert page.evaluate("() => sessionStorage.getItem('tensorfold.apiKey')") == "k"

        page.reload()                                     # the key is kept for the tab
        expect(tab.row(stored["id"])).to_have_count(1)
        expect(page.locator("#key-panel")).to_be_hidden()
        expect(page.locator("#forget-key")).to_be_visible()
        tab.row(stored["id"]).locator("button.link").click()
        expect(page.locator("#detail-input")).to_contain_text("Keyed conversation.")
        # the browser logs each refused fetch; those two 401s are the page asking for the key
        tab.assert_clean(expected=("status of 401",))
        assert sum("status of 401" in e for e in tab.errors) == 2
    finally:
        if tab is not None:
            tab.context.close()
        sup.stop()
