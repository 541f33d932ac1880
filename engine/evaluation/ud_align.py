"""The CoNLL 2018 UD shared task evaluation (Zeman et al. 2018), reimplemented from its definitions.

Gold and system are token sequences over the same characters: the concatenated FORMs of the surface
tokens with whitespace (Unicode category Zs) removed must be identical, else ``ValueError``. Then

- tokens and sentences are character spans; a system span is correct when a gold span has the same
  start and end (``tokens``, ``sentences``);
- words are aligned in order: outside multiword tokens, a system word is aligned to the gold word with
  the same span; wherever either side has a multiword token, the smallest stretch of words covering
  the overlapping multiword spans is aligned by the longest common subsequence of the (lowercased)
  word forms (``words`` counts aligned words);
- UPOS / XPOS are correct on an aligned word with the same tag; UAS when the system head is aligned to
  the gold head (or both are the root); LAS when, in addition, the universal part of DEPREL (before
  ``:``) is the same. A system sentence without heads (``heads is None``) scores no UAS/LAS;
- Lemmas: the same LEMMA (any system lemma is right where the gold one is ``_``); UFeats: the same
  universal features (``UNIVERSAL_FEATURES``, sorted; language-specific ones are dropped on both sides);
  AllTags: UPOS, XPOS and UFeats all right;
- CLAS, MLAS, BLEX (the shared task's content-word metrics, Zeman et al. 2018 §5.3): only words whose
  universal DEPREL is a content relation (``CONTENT_DEPRELS``) count, on each side by its own DEPREL;
  CLAS is LAS over them; MLAS also needs UPOS, UFeats and the functional children (words attached by a
  ``FUNCTIONAL_DEPRELS`` relation) with the same aligned heads, DEPREL, UPOS and UFeats, in order; BLEX
  needs LAS and the lemma. As ``conll18_ud_eval.py``, correct pairs are filtered by the gold word.

Every score is ``precision = correct / system``, ``recall = correct / gold``, ``F1 = 2 correct /
(gold + system)``, in percent; for tags and attachments also ``aligned_accuracy = correct / aligned``.
Sentences are ``engine.data.conllu_io.Sentence``: the words come from its fields (forms, upos, xpos,
heads, deprels) and multiword-token ranges from its ``lines``.
"""

from __future__ import annotations

import io
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from engine.data.conllu_io import Sentence, read_conllu

METRICS = ("tokens", "sentences", "words", "upos", "xpos", "ufeats", "alltags", "lemmas", "uas", "las", "clas",
           "mlas", "blex")
UNIVERSAL_FEATURES = frozenset((
    "PronType", "NumType", "Poss", "Reflex", "Foreign", "Abbr", "Gender", "Animacy", "Number", "Case", "Definite",
    "Degree", "VerbForm", "Mood", "Tense", "Aspect", "Voice", "Evident", "Polarity", "Person", "Polite"))
CONTENT_DEPRELS = frozenset((
    "nsubj", "obj", "iobj", "csubj", "ccomp", "xcomp", "obl", "vocative", "expl", "dislocated", "advcl", "advmod",
    "discourse", "nmod", "appos", "nummod", "acl", "amod", "conj", "fixed", "flat", "compound", "list", "parataxis",
    "orphan", "goeswith", "reparandum", "root", "dep"))
FUNCTIONAL_DEPRELS = frozenset(("aux", "cop", "mark", "det", "clf", "case", "cc"))
_UNKNOWN = -2  # head of a word whose sentence has no heads: never correct


@dataclass(eq=False)
class _Word:
    start: int  # span of its surface token (non-whitespace character offsets)
    end: int
    multiword: bool
    form: str
    upos: str
    xpos: str
    deprel: str  # universal part
    head: int  # global index of the head word, -1 for the root, _UNKNOWN without heads
    lemma: str = "_"
    feats: str = ""  # universal features only, sorted
    functional: list[int] = field(default_factory=list)  # global indices of its functional children


@lru_cache(maxsize=65536)  # a treebank has a few thousand distinct FEATS values
def universal_feats(feats: str) -> str:
    """The universal features of a FEATS value, sorted and ``|``-joined ("" for none)."""
    return "|".join(sorted(f for f in feats.split("|") if f.split("=", 1)[0] in UNIVERSAL_FEATURES))


@dataclass
class _Corpus:
    chars: list[str]
    tokens: list[tuple[int, int]]
    sentences: list[tuple[int, int]]
    words: list[_Word]


_SPACE = re.compile(r"\s")  # str.isspace's characters, which include every Zs one


def _strip(form: str) -> str:
    """``form`` without its space separators (category Zs), as the CoNLL 2018 script removes them."""
    if not _SPACE.search(form):
        return form
    return "".join(c for c in form if unicodedata.category(c) != "Zs")


def _ranges(sent: Sentence) -> dict[int, tuple[int, str]]:
    """First word (1-based) -> (last word, surface FORM) of each multiword token in ``sent.lines``."""
    out = {}
    for line in sent.lines:
        if line.startswith("#") or line.find("-", 0, line.find("\t")) < 0:  # not a range (no split: most lines)
            continue
        cols = line.split("\t", 2)
        if len(cols) >= 2 and "-" in cols[0]:
            a, _, b = cols[0].partition("-")
            if a.isdigit() and b.isdigit():
                out[int(a)] = (int(b), cols[1])
    return out


def _corpus(sentences: Sequence[Sentence], side: str) -> _Corpus:
    chars: list[str] = []
    tokens: list[tuple[int, int]] = []
    spans: list[tuple[int, int]] = []
    words: list[_Word] = []
    for number, sent in enumerate(sentences, 1):
        first_word, start = len(words), len(chars)
        ranges = _ranges(sent)
        heads, n = (None if sent.heads is None else [int(h) for h in sent.heads]), sent.n  # Python ints: cheaper reads
        k = 1
        while k <= n:
            last, surface = ranges.get(k, (k, sent.forms[k - 1]))
            last = min(last, n)
            form = _strip(surface)
            if not form:
                raise ValueError(f"{side} sentence {number}: empty FORM of token {k}")
            a = len(chars)
            chars.extend(form)
            tokens.append((a, len(chars)))
            for j in range(k, last + 1):
                if heads is None or not 0 <= heads[j] <= n:
                    head = _UNKNOWN
                else:
                    head = first_word + heads[j] - 1 if heads[j] > 0 else -1
                word_form = sent.forms[j - 1] if last > k else form
                words.append(_Word(a, len(chars), last > k, word_form, sent.upos[j - 1], sent.xpos[j - 1],
                                   sent.deprels[j - 1].split(":")[0], head, sent.lemmas[j - 1],
                                   universal_feats(sent.feats[j - 1])))
            k = last + 1
        for index in range(first_word, len(words)):  # in word order, as the official script appends them
            w = words[index]
            if w.head >= 0 and w.deprel in FUNCTIONAL_DEPRELS:
                words[w.head].functional.append(index)
        if len(chars) > start:
            spans.append((start, len(chars)))
    return _Corpus(chars, tokens, spans, words)


@dataclass
class Score:
    gold: int
    system: int
    correct: int
    aligned: int | None = None

    @property
    def precision(self) -> float:
        return 100.0 * self.correct / self.system if self.system else 0.0

    @property
    def recall(self) -> float:
        return 100.0 * self.correct / self.gold if self.gold else 0.0

    @property
    def f1(self) -> float:
        return 200.0 * self.correct / (self.gold + self.system) if self.gold + self.system else 0.0

    @property
    def aligned_accuracy(self) -> float | None:
        if self.aligned is None:
            return None
        return 100.0 * self.correct / self.aligned if self.aligned else 0.0


def _spans_score(gold: list[tuple[int, int]], system: list[tuple[int, int]]) -> Score:
    correct = gi = si = 0
    while gi < len(gold) and si < len(system):
        if system[si][0] < gold[gi][0]:
            si += 1
        elif gold[gi][0] < system[si][0]:
            gi += 1
        else:
            correct += gold[gi][1] == system[si][1]
            gi += 1
            si += 1
    return Score(len(gold), len(system), correct)


def _beyond_end(words: list[_Word], i: int, end: int) -> bool:
    if i >= len(words):
        return True
    if words[i].multiword:
        return words[i].start >= end
    return words[i].end > end


def _extend_end(word: _Word, end: int) -> int:
    return word.end if word.multiword and word.end > end else end


def _multiword_span(gold: list[_Word], system: list[_Word], gi: int, si: int) -> tuple[int, int, int, int]:
    """The smallest stretch ``gold[gs:gi]``, ``system[ss:si]`` covering the multiword tokens that overlap."""
    if gold[gi].multiword:
        end = gold[gi].end
        if not system[si].multiword and system[si].start < gold[gi].start:
            si += 1
    else:
        end = system[si].end
        if not gold[gi].multiword and gold[gi].start < system[si].start:
            gi += 1
    gs, ss = gi, si
    while not _beyond_end(gold, gi, end) or not _beyond_end(system, si, end):
        if gi < len(gold) and (si >= len(system) or gold[gi].start <= system[si].start):
            end = _extend_end(gold[gi], end)
            gi += 1
        else:
            end = _extend_end(system[si], end)
            si += 1
    return gs, ss, gi, si


def _align(gold: list[_Word], system: list[_Word]) -> list[tuple[int, int]]:
    """Aligned (gold index, system index) pairs, in order."""
    pairs: list[tuple[int, int]] = []
    gi = si = 0
    while gi < len(gold) and si < len(system):
        if gold[gi].multiword or system[si].multiword:
            gs, ss, gi, si = _multiword_span(gold, system, gi, si)
            ng, ns = gi - gs, si - ss
            if ng and ns:
                g_forms = [w.form.lower() for w in gold[gs:gi]]
                s_forms = [w.form.lower() for w in system[ss:si]]
                lcs = [[0] * (ns + 1) for _ in range(ng + 1)]
                for g in reversed(range(ng)):
                    for s in reversed(range(ns)):
                        best = lcs[g + 1][s + 1] + 1 if g_forms[g] == s_forms[s] else 0
                        lcs[g][s] = max(best, lcs[g + 1][s], lcs[g][s + 1])
                g = s = 0
                while g < ng and s < ns:
                    if g_forms[g] == s_forms[s]:
                        pairs.append((gs + g, ss + s))
                        g += 1
                        s += 1
                    elif lcs[g][s] == lcs[g + 1][s]:
                        g += 1
                    else:
                        s += 1
        elif (gold[gi].start, gold[gi].end) == (system[si].start, system[si].end):
            pairs.append((gi, si))
            gi += 1
            si += 1
        elif gold[gi].start <= system[si].start:
            gi += 1
        else:
            si += 1
    return pairs


def ud_scores(gold: Sequence[Sentence], system: Sequence[Sentence]) -> dict[str, Score]:
    """Raw counts of every metric in ``METRICS`` (see the module docstring)."""
    g, s = _corpus(gold, "gold"), _corpus(system, "system")
    if g.chars != s.chars:
        common = min(len(g.chars), len(s.chars))
        i = next((k for k in range(common) if g.chars[k] != s.chars[k]), common)
        raise ValueError("the concatenation of tokens in gold and system differ, first at character "
                         f"{i}: gold {''.join(g.chars[i:i + 20])!r}, system {''.join(s.chars[i:i + 20])!r}")
    pairs = _align(g.words, s.words)
    to_gold = {si: gi for gi, si in pairs}
    ng, ns, na = len(g.words), len(s.words), len(pairs)
    counts = dict.fromkeys(("upos", "xpos", "ufeats", "alltags", "lemmas", "uas", "las"), 0)
    content = dict.fromkeys(("clas", "mlas", "blex"), 0)
    for gi, si in pairs:
        gw, sw = g.words[gi], s.words[si]
        counts["upos"] += gw.upos == sw.upos
        counts["xpos"] += gw.xpos == sw.xpos
        counts["ufeats"] += gw.feats == sw.feats
        counts["alltags"] += gw.upos == sw.upos and gw.xpos == sw.xpos and gw.feats == sw.feats
        lemma_ok = gw.lemma == "_" or gw.lemma == sw.lemma
        counts["lemmas"] += lemma_ok
        if sw.head == _UNKNOWN or gw.head == _UNKNOWN:
            continue
        las = _aligned_head(sw.head, to_gold) == gw.head
        counts["uas"] += las
        las = las and gw.deprel == sw.deprel
        counts["las"] += las
        if las and gw.deprel in CONTENT_DEPRELS:
            content["clas"] += 1
            content["blex"] += lemma_ok
            content["mlas"] += _morpho_match(g.words, s.words, gw, sw, to_gold)
    n_content = (sum(w.deprel in CONTENT_DEPRELS for w in g.words), sum(w.deprel in CONTENT_DEPRELS for w in s.words),
                 sum(g.words[gi].deprel in CONTENT_DEPRELS for gi, _ in pairs))
    return {
        "tokens": _spans_score(g.tokens, s.tokens),
        "sentences": _spans_score(g.sentences, s.sentences),
        "words": Score(ng, ns, na),
        **{k: Score(ng, ns, c, na) for k, c in counts.items()},
        **{k: Score(n_content[0], n_content[1], c, n_content[2]) for k, c in content.items()},
    }


def _aligned_head(head: int, to_gold: dict[int, int]) -> int:
    """The gold index a system head is aligned to: -1 for the root, -3 when not aligned (never right)."""
    return head if head < 0 else to_gold.get(head, -3)


def _morpho_match(gold: list[_Word], system: list[_Word], gw: _Word, sw: _Word, to_gold: dict[int, int]) -> bool:
    """MLAS beyond LAS: same UPOS and UFeats, and the same functional children (aligned word, DEPREL,
    UPOS, UFeats), in order."""
    if gw.upos != sw.upos or gw.feats != sw.feats or len(gw.functional) != len(sw.functional):
        return False
    for gc, sc in zip(gw.functional, sw.functional, strict=True):
        a, b = gold[gc], system[sc]
        if to_gold.get(sc, -3) != gc or (a.deprel, a.upos, a.feats) != (b.deprel, b.upos, b.feats):
            return False
    return True


def evaluate_ud(gold: Sequence[Sentence], system: Sequence[Sentence]) -> dict[str, Any]:
    """CoNLL 2018 shared-task scores: ``out[m]`` is the F1 (percent) of each ``m`` in ``METRICS``;
    ``out["precision"][m]``, ``out["recall"][m]``, ``out["aligned_accuracy"][m]`` (tags and attachment
    only) and ``out["counts"][m] = {"gold", "system", "correct"}`` give the rest."""
    scores = ud_scores(gold, system)
    out: dict[str, Any] = {m: sc.f1 for m, sc in scores.items()}
    out["precision"] = {m: sc.precision for m, sc in scores.items()}
    out["recall"] = {m: sc.recall for m, sc in scores.items()}
    out["aligned_accuracy"] = {m: sc.aligned_accuracy for m, sc in scores.items() if sc.aligned is not None}
    out["counts"] = {m: {"gold": sc.gold, "system": sc.system, "correct": sc.correct} for m, sc in scores.items()}
    return out


def sentences_from_conllu(text: str) -> list[Sentence]:
    """Parse CoNLL-U text (e.g. ``Tokenizer.to_conllu`` output) into sentences; HEAD may be ``_``."""
    return read_conllu(io.StringIO(text), name="<system>")
