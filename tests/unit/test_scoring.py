from __future__ import annotations

import dataclasses
import math
from datetime import timedelta

import pytest

from memcore import Candidate, InvalidField, RankParams, Tier, mmr, rank
from memcore.graph import hops_from, proximity, recall_hops
from memcore.keyword import bm25_scores, keyword_text, normalise_by_max, stem, tokenize
from memcore.policy import DECAY_PRESETS, DecayPreset, RecallPolicy, RecallPreset, RecallWeights

from .helpers import T0, hours

TAU = 240.0


def cand(
    memory_id: str, sim: float, imp: float = 0.5, idle_h: float = 0.0, **kw: object
) -> Candidate:
    return Candidate(
        memory_id=memory_id,
        similarity=sim,
        importance=imp,
        last_access=T0 - hours(idle_h),
        created_at=T0 - hours(idle_h),
        tau_hours=TAU,
        **kw,  # type: ignore[arg-type]
    )


def params(k: int = 10, **policy: object) -> RankParams:
    """Settings of the ``zeromemory`` blend unless ``policy`` names another preset."""
    base: dict[str, object] = {"preset": RecallPreset.ZEROMEMORY, "weights": RecallWeights()}
    return RankParams(k=k, policy=RecallPolicy(**{**base, **policy}))  # type: ignore[arg-type]


def test_keyword_normalised_by_batch_max() -> None:
    assert normalise_by_max([2.0, 1.0, 0.0]) == [1.0, 0.5, 0.0]
    assert normalise_by_max([0.0, 0.0]) == [0.0, 0.0]
    assert normalise_by_max([]) == []


def test_bm25_prefers_matching_documents() -> None:
    scores = bm25_scores(
        "python backend", ["Alice likes Python", "Rust is fun", "python backend api"]
    )
    assert scores[2] > scores[0] > scores[1] == 0.0


@pytest.mark.parametrize(
    ("words", "root"),
    [
        (("live", "lives", "lived", "living"), "liv"),
        (("work", "works", "worked", "working"), "work"),
        (("run", "running"), "run"),
        (("study", "studies", "studied", "studying"), "study"),
        (("marry", "married", "marries", "marrying"), "marry"),
        (("drive", "drives"), "driv"),
        (("pet", "pets"), "pet"),
        (("dog", "dogs"), "dog"),
        (("day", "days"), "day"),
    ],
)
def test_stem_conflates_inflections(words: tuple[str, ...], root: str) -> None:
    assert {stem(w) for w in words} == {root}


@pytest.mark.parametrize(
    "word", ["is", "bus", "tennis", "glass", "9087", "b5441", "news", "does", "this", "plus"]
)
def test_stem_keeps_short_words_digits_and_non_plurals(word: str) -> None:
    assert stem(word) == word
    assert stem("glasses") == "glass"


def test_keyword_text_is_what_the_index_and_the_queries_share() -> None:
    assert keyword_text("Where does Carol LIVE?") == "carol liv"  # stop words dropped
    assert keyword_text("Carol lives in Dublin now.") == "carol liv dublin"
    assert keyword_text("?!") == ""


def test_stop_words_neither_index_nor_query_but_unstemmed_tokens_keep_them() -> None:
    assert keyword_text("What did she do after the move to Lisbon?") == "mov lisbon"
    assert keyword_text("It is what it is!") == ""
    assert keyword_text("Where does Don live?") == "don liv"  # a name, not "don't"
    assert tokenize("What did she do?") == ["what", "did", "she", "do"]  # the named presets'
    # a question's stop words no longer outweigh the one word that matters
    docs = ["What did you do there? Where was it?", "Lisbon was lovely"]
    assert bm25_scores("What was Lisbon like?", docs, stemmed=True)[0] == 0.0


def test_keyword_text_reads_unicode_variants_as_one_word() -> None:
    # NFC and NFD é, a ligature, full-width digits, ß and its capital spelling
    assert keyword_text("caf\u00e9") == keyword_text("cafe\u0301") == "café"
    assert keyword_text("\ufb01nal") == keyword_text("FINAL") == "final"
    assert keyword_text("\uff12\uff10\uff12\uff13") == "2023"
    assert keyword_text("Stra\u00dfe") == keyword_text("STRASSE")
    # case folding decomposes ΐ: normalised again, the word stays one word
    lower, upper = "\u03b1\u0390\u03b2", "\u0391\u03aa\u0301\u0392"  # alpha, iota, beta
    assert keyword_text(lower) == keyword_text(upper) == lower


def test_stemmed_bm25_matches_an_inflected_question() -> None:
    docs = ["Carol lives in Dublin now.", "Carol has type 1 diabetes."]
    plain = bm25_scores("Where does Carol live?", docs)
    stemmed = bm25_scores("Where does Carol live?", docs, stemmed=True)
    assert plain[0] == plain[1]  # only "carol" matches
    assert stemmed[0] > stemmed[1] > 0.0


def test_keyword_weight_enters_the_blend() -> None:
    cands = [cand("a", 0.5, keyword=4.0), cand("b", 0.5, keyword=2.0)]
    weights = RecallWeights(similarity=0.5, keyword=0.5, importance=0.0, recency=0.0)
    ranked = rank(cands, T0, params(weights=weights))
    assert [(s.memory_id, s.keyword) for s in ranked] == [("a", 1.0), ("b", 0.5)]
    assert ranked[0].final == pytest.approx(0.75)


def test_negative_cosine_counts_as_zero() -> None:
    (scored,) = rank([cand("a", -0.4)], T0, params())
    assert scored.similarity == 0.0


def test_nan_similarity_is_rejected() -> None:
    with pytest.raises(InvalidField, match="similarity"):
        rank([cand("a", float("nan"))], T0, params())


def test_k_and_min_score() -> None:
    cands = [cand(str(i), i / 10) for i in range(10)]
    assert [s.memory_id for s in rank(cands, T0, params(k=3))] == ["9", "8", "7"]
    kept = rank(cands, T0, params(min_score=0.5 * 0.7 + 0.3 * 0.5 + 0.2))
    assert [s.memory_id for s in kept] == ["9", "8", "7"]
    with pytest.raises(InvalidField):
        RankParams(k=0)


def test_ties_break_by_id() -> None:
    ranked = rank([cand("b", 0.5), cand("a", 0.5)], T0, params())
    assert [s.memory_id for s in ranked] == ["a", "b"]


def test_graph_proximity_and_graphrag() -> None:
    relations = {"a": ["b"], "b": ["c"], "x": []}
    hops = hops_from(["a"], relations)
    assert hops == {"a": 0, "b": 1, "c": 2}
    assert [proximity(hops.get(m)) for m in "abcx"] == [1.0, 0.5, pytest.approx(1 / 3), 0.0]
    cands = [cand("c", 0.9, graph_hops=2), cand("x", 0.9)]
    plain = rank(cands, T0, params())
    assert plain[0].final == plain[1].final
    rag = rank(cands, T0, params(graphrag=True))
    assert rag[0].memory_id == "c"
    vector_part = 0.5 * 0.9 + 0.3 * 0.5 + 0.2 * 1.0
    assert rag[0].final == pytest.approx(vector_part * 0.7 + (1 / 3) * 0.3)
    assert rag[1].final == pytest.approx(vector_part * 0.7)


@pytest.mark.parametrize("preset", [RecallPreset.POWERMEM, RecallPreset.ZEPH])
def test_graphrag_blends_into_every_presets_own_score(preset: RecallPreset) -> None:
    """SPEC section 6: "GraphRAG (any preset)"; it was accepted and ignored for these two."""
    cands = [cand("near", 0.9), cand("linked", 0.8, graph_hops=0)]
    plain = rank(cands, T0, params(preset=preset))
    assert [s.memory_id for s in plain] == ["near", "linked"]
    assert all(s.graph == 0.0 for s in plain)
    rag = rank(cands, T0, params(preset=preset, graphrag=True))
    assert [s.memory_id for s in rag] == ["linked", "near"]
    assert {s.memory_id: s.graph for s in rag} == {"linked": 1.0, "near": 0.0}
    if preset is RecallPreset.POWERMEM:  # similarity × recency, recency 1 here
        assert [s.final for s in rag] == pytest.approx([0.8 * 0.7 + 0.3, 0.9 * 0.7])


def test_hops_stop_at_max() -> None:
    chain = {str(i): [str(i + 1)] for i in range(10)}
    assert max(hops_from(["0"], chain, max_hops=3).values()) == 3


def test_graph_weight_in_blend() -> None:
    weights = RecallWeights(similarity=0, importance=0, recency=0, graph=1.0)
    ranked = rank(
        [cand("a", 0.1, graph_hops=0), cand("b", 0.9, graph_hops=1)], T0, params(weights=weights)
    )
    assert [(s.memory_id, s.final) for s in ranked] == [("a", 1.0), ("b", 0.5)]


class TestMmr:
    def test_first_pick_is_most_relevant_then_diverse(self) -> None:
        vectors = [(1.0, 0.0), (0.99, 0.14), (0.0, 1.0)]
        order = mmr([1.0, 0.95, 0.6], vectors, 0.5)
        assert [i for i, _ in order] == [0, 2, 1]
        assert order[0][1] == pytest.approx(0.5)

    def test_lambda_one_is_relevance_order(self) -> None:
        vectors = [(1.0, 0.0), (1.0, 0.0), (0.0, 1.0)]
        assert [i for i, _ in mmr([0.9, 0.8, 0.1], vectors, 1.0)] == [0, 1, 2]

    def test_scores_never_increase(self) -> None:
        vectors = [(math.cos(a), math.sin(a)) for a in (0.0, 0.1, 0.5, 1.0, 1.5)]
        scores = [v for _, v in mmr([0.9, 0.85, 0.7, 0.6, 0.3], vectors, 0.6)]
        assert scores == sorted(scores, reverse=True)

    def test_mmr_in_rank_demotes_a_near_copy(self) -> None:
        cands = [
            cand("a", 0.9, vector=(1.0, 0.0)),
            cand("a2", 0.89, vector=(1.0, 0.01)),
            cand("b", 0.7, vector=(0.0, 1.0)),
        ]
        assert [s.memory_id for s in rank(cands, T0, params())] == ["a", "a2", "b"]
        diverse = rank(cands, T0, params(mmr_lambda=0.5))
        assert [s.memory_id for s in diverse] == ["a", "b", "a2"]


class TestZeph:
    def test_formula(self) -> None:
        cands = [
            Candidate(
                "old-semantic", 0.8, 0.5, T0, T0 - timedelta(days=30), TAU, Tier.SEMANTIC, 1.0
            ),
            Candidate("new-episodic", 0.4, 1.0, T0, T0, TAU, Tier.EPISODIC, 2.0),
        ]
        ranked = rank(cands, T0, params(preset=RecallPreset.ZEPH))
        by_id = {s.memory_id: s for s in ranked}
        # relevance = (0.7·sim/max + 0.3·kw/max) × 2^(-age/30 d); MMR without vectors: λ·relevance
        old_rel = (0.7 * 1.0 + 0.3 * 0.5) * 0.5
        new_rel = (0.7 * 0.5 + 0.3 * 1.0) * 1.0
        assert by_id["old-semantic"].recency == pytest.approx(0.5)
        assert by_id["old-semantic"].final == pytest.approx(0.7 * old_rel + 0.15 * 0.5 + 0.3)
        assert by_id["new-episodic"].final == pytest.approx(0.7 * new_rel + 0.15 * 1.0)
        assert [s.memory_id for s in ranked] == ["old-semantic", "new-episodic"]

    def test_future_creation_does_not_boost(self) -> None:
        c = Candidate("a", 1.0, 0.0, T0, T0 + hours(5), TAU, Tier.WORKING)
        (scored,) = rank([c], T0, params(preset=RecallPreset.ZEPH))
        assert scored.recency == 1.0


def test_powermem_preset_multiplies() -> None:
    ranked = rank([cand("a", 0.8, idle_h=TAU)], T0, params(preset=RecallPreset.POWERMEM))
    assert ranked[0].final == pytest.approx(0.8 * math.exp(-1))


def test_given_decay_rates_replace_each_candidate_s_tau_by_its_tier_s() -> None:
    memories = [
        cand("w", 0.8, idle_h=1.2, tier=Tier.WORKING),
        cand("s", 0.8, idle_h=4.8, tier=Tier.SEMANTIC),
    ]
    powermem = dataclasses.replace(
        params(preset=RecallPreset.POWERMEM), decay=DECAY_PRESETS[DecayPreset.POWERMEM]
    )
    assert [s.recency for s in rank(memories, T0, powermem)] == pytest.approx([math.exp(-1)] * 2)
    own = rank(memories, T0, params(preset=RecallPreset.POWERMEM))  # each its τ of 240 h
    assert [s.recency for s in own] == pytest.approx([math.exp(-1.2 / TAU), math.exp(-4.8 / TAU)])


def test_recall_hops_start_from_the_most_similar_candidates() -> None:
    similarity = {"s1": 0.9, "s2": 0.8, "t1": 0.7, "t0": 0.7, "low": 0.1, "far": 0.2}
    relations = {"s1": ["low"], "low": ["x"], "x": ["far"], "far": []}
    hops = recall_hops(similarity, relations)
    # seeds: s1, s2 and t0 (ties by id); low is one hop from s1 (relations go both ways)
    assert {m: h for m, h in hops.items() if h == 0} == {"s1": 0, "s2": 0, "t0": 0}
    assert (hops["low"], hops["far"]) == (1, 3)
    assert "t1" not in hops
    assert "far" not in recall_hops(similarity, relations, max_hops=2)
    assert recall_hops(similarity, {}, seeds=1) == {"s1": 0}


def test_which_presets_read_and_stem_keywords() -> None:
    read = {p: RecallPolicy.of(p).scores_keywords for p in RecallPreset}
    stem_ = {p: RecallPolicy.of(p).stems_keywords for p in RecallPreset}
    assert read == {
        RecallPreset.MNEMOSTREAM: True,
        RecallPreset.ZEROMEMORY: False,  # keyword weight 0
        RecallPreset.ZEPH: True,  # its own 0.3 keyword share
        RecallPreset.POWERMEM: False,
    }
    assert [p for p, s in stem_.items() if s] == [RecallPreset.MNEMOSTREAM]
    keyed = RecallPolicy(preset=RecallPreset.ZEROMEMORY, weights=RecallWeights(keyword=0.2))
    assert keyed.scores_keywords


def test_zeph_returns_a_near_duplicate_its_mmr_scores_below_zero_unless_a_minimum_is_asked() -> (
    None
):
    """A default minimum of 0 dropped it: k 10 of 2 candidates gave 1, where zeph gives 2."""
    norm = math.hypot(0.3, 0.95)
    a = cand("A", 0.6, 0.5, 24.0, vector=(0.6, 0.8))
    b = cand("B", 0.3, 0.2, 24.0, vector=(0.3 / norm, 0.95 / norm))  # cosine to A 0.94
    weights = RecallWeights(0.0, 0.0, 0.0, 0.0)
    found = rank([a, b], T0, params(preset=RecallPreset.ZEPH, weights=weights))
    assert [s.memory_id for s in found] == ["A", "B"]
    assert found[1].final < 0
    asked = params(preset=RecallPreset.ZEPH, weights=weights, min_score=0.0)
    assert [s.memory_id for s in rank([a, b], T0, asked)] == ["A"]
