"""Defects 1 and 3-6 of the service-hardening issue, each through the real server (``python -m service``):
bad input is a 422 problem naming the field, never a 500, and never silently accepted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from service_helpers import ServerProcess

PROBLEM = "application/problem+json"
ROUTES = ("/parse", "/marginals", "/confidence", "/kbest", "/sample")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    proc = ServerProcess(tmp_path_factory.mktemp("defects") / "data")
    try:
        proc.wait_ready(timeout=300)
        with httpx.Client(base_url=proc.url, timeout=120) as client:
            yield client
    finally:
        proc.stop()


def _problem(r: httpx.Response, field: str) -> dict:
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith(PROBLEM)
    doc = r.json()
    assert doc["status"] == 422 and doc["field"] == field, doc
    return doc


def _post(client: httpx.Client, route: str, raw: str) -> httpx.Response:
    """A body sent as raw JSON text (so that \\ud800 escapes reach the server as they are)."""
    return client.post(route, content=raw.encode("ascii"), headers={"content-type": "application/json"})


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("field", ["tokens", "tags", "xpos"])
def test_lone_surrogate_in_a_word_list_is_422(server: httpx.Client, route: str, field: str) -> None:
    """Defect 1: a lone surrogate in tokens, tags or xpos raised UnicodeEncodeError in feature hashing (500)."""
    lists = {"tokens": ["a", "b"], "tags": ["DET", "NOUN"], "xpos": ["DT", "NN"]}
    lists[field] = [lists[field][0], "\\ud800"]
    raw = json.dumps({"model": "en_ewt-o1", **{k: [v] for k, v in lists.items()}}).replace("\\\\ud800", "\\ud800")
    doc = _problem(_post(server, route, raw), field)
    assert doc["sentence"] == 0 and doc["word"] == 1 and "surrogate" in doc["detail"]


@pytest.mark.parametrize("field", ["tags", "xpos"])
@pytest.mark.parametrize("source", ["text", "conllu"])
def test_tags_without_tokens_are_422(server: httpx.Client, field: str, source: str) -> None:
    """Defect 3: tags sent with text (or CoNLL-U) were silently ignored."""
    given = {"text": "The dog barks.", "conllu": "1\tThe\t_\tDET\tDT\t_\t_\t_\t_\t_\n\n"}[source]
    doc = _problem(server.post("/parse", json={source: given, field: [["NOUN"]]}), field)
    assert "tokens" in doc["detail"]


def test_word_limit_holds_for_text(server: httpx.Client) -> None:
    """Defect 4: a 100,000-character word passed through `text` while the same word in `tokens` was refused."""
    long_word = "a" * 1000
    _problem(server.post("/parse", json={"tokens": [[long_word]]}), "tokens")
    doc = _problem(server.post("/parse", json={"text": f"The {long_word} barks."}), "text")
    assert "200 characters" in doc["detail"]


def test_no_sentences_is_422(server: httpx.Client) -> None:
    """Defect 5: {"tokens": []} answered 200 with nothing, while {"text": ""} was 422."""
    _problem(server.post("/parse", json={"tokens": []}), "tokens")
    _problem(server.post("/parse", json={"tokens": [], "output": "conllu"}), "tokens")
    assert server.post("/parse", json={"text": ""}).status_code == 422


def test_unknown_upos_tag_is_422_naming_the_tag_set(server: httpx.Client) -> None:
    """Defect 6: tags outside the UPOS set were accepted."""
    doc = _problem(server.post("/parse", json={"model": "en_ewt-o1", "tokens": [["a", "b"]],
                                               "tags": [["FOO", "BAR"]]}), "tags")
    assert "'FOO'" in doc["detail"] and "NOUN" in doc["detail"] and doc["word"] == 0


@pytest.mark.parametrize("value", ['"5"', "true", "5.5"])
def test_numbers_are_not_coerced(server: httpx.Client, value: str) -> None:
    """Defect 6: "k": "5" and "k": true were coerced to 5 and 1."""
    for route, key in (("/kbest", "k"), ("/sample", "n")):
        raw = f'{{"tokens": [["Dogs", "bark"]], "tags": [["NOUN", "VERB"]], "model": "en_ewt-o1", "{key}": {value}}}'
        r = _post(server, route, raw)
        assert r.status_code == 422 and r.headers["content-type"].startswith(PROBLEM), r.text
    raw = '{"tokens": [["Dogs", "bark"]], "inference": {"iterations": "5"}}'
    assert _post(server, "/parse", raw).status_code == 422
    ok = '{"tokens": [["Dogs", "bark"]], "tags": [["NOUN", "VERB"]], "model": "en_ewt-o1", "k": 2}'
    assert _post(server, "/kbest", ok).status_code == 200


def test_a_good_request_still_parses(server: httpx.Client, tmp_path: Path) -> None:
    r = server.post("/parse", json={"tokens": [["The", "dog", "barks", "."]]})
    assert r.status_code == 200, r.text
    assert len(r.json()["sentences"][0]["tokens"]) == 4


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded",
                                          "application/json-patch+json"])
def test_a_body_that_is_not_declared_json_is_415(server: httpx.Client, content_type: str | None) -> None:
    """Defect 8: curl -d without a header got a 422 that never mentioned the content type, and
    application/json-patch+json was accepted."""
    headers = {"content-type": content_type} if content_type else {}
    for route in ROUTES:
        r = server.post(route, content=b'{"tokens": [["Dogs", "bark"]]}', headers=headers)
        assert r.status_code == 415 and r.headers["content-type"].startswith(PROBLEM), r.text
        doc = r.json()
        assert doc["accepted"] == ["application/json"] and "application/json" in doc["detail"]
    ok = server.post("/parse", content=b'{"tokens": [["Dogs", "bark"]]}',
                     headers={"content-type": "application/json; charset=utf-8"})
    assert ok.status_code == 200, ok.text


def test_a_chunked_body_over_the_limit_is_413(server: httpx.Client) -> None:
    """Defect 7: a body larger than the limit sent without Content-Length (chunked) got 400, not 413."""
    def chunks() -> Iterator[bytes]:
        yield b'{"tokens": [["'
        for _ in range(3 * 1024):  # 3 MiB of one word, more than the 1 MiB limit of the parsing routes
            yield b"a" * 1024
        yield b'"]]}'

    r = server.post("/parse", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.headers["content-type"].startswith(PROBLEM), r.text
    assert r.json()["limit"] == 1024 * 1024


@pytest.mark.parametrize("raw", [b'{"tokens": [["caf\xe9"]]}',  # Latin-1, not UTF-8
                                 b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03",  # a gzip header
                                 b'{"tokens": [["a"]], "model": ' + b"9" * 5000 + b"}"])
def test_a_body_that_is_not_json_is_a_listed_400(server: httpx.Client, raw: bytes) -> None:
    """Defect 7: invalid UTF-8, gzip and a 5,000-digit integer gave 400 of the unlisted kind http-error."""
    r = server.post("/parse", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.headers["content-type"].startswith(PROBLEM), r.text
    assert r.json()["type"].endswith(":malformed-json"), r.json()
