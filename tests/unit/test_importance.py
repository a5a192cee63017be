from __future__ import annotations

import json

import pytest

from memcore import ImportanceSource, InvalidField, parse_llm_answer, resolve_importance
from memcore.importance import rule_importance, weighted_criteria_mean


@pytest.mark.parametrize(
    ("content", "metadata", "tags", "expected"),
    [
        ("ok", None, (), 0.0),
        ("x" * 51, None, (), 0.05),
        ("x" * 50, None, (), 0.0),
        ("x" * 101, None, (), 0.10),
        ("x" * 100, None, (), 0.05),
        ("This is IMPORTANT", None, (), 0.10),
        ("important important important", None, (), 0.10),
        ("urgent: my password is secret", None, (), 0.30),
        (
            "I dislike olives",
            None,
            (),
            0.10,
        ),  # whole words: 'dislike' does not also count as 'like'
        ("a notebook is likely here", None, (), 0.0),  # nor 'notebook' as 'note'
        ("remember: buy milk", None, (), 0.30),  # marker 0.2 + keyword 'remember' 0.1
        ("  Never: share keys", None, (), 0.20),  # marker after leading spaces
        ("first line\nalways: use UTC", None, (), 0.20),  # marker at the start of a later line
        ("I will never: do it", None, (), 0.0),  # not at the start of a line
        ("remember: a\nimportant: b", None, (), 0.40),  # marker counts once; two keywords
        ("why?", None, (), 0.05),
        ("wow!", None, (), 0.05),
        ("why?!", None, (), 0.10),
        ("plain", {"priority": "high"}, (), 0.20),
        ("plain", {"priority": "Medium"}, (), 0.10),
        ("plain", {"priority": "low"}, (), 0.0),
        ("plain", {"priority": 3}, (), 0.0),
        ("plain", None, ("work",), 0.05),
        ("plain", None, ("",), 0.0),
    ],
)
def test_rule_engine(
    content: str, metadata: dict[str, object] | None, tags: tuple[str, ...], expected: float
) -> None:
    assert rule_importance(content, metadata, tags) == expected


def test_rule_engine_caps_at_one() -> None:
    text = "remember: " + " ".join(
        ["important critical urgent note preference like dislike hate love password secret"] * 3
    )
    assert rule_importance(text + "?!", {"priority": "high"}, ("a",)) == 1.0


def test_rule_engine_sums_are_exact() -> None:
    # 0.1 + 0.05 in binary floats is 0.15000000000000002; the engine adds in hundredths.
    assert rule_importance("x" * 101 + "?") == 0.15


class TestLlmAnswer:
    def test_importance_score_field(self) -> None:
        assert parse_llm_answer('{"importance_score": 0.9}') == (0.9, ImportanceSource.LLM)

    def test_fenced_json_inside_prose(self) -> None:
        answer = 'Sure!\n```json\n{"importance_score": 0.4, "reasoning": "meh"}\n```'
        assert parse_llm_answer(answer) == (0.4, ImportanceSource.LLM)

    def test_criteria_mean_when_no_overall(self) -> None:
        answer = json.dumps({"criteria_scores": {"relevance": 1.0, "novelty": 0.0}})
        # weighted mean over the criteria present: 0.3 / (0.3 + 0.2)
        parsed = parse_llm_answer(answer)
        assert parsed is not None
        assert parsed[0] == pytest.approx(0.6)

    def test_out_of_range_overall_falls_to_criteria(self) -> None:
        answer = json.dumps({"importance_score": 7, "criteria_scores": {"factual": 0.5}})
        assert parse_llm_answer(answer) == (0.5, ImportanceSource.LLM)

    def test_regex_when_json_is_broken(self) -> None:
        assert parse_llm_answer("importance_score: 0.35, reasoning: ...") == (
            0.35,
            ImportanceSource.LLM_REGEX,
        )
        assert parse_llm_answer('{"importance": 0.8,,}') == (0.8, ImportanceSource.LLM_REGEX)
        assert parse_llm_answer("Score = .5") == (0.5, ImportanceSource.LLM_REGEX)

    @pytest.mark.parametrize(
        "answer",
        [
            "**Importance:** 0.8",
            "**Importance**: 0.8 because it is a preference",
            "- __score__ = *0.8*",
            "Importance score:\n  0.8",
        ],
    )
    def test_regex_reads_a_score_set_in_markdown(self, answer: str) -> None:
        assert parse_llm_answer(answer) == (0.8, ImportanceSource.LLM_REGEX)

    def test_regex_skips_out_of_range_numbers(self) -> None:
        assert parse_llm_answer("score: 8 ... importance: 0.25") == (
            0.25,
            ImportanceSource.LLM_REGEX,
        )

    @pytest.mark.parametrize(
        "answer", ["", "no idea", '{"importance_score": "high"}', "score: 1.5"]
    )
    def test_nothing_readable(self, answer: str) -> None:
        assert parse_llm_answer(answer) is None

    def test_nan_is_not_a_score(self) -> None:
        assert parse_llm_answer('{"importance_score": NaN}') is None

    def test_weighted_mean_of_nothing(self) -> None:
        assert weighted_criteria_mean({"mood": 0.5}) is None


class TestResolve:
    def test_explicit_wins(self) -> None:
        decision = resolve_importance("remember: x", explicit=0.05, llm_answer='{"score": 0.9}')
        assert (decision.score, decision.source) == (0.05, ImportanceSource.EXPLICIT)

    def test_llm_before_rules(self) -> None:
        decision = resolve_importance("remember: x", llm_answer='{"importance_score": 0.9}')
        assert (decision.score, decision.source) == (0.9, ImportanceSource.LLM)

    def test_unreadable_llm_falls_back_to_rules(self) -> None:
        decision = resolve_importance("remember: x", llm_answer="I cannot rate this")
        assert (decision.score, decision.source) == (0.3, ImportanceSource.RULES)
        assert "unreadable" in decision.reason

    def test_an_answer_nested_deeper_than_the_parser_goes_is_unreadable(self) -> None:
        for answer in ('{"importance_score": ' + "[" * 100_000, "{" * 100_000):
            assert parse_llm_answer(answer) is None
            decision = resolve_importance("remember: x", llm_answer=answer)
            assert (decision.score, decision.source) == (0.3, ImportanceSource.RULES)
            assert "unreadable" in decision.reason

    def test_no_llm_uses_rules(self) -> None:
        decision = resolve_importance("hello", tags=["t"])
        assert (decision.score, decision.source) == (0.05, ImportanceSource.RULES)

    @pytest.mark.parametrize("bad", [float("nan"), -0.1, 1.5, float("inf")])
    def test_explicit_out_of_range(self, bad: float) -> None:
        with pytest.raises(InvalidField) as err:
            resolve_importance("x", explicit=bad)
        assert err.value.field == "importance"
        assert "importance=" in str(err.value)
