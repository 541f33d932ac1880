"""The command line end to end: train on a tiny treebank, parse, evaluate, score, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.cli import main
from engine.data.conllu_io import read_conllu

TOY = """# sent_id = 1
# text = the dog barks .
1\tthe\tthe\tDET\tDT\t_\t2\tdet\t_\t_
2\tdog\tdog\tNOUN\tNN\t_\t3\tnsubj\t_\t_
3\tbarks\tbark\tVERB\tVBZ\t_\t0\troot\t_\tSpaceAfter=No
4\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_

# sent_id = 2
1-2\tcannot\t_\t_\t_\t_\t_\t_\t_\t_
1\tcan\tcan\tAUX\tMD\t_\t3\taux\t_\t_
2\tnot\tnot\tPART\tRB\t_\t3\tadvmod\t_\t_
3\tsleep\tsleep\tVERB\tVB\t_\t0\troot\t_\t_
3.1\tsleeps\tsleep\tVERB\tVB\t_\t_\t_\t0:root\t_

"""


@pytest.fixture()
def toy(tmp_path: Path) -> Path:
    path = tmp_path / "toy.conllu"
    path.write_text(TOY * 5, encoding="utf-8")
    return path


def test_train_parse_evaluate(tmp_path: Path, toy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "model"
    assert main(["train", "--train", str(toy), "--dev", str(toy), "--out", str(model), "--epochs", "3",
                 "--dim", "4096", "--quiet"]) == 0
    manifest = json.loads((model / "manifest.json").read_text())
    assert manifest["tree"] == {"tree": "nonprojective", "root": "single"}
    assert len(manifest["training"]["train_sha256"]) == 64
    capsys.readouterr()

    assert main(["evaluate", "--model", str(model), "--data", str(toy), "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    for key in ("uas", "las", "uas_no_punct", "ece", "sentences", "tokens", "seconds", "tokens_per_second"):
        assert key in scores
    assert scores["uas"] == pytest.approx(100.0) and scores["sentences"] == 10
    assert 0.0 <= scores["ece"] <= 1.0

    blank = tmp_path / "blank.conllu"
    blank.write_text(TOY.replace("\t2\tdet\t", "\t_\t_\t").replace("\t0\troot\t", "\tX\tfoo\t"), encoding="utf-8")
    out = tmp_path / "out.conllu"
    assert main(["parse", "--model", str(model), "--input", str(blank), "--output", str(out)]) == 0
    parsed = read_conllu(out)
    assert [list(s.heads) for s in parsed] == [[-1, 2, 3, 0, 3], [-1, 3, 3, 0]]
    assert all("HeadProb=" in m for s in parsed for m in s.misc)
    text = out.read_text(encoding="utf-8")
    assert "1-2\tcannot" in text and "3.1\tsleeps" in text and "# text = the dog barks ." in text
    assert "SpaceAfter=No|HeadProb=" in text

    assert main(["score", "--gold", str(toy), "--pred", str(toy), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["uas"] == pytest.approx(100.0)


def test_parse_stdin_stdout(tmp_path: Path, toy: Path) -> None:
    model = tmp_path / "model"
    assert main(["train", "--train", str(toy), "--out", str(model), "--epochs", "1", "--dim", "1024",
                 "--quiet", "--tree", "projective", "--root", "multi"]) == 0
    proc = subprocess.run([sys.executable, "-m", "engine", "parse", "--model", str(model)], input=TOY,
                          capture_output=True, text=True, check=True)
    assert proc.stdout.count("HeadProb=") == 7


def test_bad_input_is_a_clear_error(tmp_path: Path, toy: Path) -> None:
    bad = tmp_path / "bad.conllu"
    bad.write_text(TOY.replace("2\tdog\tdog\tNOUN", "2\tdog\tNOUN"), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "engine", "train", "--train", str(bad), "--out",
                           str(tmp_path / "m")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert f"{bad}:4:" in proc.stderr and "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "engine", "parse", "--model", str(tmp_path / "nowhere")],
                          input=TOY, capture_output=True, text=True)
    assert proc.returncode == 2 and "not a model directory" in proc.stderr


def test_second_order_training_and_bp_inference(tmp_path: Path, toy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = tmp_path / "o1"
    assert main(["train", "--train", str(toy), "--out", str(first), "--epochs", "2", "--dim", "4096",
                 "--quiet"]) == 0
    second = tmp_path / "o2"
    assert main(["train", "--train", str(toy), "--dev", str(toy), "--out", str(second), "--order", "2",
                 "--factors", "grand,sib", "--pruner", str(first), "--epochs", "2", "--second-dim", "2048",
                 "--quiet"]) == 0
    manifest = json.loads((second / "manifest.json").read_text())
    assert manifest["order"] == 2 and set(manifest["features"]["second_order"]) == {"grand", "sib"}
    assert manifest["training"]["objective"] == "surrogate-cll"
    capsys.readouterr()
    assert main(["evaluate", "--model", str(second), "--data", str(toy), "--json", "--bp-iterations", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["uas"] == pytest.approx(100.0)
    # a first-order model through BP (LINK + TREE) gives its exact answer, and other hard constraints run too
    for extra in (["--inference", "bp"], ["--inference", "bp", "--constraint", "exactly1+no2cycle"],
                  ["--inference", "bp", "--constraint", "ptree"]):
        assert main(["evaluate", "--model", str(first), "--data", str(toy), "--json", *extra]) == 0
        assert json.loads(capsys.readouterr().out)["uas"] == pytest.approx(100.0)
    kbest = tmp_path / "kbest.conllu"
    # over all arcs (a confident pruner may leave a 3-word sentence a single tree), 2 trees per sentence
    assert main(["parse", "--model", str(second), "--input", str(toy), "--output", str(kbest), "--kbest", "2",
                 "--no-prune"]) == 0
    assert kbest.read_text(encoding="utf-8").count("# distribution = bp-tree-factor") == 20
    assert main(["parse", "--model", str(first), "--input", str(toy), "--inference", "bp", "--constraint", "atmost1",
                 "--kbest", "2"]) == 2
    assert "need a tree distribution" in capsys.readouterr().err
    assert main(["evaluate", "--model", str(second), "--data", str(toy), "--inference", "exact"]) == 2
    assert "only valid for first-order models" in capsys.readouterr().err
    assert main(["train", "--train", str(toy), "--out", str(tmp_path / "x"), "--order", "2",
                 "--factors", "grand,cousin"]) == 2
    assert "cousin" in capsys.readouterr().err


def test_parse_kbest_and_samples(tmp_path: Path, toy: Path) -> None:
    model = tmp_path / "model"
    assert main(["train", "--train", str(toy), "--out", str(model), "--epochs", "1", "--dim", "2048", "--quiet"]) == 0
    out = tmp_path / "kbest.conllu"
    assert main(["parse", "--model", str(model), "--input", str(toy), "--output", str(out), "--kbest", "3"]) == 0
    text = out.read_text(encoding="utf-8")
    # the toy file has 10 sentences; sentence 2 has 3 words (3 single-root trees), sentence 1 has 4 (16)
    assert text.count("# kbest_rank = 1\n") == 10 and text.count("# kbest_rank = 3\n") == 10
    assert text.count("# distribution = exact") == 30
    log_probs = [float(line.split("=")[1]) for line in text.splitlines() if line.startswith("# log_prob")]
    assert all(a >= b - 1e-9 for a, b in zip(log_probs[0:3], log_probs[1:3], strict=False))
    blocks = read_conllu(out)
    assert len(blocks) == 30 and all(b.heads is not None for b in blocks)
    runs = []
    for _ in range(2):
        path = tmp_path / "samples.conllu"
        assert main(["parse", "--model", str(model), "--input", str(toy), "--output", str(path), "--samples", "4",
                     "--seed", "7"]) == 0
        runs.append(path.read_text(encoding="utf-8"))
    assert runs[0] == runs[1] and runs[0].count("# sample_index = 4\n") == 10
    assert main(["parse", "--model", str(model), "--input", str(toy), "--kbest", "0"]) == 2


def test_commands_run_with_the_bulk_collector_thresholds(tmp_path: Path) -> None:
    """Every command sets the collector's thresholds of bulk work (``engine.cli_parse.GC_THRESHOLDS``: a young
    generation large enough that a parse of EWT dev runs no full collection), and the setting holds after it."""
    import gc

    from engine.cli_parse import GC_THRESHOLDS

    saved = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        assert main(["evaluate", "--model", str(tmp_path / "none"), "--data", str(tmp_path / "none.conllu")]) == 2
        assert gc.get_threshold() == GC_THRESHOLDS
        assert GC_THRESHOLDS[0] >= 10_000
    finally:
        gc.set_threshold(*saved)
