"""The service's ``text`` field and ``parse --text`` read text the same way (one code path,
``Pipeline.tokenize``): the same sentences, tokens, paragraph marks, SpaceAfter and TokenRange."""

from __future__ import annotations

import re
from pathlib import Path

from service_helpers import MODELS, running_app
from text_helpers import seen

from engine.cli import main

TEXT = ("The parcel did\r\nnot arrive on time.\r\n\r\nWrite to help@example.com\tor call\u00a0us \U0001f44d\n"
        "\u00a0\n\ufeffThanks, infor\u00admation desk")


def _layout(conllu: str) -> list[str]:
    """Comments other than sent_id, and ID, FORM and MISC without HeadProb of every line."""
    out = []
    for line in conllu.splitlines():
        if line.startswith("#") and not line.startswith("# sent_id"):
            out.append(line)
        elif line and not line.startswith("#"):
            cols = line.split("\t")
            out.append("\t".join([cols[0], cols[1], re.sub(r"\|?HeadProb=[^|]*", "", cols[9])]))
    return out


def test_service_text_field_reads_text_as_the_command_line_does(tmp_path: Path) -> None:
    out = tmp_path / "cli.conllu"
    # the service's CoNLL-U carries each sentence's p_tree and expected errors: the CLI's with --sentence-confidence
    assert main(["parse", "--model", str(MODELS / "en_ewt"), "--text", TEXT, "--output", str(out),
                 "--sentence-confidence"]) == 0
    cli = _layout(out.read_text(encoding="utf-8"))
    out_doc = tmp_path / "cli-newdoc.conllu"
    assert main(["parse", "--model", str(MODELS / "en_ewt"), "--text", TEXT, "--output", str(out_doc),
                 "--blank-line", "newdoc", "--sentence-confidence"]) == 0
    cli_doc = _layout(out_doc.read_text(encoding="utf-8"))
    with running_app(tmp_path / "svc") as client:
        r = client.post("/parse", json={"text": TEXT, "model": "en_ewt", "output": "conllu"})
        r_doc = client.post("/parse", json={"text": TEXT, "model": "en_ewt", "output": "conllu",
                                            "blank_line": "newdoc"})
        wrong = client.post("/parse", json={"tokens": [["Hi"]], "tags": [["INTJ"]], "model": "en_ewt",
                                            "blank_line": "newdoc"})
        bad = client.post("/parse", json={"text": TEXT, "blank_line": "newline"})
    assert r.status_code == 200 and r_doc.status_code == 200, (r.text, r_doc.text)
    assert _layout(r.text) == cli and _layout(r_doc.text) == cli_doc
    assert cli_doc.count("# newdoc") == 3  # and nothing else differs:
    assert [x for x in cli_doc if x != "# newdoc"] == [x for x in cli if x != "# newdoc"]
    assert wrong.status_code == 422 and wrong.json()["field"] == "blank_line"
    assert bad.status_code == 422
    assert cli.count("# newpar") == 3 and cli.count("# newdoc") == 1
    tokens = [line.split("\t") for line in cli if not line.startswith("#") and "TokenRange" in line]
    assert len(tokens) >= 15
    for _, form, misc in tokens:  # every token maps back to its exact input characters
        m = re.search(r"TokenRange=(\d+):(\d+)", misc)
        assert m is not None and seen(TEXT[int(m[1]):int(m[2])]) == form
    forms = [form for _, form, _ in tokens]
    assert "help@example.com" in forms and "information" in forms and "\U0001f44d" in forms
