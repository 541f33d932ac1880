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
def process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("defects") / "data")
    try:
        proc.wait_ready(timeout=300)
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def server(process: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=process.url, timeout=120) as client:
        yield client


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


W, T = ["Dogs", "bark", "."], ["NOUN", "VERB", "PUNCT"]
HOSTILE: list[tuple[str, object, int, str | None]] = [  # (route, JSON body, status, field named)
    ("/parse", {}, 422, None),
    ("/parse", {"tokens": [W], "text": "Dogs bark."}, 422, None),
    ("/parse", {"tokens": [W], "conllu": "1\tDogs\t_\tNOUN\t_\t_\t_\t_\t_\t_\n\n"}, 422, None),
    ("/parse", {"tokens": "Dogs bark"}, 422, "tokens"),
    ("/parse", {"tokens": [["Dogs", 3]]}, 422, "tokens[0][1]"),
    ("/parse", {"tokens": [["Dogs", None]]}, 422, "tokens[0][1]"),
    ("/parse", {"tokens": [[]]}, 422, "tokens"),
    ("/parse", {"tokens": [["Dogs", ""]]}, 422, "tokens"),
    ("/parse", {"tokens": [["Dogs", "   "]]}, 422, "tokens"),
    ("/parse", {"tokens": [["Do\tgs"]]}, 422, "tokens"),
    ("/parse", {"tokens": [["Do\ngs"]]}, 422, "tokens"),
    ("/parse", {"tokens": [["x" * 201]]}, 422, "tokens"),
    ("/parse", {"tokens": [["w"] * 501]}, 422, "tokens"),
    ("/parse", {"tokens": [["w"]] * 201}, 422, "tokens"),
    ("/parse", {"tokens": [W], "tags": [T[:2]]}, 422, "tags"),
    ("/parse", {"tokens": [W], "tags": [T, T]}, 422, "tags"),
    ("/parse", {"tokens": [W], "tags": [["NOUN", "VERB", ""]]}, 422, "tags"),
    ("/parse", {"tokens": [W], "tags": [["noun", "VERB", "PUNCT"]]}, 422, "tags"),
    ("/parse", {"tokens": [W], "xpos": [["NNS"]]}, 422, "xpos"),
    ("/parse", {"tokens": [W], "model": "../etc/passwd"}, 422, "model"),
    ("/parse", {"tokens": [W], "model": "no-such-model"}, 404, None),
    ("/parse", {"tokens": [W], "model": "en_ewt@999"}, 404, None),
    ("/parse", {"tokens": [W], "output": "xml"}, 422, "output"),
    ("/parse", {"tokens": [W], "inference": {"method": "magic"}}, 422, "inference.method"),
    ("/parse", {"tokens": [W], "inference": {"iterations": 0}}, 422, "inference.iterations"),
    ("/parse", {"tokens": [W], "inference": {"iterations": 51}}, 422, "inference.iterations"),
    ("/parse", {"tokens": [W], "inference": {"iterations": -3}}, 422, "inference.iterations"),
    ("/parse", {"tokens": [W], "inference": {"iterations": 2.5}}, 422, "inference.iterations"),
    ("/parse", {"tokens": [W], "inference": {"epsilon": -1.0}}, 422, "inference.epsilon"),
    ("/parse", {"tokens": [W], "inference": {"rounds": 0}}, 422, "inference.rounds"),
    ("/parse", {"tokens": [W], "inference": {"rounds": 101}}, 422, "inference.rounds"),
    ("/parse", {"tokens": [W], "inference": {"tag_samples": 17}}, 422, "inference.tag_samples"),
    ("/parse", {"tokens": [W], "inference": {"tag_samples": -1}}, 422, "inference.tag_samples"),
    ("/parse", {"tokens": [W], "inference": {"unknown": 1}}, 422, "inference.unknown"),
    ("/parse", {"tokens": [W], "inference": "bp"}, 422, "inference"),
    ("/parse", {"tokens": [W], "extra": 1}, 422, "extra"),
    ("/parse", {"tokens": [W], "model": "en_ewt-o1", "inference": {"method": "exact"}, "tags": None}, 422, "tags"),
    ("/parse", {"tokens": [W], "model": "en_ewt", "inference": {"method": "exact"}}, 422, "inference.method"),
    ("/parse", {"text": 5}, 422, "text"),
    ("/parse", {"text": "   "}, 422, "text"),
    ("/parse", {"text": "x" * 100_001}, 422, "text"),
    ("/parse", {"text": "Dogs bark.", "model": "en_ewt-o1"}, 422, "text"),
    ("/parse", {"conllu": "not conllu at all"}, 422, "conllu"),
    ("/parse", {"conllu": "1\tDogs\t_\tNOUN\n\n"}, 422, "conllu"),
    ("/parse", {"conllu": "2\tDogs\t_\tNOUN\t_\t_\t_\t_\t_\t_\n\n"}, 422, "conllu"),
    ("/parse", {"conllu": "1-3\tDogs\t_\t_\t_\t_\t_\t_\t_\t_\n1\tDogs\t_\tNOUN\t_\t_\t_\t_\t_\t_\n\n"},
     422, "conllu"),
    ("/parse", {"conllu": ""}, 422, "conllu"),
    ("/parse", {"conllu": ["1\tDogs"]}, 422, "conllu"),
    ("/marginals", {"tokens": [W], "output": "conllu"}, 422, "output"),
    ("/kbest", {"tokens": [W], "k": 0}, 422, "k"),
    ("/kbest", {"tokens": [W], "k": 101}, 422, "k"),
    ("/kbest", {"tokens": [["w"] * 151]}, 422, "tokens"),
    ("/kbest", {"tokens": [W], "inference": {"tag_samples": 2}}, 422, "inference.tag_samples"),
    ("/sample", {"tokens": [W], "n": 0}, 422, "n"),
    ("/sample", {"tokens": [W], "n": 1001}, 422, "n"),
    ("/sample", {"tokens": [W], "seed": -1}, 422, "seed"),
    ("/sample", {"tokens": [W], "seed": 2**32}, 422, "seed"),
    ("/confidence", {"tokens": [W], "inference": {"tag_samples": 17}}, 422, "inference.tag_samples"),
    ("/confidence", {"tokens": [W], "k": 3}, 422, "k"),
    ("/sample", {"tokens": [W], "n": [1]}, 422, "n"),
    ("/kbest", {"tokens": [W], "k": {"value": 3}}, 422, "k"),
    ("/parse", [W], 422, None),
    ("/parse", "Dogs bark.", 422, None),
    ("/parse", None, 422, None),
]


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc to read the server's RSS")
def test_hostile_requests_are_4xx_problems_naming_the_field(server: httpx.Client, process: ServerProcess) -> None:
    """At least 60 distinct malformed requests: each a 4xx application/problem+json, naming the field at fault
    where there is one; none is a 500; the server's RSS stays bounded across them (three rounds)."""
    assert len({json.dumps(h[:2], sort_keys=True) for h in HOSTILE}) == len(HOSTILE) >= 60
    assert process.proc is not None
    rss = []
    for _ in range(3):
        for route, payload, status, field in HOSTILE:
            r = server.post(route, content=json.dumps(payload).encode(), headers={"content-type": "application/json"})
            assert r.status_code == status, (route, payload, r.status_code, r.text[:300])
            assert r.headers["content-type"].startswith(PROBLEM), (route, payload)
            doc = r.json()
            assert doc["status"] == status and doc["detail"], doc
            if field is not None:
                assert doc.get("field") == field, (route, payload, doc)
        rss.append(_rss_kb(process.proc.pid))
    assert rss[-1] <= 1.1 * rss[0], rss  # no growth from round to round

