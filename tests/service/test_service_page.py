"""The service's page (``GET /``) against the real server (``python -m service`` in a child process).

Two parts, one server (started with ``PARSER_MAX_ITERATIONS=40``, so that a bound the page shows can only
have come from the service):

- through HTTP only: ``/confidence`` runs the inference of ``/parse`` and ``/marginals`` (it used a single
  tagging while they average over the model's tag samples), and ``GET /models`` states the request limits;
- in headless Chromium driven by Selenium (Debian: ``apt-get install chromium chromium-driver``; other paths
  through ``CHROMIUM`` and ``CHROMEDRIVER``), skipped with the reason when either or Selenium is missing: two
  typed sentences without tags are both drawn, from the server's tokens, and the tree, the heat map and the
  confidence table show the same probability for every arc; a failed parse leaves no diagnostics behind; the
  iterations box takes its bound from the API; relaxed inference can be chosen and shows intervals; a long
  sentence scrolls inside its panels at 1280 px. Every wait is on the page's state (``data-parsed`` on
  ``<body>``), with generous deadlines.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.service_helpers import ServerProcess, train_constituency

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
MAX_ITERATIONS = 40  # the server's PARSER_MAX_ITERATIONS here (the default is 50)
TWO_SENTENCES = "My neighbour's dog didn't bark. It slept in the garden."
CONSTITUENCY = "tiny-ptb"
DEADLINE = 180.0  # seconds for one parse on a loaded 2-core machine (it takes well under one alone)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, httpx.Client]]:
    data = tmp_path_factory.mktemp("page") / "data"
    train_constituency(data / "models" / CONSTITUENCY / "v1")  # a constituency model beside the shipped ones
    proc = ServerProcess(data, workers=0, env={"PARSER_MAX_ITERATIONS": str(MAX_ITERATIONS)})
    try:
        proc.wait_ready(timeout=300)
        with httpx.Client(base_url=proc.url, timeout=DEADLINE) as client:
            yield proc, client
    finally:
        proc.stop()


def _three(client: httpx.Client, body: dict[str, Any]) -> tuple[list[Any], list[Any], list[Any]]:
    out = []
    for route in ("/parse", "/marginals", "/confidence"):
        r = client.post(route, json=body)
        assert r.status_code == 200, (route, r.text)
        out.append(r.json()["sentences"])
    return out[0], out[1], out[2]


# -- through HTTP -------------------------------------------------------------------------------------
def test_confidence_is_the_inference_of_parse_and_marginals(server: tuple[ServerProcess, httpx.Client]) -> None:
    """Raw text for the default model (joint tags), with tag samples, and for the previous default (16 tag
    samples): /confidence's heads and probabilities are /parse's and /marginals' (it used one tagging and
    disagreed); an explicit tag_samples is accepted on /confidence."""
    _, c = server
    models = {m["name"]: m for m in c.get("/models").json()["models"]}
    assert models["en_ewt"]["default_tag_average"] == "joint"
    assert models["en_ewt-pipeline"]["default_tag_samples"] > 0
    for body in ({"text": TWO_SENTENCES}, {"text": TWO_SENTENCES, "inference": {"tag_samples": 3}},
                 {"text": TWO_SENTENCES, "model": "en_ewt-pipeline"}):
        parsed, marginals, confidence = _three(c, body)
        assert len(parsed) == len(marginals) == len(confidence) == 2
        for p, m, conf in zip(parsed, marginals, confidence, strict=True):
            assert [t["form"] for t in conf["tokens"]] == [t["form"] for t in p["tokens"]] == m["forms"]
            for t, u, row in zip(p["tokens"], conf["tokens"], m["marginals"], strict=True):
                assert u["head"] == t["head"]
                assert u["prob"] == pytest.approx(t["prob"], abs=1e-9) == pytest.approx(row[t["head"]], abs=1e-9)
                # bp: eta = 0, the interval is the point of the model's own (uncalibrated) marginal
                assert u["lower"] == u["upper"] == pytest.approx(u["model_prob"], abs=1e-12) and not u["vacuous"]
            default = models[str(body.get("model", "en_ewt"))]
            samples = body.get("inference", {}).get("tag_samples", default["default_tag_samples"])
            assert p["inference"]["tag_samples"] == conf["tag_samples"] == samples


def test_confidence_under_relaxed_inference_over_tag_samples(server: tuple[ServerProcess, httpx.Client]) -> None:
    """Relaxed inference averaged over tag samples: /confidence reports /parse's eta, the largest of the
    taggings' (so at least the best tagging's alone), and intervals around /parse's probabilities."""
    _, c = server
    body = {"text": "The dog barks.", "inference": {"method": "relaxed"}, "model": "en_ewt-pipeline"}  # 16 samples
    parsed, _, confidence = _three(c, body)
    single = c.post("/confidence", json={**body, "inference": {"method": "relaxed", "tag_samples": 0}}).json()
    (p,), (conf,) = parsed, confidence
    assert conf["method"] == "relaxed" and conf["eta"] == p["inference"]["eta"] >= single["sentences"][0]["eta"]
    for t, u in zip(p["tokens"], conf["tokens"], strict=True):
        assert u["head"] == t["head"] and u["prob"] == pytest.approx(t["prob"], abs=1e-9)
        assert u["lower"] <= u["model_prob"] <= u["upper"]  # around the model's own marginal
        assert u["vacuous"] == (u["lower"] == 0.0 and u["upper"] == 1.0)


def test_models_states_the_request_limits(server: tuple[ServerProcess, httpx.Client]) -> None:
    """GET /models gives the largest inference settings a request may give (the service's settings, here
    PARSER_MAX_ITERATIONS=40), and the service holds requests to them."""
    _, c = server
    limits = c.get("/models").json()["limits"]
    assert limits == {"iterations": MAX_ITERATIONS, "rounds": 100, "tag_samples": 16}
    body = {"tokens": [["Dogs", "bark", "."]], "tags": [["NOUN", "VERB", "PUNCT"]], "model": "en_ewt-o2"}
    ok = c.post("/parse", json={**body, "inference": {"method": "bp", "iterations": MAX_ITERATIONS}})
    assert ok.status_code == 200, ok.text
    over = c.post("/parse", json={**body, "inference": {"method": "bp", "iterations": MAX_ITERATIONS + 1}})
    assert over.status_code == 422 and over.json()["field"] == "inference.iterations"


# -- in the browser -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the test extra)")
    for path, what in ((CHROMIUM, "Chromium"), (CHROMEDRIVER, "chromedriver")):
        if shutil.which(path) is None:
            pytest.skip(f"{what} not found at {path}: apt-get install chromium chromium-driver, or set "
                        f"{'CHROMIUM' if what == 'Chromium' else 'CHROMEDRIVER'}")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--window-size=1280,1000", "--force-device-scale-factor=1"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_script_timeout(DEADLINE)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def page(server: tuple[ServerProcess, httpx.Client], browser: Any) -> Any:
    """The page, loaded afresh, after the parse of its example sentence that it runs on load."""
    browser.get(server[0].url + "/")
    _wait_parsed(browser)
    return browser


def _wait_parsed(driver: Any) -> str:
    from selenium.webdriver.support.ui import WebDriverWait

    state = "const s = document.body.dataset.parsed; return s === 'ok' || s === 'error' ? s : null"
    return str(WebDriverWait(driver, DEADLINE, poll_frequency=0.1).until(lambda d: d.execute_script(state)))


def _submit(driver: Any, text: str, *, tags: str = "", model: str | None = None, method: str = "",
            iterations: str = "") -> str:
    """Fill the form as a user would and press Parse; the page's state after the parse (``ok`` or ``error``)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    if model is not None:
        Select(driver.find_element(By.ID, "model")).select_by_value(model)
    if driver.find_element(By.ID, "method").is_enabled():  # off for a constituency model
        Select(driver.find_element(By.ID, "method")).select_by_value(method)
    for field, value in (("sentence", text), ("tags", tags), ("iterations", iterations)):
        box = driver.find_element(By.ID, field)
        if box.is_enabled():
            box.clear()
            box.send_keys(value)
    driver.execute_script("delete document.body.dataset.parsed")
    driver.find_element(By.ID, "go").click()
    return _wait_parsed(driver)


def _views(driver: Any) -> dict[str, Any]:
    """Per sentence, each word's head and probability as the tree, the heat map and the confidence table show
    them: the value behind each (``data-p``) and the text a reader sees."""
    return dict(driver.execute_script("""
        const rows = (sel, f) => [...document.querySelectorAll(sel)].map((e) => [
            Number(e.closest('.sent').dataset.sentence), Number(e.dataset.dep), Number(e.dataset.head),
            Number(e.dataset.p), f(e)]);
        return {
          tree: rows('#tree-wrap g.arc', (g) => g.querySelector('title').textContent),
          heat: rows('#heat td.chosen', (td) => td.title),
          conf: rows('#conf tr[data-dep]', (tr) => tr.querySelector('td.p').textContent),
          trees: document.querySelectorAll('#tree-wrap svg.tree').length,
          status: document.getElementById('status').textContent,
          tokens: document.getElementById('tokens-hint').textContent,
        };"""))


def test_page_draws_both_sentences_with_one_probability_per_arc(page: Any, server: tuple[ServerProcess, httpx.Client],
                                                               tmp_path: Path) -> None:
    """Two sentences typed without tags: both trees drawn, the words are the server's tokens ("neighbour 's",
    "did n't"), and for every arc the tree, the heat map (its chosen cell) and the confidence table show the
    probability /parse gives."""
    assert _submit(page, TWO_SENTENCES) == "ok"
    views = _views(page)
    page.save_screenshot(str(tmp_path / "page.png"))
    expected = server[1].post("/parse", json={"text": TWO_SENTENCES}).json()["sentences"]
    forms = [[t["form"] for t in s["tokens"]] for s in expected]
    assert forms[0][:7] == ["My", "neighbour", "'s", "dog", "did", "n't", "bark"] and len(forms) == 2
    assert views["trees"] == 2
    words = sum(map(len, forms))
    assert f"2 sentences, {words} tokens" in views["status"], views["status"]
    assert " | ".join(forms[0]) in views["tokens"] and " | ".join(forms[1]) in views["tokens"]
    by_view = {name: {(s, m): (h, p, shown) for s, m, h, p, shown in views[name]} for name in ("tree", "heat", "conf")}
    want = {(s, t["id"]): (t["head"], t["prob"]) for s, sent in enumerate(expected) for t in sent["tokens"]}
    assert all(set(view) == set(want) for view in by_view.values()), by_view
    for key, (head, prob) in want.items():
        for name, view in by_view.items():
            h, p, _ = view[key]
            assert h == head and p == pytest.approx(prob, abs=1e-9), (name, key, view[key], prob)
        assert f"p = {prob:.3f}" in by_view["tree"][key][2]
        assert by_view["heat"][key][2].endswith(f"= {prob:.4f} (chosen)")
        assert by_view["conf"][key][2] == f"{prob:.3f}"


def test_page_failed_parse_clears_the_diagnostics(page: Any) -> None:
    """After a parse, a failing one (a parser-only model given text without tags: 422) leaves no trace of the
    earlier parse's model and inference in the tree panel."""
    from selenium.webdriver.common.by import By

    assert _submit(page, TWO_SENTENCES) == "ok"
    meta = page.find_element(By.ID, "tree-meta")
    assert "model en_ewt" in meta.text
    assert _submit(page, TWO_SENTENCES, model="en_ewt-o1") == "error"
    assert "model" not in meta.text and "iterations" not in meta.text and "tag samples" not in meta.text
    assert not page.find_elements(By.CSS_SELECTOR, "#tree-wrap svg, #heat table, #conf table")
    assert "failed" in page.find_element(By.ID, "status").text
    assert page.find_element(By.ID, "errors").text  # the problem the server answered is shown


def test_page_takes_the_iterations_bound_from_the_api(page: Any, server: tuple[ServerProcess, httpx.Client]) -> None:
    """The iterations box's maximum is the service's (GET /models limits: 40 here, not a constant in the page);
    above it the page sends nothing and says why; at it the parse goes through with that setting."""
    from selenium.webdriver.common.by import By

    box = page.find_element(By.ID, "iterations")
    assert _submit(page, "Dogs bark.", method="bp", iterations=str(MAX_ITERATIONS + 1)) == "error"
    assert box.get_attribute("max") == str(MAX_ITERATIONS)
    assert f"1 to {MAX_ITERATIONS}" in page.find_element(By.ID, "errors").text
    assert not page.find_elements(By.CSS_SELECTOR, "#tree-wrap svg")  # nothing was sent, nothing drawn
    assert _submit(page, "Dogs bark.", method="bp", iterations=str(MAX_ITERATIONS)) == "ok"
    body = {"text": "Dogs bark.", "inference": {"method": "bp", "iterations": MAX_ITERATIONS}}
    (report,) = [s["inference"] for s in server[1].post("/parse", json=body).json()["sentences"]]
    assert f"bp, {report['iterations']} iterations" in page.find_element(By.ID, "tree-wrap").text


def test_page_offers_relaxed_inference_and_its_intervals(page: Any, server: tuple[ServerProcess, httpx.Client]) -> None:
    """Relaxed inference can be chosen; the confidence table then shows /confidence's intervals, which are not
    all points (eta > 0 on the second-order model)."""
    from selenium.webdriver.common.by import By

    assert _submit(page, "The dog barks .", tags="DET NOUN VERB PUNCT", model="en_ewt-o2", method="relaxed") == "ok"
    body = {"tokens": [["The", "dog", "barks", "."]], "tags": [["DET", "NOUN", "VERB", "PUNCT"]], "model": "en_ewt-o2",
            "inference": {"method": "relaxed"}}
    (conf,) = server[1].post("/confidence", json=body).json()["sentences"]
    assert conf["eta"] > 0 and any(t["lower"] < t["upper"] for t in conf["tokens"])
    shown = [row.text for row in page.find_elements(By.CSS_SELECTOR, "#conf tr[data-dep]")]
    for t, row in zip(conf["tokens"], shown, strict=True):
        assert f"[{t['lower']:.3f}, {t['upper']:.3f}]" in row
    assert "method relaxed" in page.find_element(By.ID, "conf").text


def test_page_long_sentence_scrolls_inside_its_panels(page: Any) -> None:
    """At 1280 px a 60-word sentence with a 120-character word neither widens the page nor runs out of a
    panel: the tree scrolls inside its panel."""
    words = " ".join(["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "and"] * 6)
    assert _submit(page, f"{words} {'x' * 120} ends here.") == "ok"
    widths = page.execute_script("""
        const root = document.documentElement;
        return {page: [root.scrollWidth, root.clientWidth],
                cards: [...document.querySelectorAll('section.card')].map((c) => [
                    c.querySelector('h2').textContent, c.scrollWidth, c.clientWidth]),
                tree: [...document.querySelectorAll('#tree-wrap .scroll')].map((s) => [
                    s.scrollWidth, s.clientWidth])};""")
    assert widths["page"][0] <= widths["page"][1], widths
    assert all(scroll <= client for _, scroll, client in widths["cards"]), widths
    assert any(scroll > client for scroll, client in widths["tree"]), widths  # wider than its panel: scrolls


def test_page_has_the_constituency_code_path(server: tuple[ServerProcess, httpx.Client]) -> None:
    """The page served draws a constituency model's tree and span marginals (``formalism`` of GET /models)."""
    html = server[1].get("/").text
    for code in ('entry().formalism === "constituency"', "function drawConstituency(", "function drawSpans(",
                 "drawConstituencyResults(parsed, marg"):
        assert code in html


def test_page_draws_a_constituency_tree_with_its_posteriors(page: Any,
                                                            server: tuple[ServerProcess, httpx.Client]) -> None:
    """A constituency model chosen: /parse and /marginals only; every node of the tree drawn carries the posterior
    /parse gives its labelled span (none for the root and a chain's inner node); the span table shows /marginals'
    spans; the confidence panel says it is for dependency models; the inference choice is off."""
    from selenium.webdriver.common.by import By

    text = "the dog saw a cat with a hat ."
    assert _submit(page, text, model=CONSTITUENCY) == "ok"
    (parsed,) = server[1].post("/parse", json={"model": CONSTITUENCY, "text": text}).json()["sentences"]
    (spans,) = server[1].post("/marginals", json={"model": CONSTITUENCY, "text": text}).json()["sentences"]
    nodes = page.execute_script("""return [...document.querySelectorAll('#tree-wrap svg.ctree g.node')].map((g) =>
        [g.dataset.label, Number(g.dataset.start), Number(g.dataset.end), g.dataset.p]);""")
    want = {(c["label"], c["start"], c["end"]): c["prob"] for c in parsed["constituents"] + parsed["tags"]}
    assert len(nodes) == len(want) + 1  # and TOP
    for label, start, end, p in nodes:
        if label == "TOP":
            assert (start, end, p) == (0, len(parsed["words"]), "")
        else:
            assert float(p) == pytest.approx(want[label, start, end], abs=1e-12)
    cells = page.execute_script("""return [...document.querySelectorAll('#heat td[data-start]')].map((td) =>
        [Number(td.dataset.start), Number(td.dataset.end), Number(td.dataset.p)]);""")
    n = len(spans["words"])
    assert len(cells) == n * (n + 1) // 2
    assert all(p == pytest.approx(spans["spans"][i][j], abs=1e-12) for i, j, p in cells)
    assert page.find_element(By.ID, "tree-h").text == "Constituency tree"
    assert "for dependency models" in page.find_element(By.ID, "conf").text
    assert not page.find_element(By.ID, "method").is_enabled()
    assert _submit(page, "Dogs bark.", model="en_ewt") == "ok"  # back to a dependency model: its views again
    assert page.find_element(By.ID, "tree-h").text == "Dependency tree"
    assert page.find_elements(By.CSS_SELECTOR, "#tree-wrap g.arc")
