"""Shared fixtures: where the treebanks are (``../shared/data`` beside the repo, or $BP_PARSER_DATA)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

DATA_DIR = Path(os.environ.get("BP_PARSER_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
UD_DIR = DATA_DIR / "ud"
EWT_DIR = UD_DIR / "en_ewt"
PTB_DIR = DATA_DIR / "ptb_sample"  # the Penn Treebank sample (wsj_0001-0199.mrg), non-commercial: read, never copied


@pytest.fixture(scope="session")
def ud_dir() -> Path:
    if not UD_DIR.is_dir():
        pytest.skip(f"treebanks not found at {UD_DIR} (set BP_PARSER_DATA to the shared data folder)")
    return UD_DIR


@pytest.fixture(scope="session")
def ewt_dir(ud_dir: Path) -> Path:
    if not EWT_DIR.is_dir():
        pytest.skip(f"UD English EWT not found at {EWT_DIR}")
    return EWT_DIR


@pytest.fixture(scope="session")
def ptb_dir() -> Path:
    if not (PTB_DIR / "wsj_0001.mrg").is_file():
        pytest.skip(f"the Penn Treebank sample not found at {PTB_DIR} (set BP_PARSER_DATA to the shared data folder)")
    return PTB_DIR
