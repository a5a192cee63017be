"""Offline: can the supersession rule reach a user's older fact? (figures of docs/quality.md).

    .venv/bin/python -m bench.supersession_reach [--seed 7] [--crowded 0,200] [--neighbours 10]
                                                 [--cache var/quality_study] [--json]

No service. The ``updates --first-person`` workload of :mod:`bench.quality` (``--crowded N``: a
user with N more things said of themselves), embedded with all-MiniLM-L6-v2 as the service embeds
a text (:class:`bench.quality_study.CachedEmbedder`). Each pair is a fact's version and the one
before it, of one user ("I live in Toronto." → "I live in Hanoi now."). Per pair:

* **cosine**: of the two statements; the share of pairs at or above each of ``THRESHOLDS``, and
  the lowest (the rule's floors: ``min_cosine`` 0.5, ``speaker_min_cosine`` 0.1);
* **found by the statement**: the older version is among the ``--neighbours`` nearest of the newer
  statement, among the user's memories written before it (its fact's earlier versions left out:
  superseded by then, as the worker's search filters them), as the worker's search finds it;
* **found by the stem**: among the ``--neighbours`` nearest of the fact's stem
  (:func:`memcore.fact_stem`, "i lives in"), the worker's second search, whose hits count only
  where the newer statement of the pair says its value is new (every later version of this
  workload does);
* **decided**: :func:`memcore.supersession.detect` supersedes it, given the pair's cosine, under
  the default policy, and under the stop-60 rule (``speaker_min_cosine`` = ``min_cosine``);
* **reached**: found by either search and decided by the default policy: what the worker does
  if its neighbours are these (the hot cache and Milvus answer exact top n).

Embeddings are cached in ``--cache`` (``var/``, not committed), so reruns take seconds.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from bench.quality import UPDATE_TENANTS, Workload, Write, updates_workload
from bench.quality_study import DEFAULT_CACHE, CachedEmbedder, Matrix
from memcore.supersession import (
    SupersessionPolicy,
    Version,
    detect,
    fact_of,
    fact_stem,
    states_an_update,
)

THRESHOLDS = (0.5, 0.4, 0.3, 0.2, 0.1)
Embed = Callable[[Sequence[str]], Matrix]


@dataclass(frozen=True)
class Pair:
    """A fact's version and the one before it, of one user, as the two searches find it.

    Attributes:
        older: the earlier version's text; ``newer``: the later one's.
        cosine: the two statements' cosine.
        rank: the older version's rank (1 = nearest) among the newer statement's candidates;
            ``stem_rank``: among its stem's (None: the statement states no fact, or does not
            say its value is new, so nothing its stem finds counts).
        decided: the default policy supersedes it at ``cosine``; ``decided_at_min``: so does a
            policy whose speaker floor is its ``min_cosine`` (the rule before stop 61).
    """

    older: str
    newer: str
    cosine: float
    rank: int
    stem_rank: int | None
    decided: bool
    decided_at_min: bool


def fact_versions(w: Workload) -> dict[str, list[Write]]:
    """Each first-person fact's versions (said under a ``user_id``; the crowd left out), oldest
    first, by ``tenant-person-attribute``; none for the other phrasings.
    """
    facts: dict[str, list[Write]] = {}
    for x in w.writes:
        stem, _, n = x.memory_id.rpartition("-")
        if x.user_id is not None and "-crowd-" not in x.memory_id and n.isdigit():
            facts.setdefault(stem, []).append(x)
    return {
        k: sorted(v, key=lambda x: int(x.memory_id.rpartition("-")[2])) for k, v in facts.items()
    }


def _rank(scores: Matrix, target: int) -> int:
    """``target``'s rank by descending score, 1-based; a tie counts against it."""
    return int(np.sum(scores >= scores[target]))


def _decides(older: Write, newer: Write, cosine: float, policy: SupersessionPolicy) -> bool:
    scope = ("", newer.user_id or "")
    new = Version(newer.memory_id, newer.content, newer.at, scope=scope)
    old = Version(older.memory_id, older.content, older.at, cosine, scope)
    return any(s.older == older.memory_id for s in detect(new, [old], policy))


def pairs(w: Workload, embed: Embed, policy: SupersessionPolicy) -> list[Pair]:
    """Every pair of the workload's first-person facts (:class:`Pair`), in write order."""
    index = {x.memory_id: i for i, x in enumerate(w.writes)}
    vectors = embed([x.content for x in w.writes])
    at_min = replace(policy, speaker_min_cosine=policy.min_cosine)
    todo: list[tuple[Write, Write, list[int], str | None]] = []
    for versions in fact_versions(w).values():
        for n in range(1, len(versions)):
            older, newer = versions[n - 1], versions[n]
            gone = {v.memory_id for v in versions[: n - 1]}
            candidates = [
                index[x.memory_id]
                for x in w.writes
                if x.user_id == newer.user_id and x.at < newer.at and x.memory_id not in gone
            ]
            fact = fact_of(newer.content, policy.max_words, generic=True)
            marked = states_an_update(newer.content)
            stem = fact_stem(fact) if fact is not None and marked else None
            todo.append((older, newer, candidates, stem))
    stems = sorted({s for *_, s in todo if s is not None})
    stem_vectors = dict(zip(stems, embed(stems), strict=True)) if stems else {}
    out = []
    for older, newer, candidates, stem in sorted(todo, key=lambda t: t[1].at):
        target = candidates.index(index[older.memory_id])
        cosine = float(vectors[index[older.memory_id]] @ vectors[index[newer.memory_id]])
        by_stem = None if stem is None else _rank(vectors[candidates] @ stem_vectors[stem], target)
        out.append(
            Pair(
                older.content,
                newer.content,
                cosine,
                _rank(vectors[candidates] @ vectors[index[newer.memory_id]], target),
                by_stem,
                _decides(older, newer, cosine, policy),
                _decides(older, newer, cosine, at_min),
            )
        )
    return out


def summary(found: Sequence[Pair], neighbours: int) -> dict[str, Any]:
    """Shares of ``found`` (0-1) at each threshold, found by each search within ``neighbours``,
    decided and reached; the lowest cosine and its pair.
    """
    n = len(found)

    def share(hit: Callable[[Pair], bool]) -> float:
        return sum(1 for p in found if hit(p)) / n if n else 0.0

    def near(p: Pair) -> bool:
        return p.rank <= neighbours

    def at_least(threshold: float) -> Callable[[Pair], bool]:
        return lambda p: p.cosine >= threshold

    def by_stem(p: Pair) -> bool:
        return p.stem_rank is not None and p.stem_rank <= neighbours

    lowest = min(found, key=lambda p: p.cosine, default=None)
    return {
        "pairs": n,
        **{f"cosine >= {t}": share(at_least(t)) for t in THRESHOLDS},
        "lowest cosine": None if lowest is None else round(lowest.cosine, 3),
        "lowest pair": None if lowest is None else [lowest.older, lowest.newer],
        "found by statement": share(near),
        "found by stem": share(by_stem),
        "found by either": share(lambda p: near(p) or by_stem(p)),
        "decided (min_cosine only)": share(lambda p: p.decided_at_min),
        "decided": share(lambda p: p.decided),
        "reached (statement only, min_cosine only)": share(lambda p: near(p) and p.decided_at_min),
        "reached": share(lambda p: (near(p) or by_stem(p)) and p.decided),
    }


def run(
    seed: int, crowds: Sequence[int], neighbours: int, embed: Embed
) -> list[tuple[int, dict[str, Any]]]:
    """One summary per crowd size over all the bench's tenants (:data:`UPDATE_TENANTS`)."""
    policy = SupersessionPolicy()
    out = []
    for crowded in crowds:
        workloads = updates_workload(seed, UPDATE_TENANTS, phrasing="first-person", crowded=crowded)
        found = [p for w in workloads for p in pairs(w, embed, policy)]
        out.append((crowded, summary(found, neighbours)))
    return out


def markdown(rows: Sequence[tuple[int, dict[str, Any]]], neighbours: int) -> str:
    """One column per crowd size; shares as percentages."""
    names = [k for k in rows[0][1] if k != "lowest pair"] if rows else []
    lines = [
        "| | " + " | ".join(f"crowded {c}" for c, _ in rows) + " |",
        "|---|" + "---|" * len(rows),
    ]
    for name in names:
        cells = []
        for _, row in rows:
            value = row[name]
            is_share = isinstance(value, float) and name != "lowest cosine"
            cells.append(f"{value:.0%}" if is_share else str(value))
        lines.append(
            f"| {name.replace('found', f'found in {neighbours}')} | " + " | ".join(cells) + " |"
        )
    for crowded, row in rows:
        lines.append(f"\nlowest pair, crowded {crowded}: {row['lowest pair']}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seed", type=int, default=7, help="the workload's seed")
    parser.add_argument(
        "--crowded", default="0,200", help="comma-separated crowd sizes (bench.quality --crowded)"
    )
    parser.add_argument("--neighbours", type=int, default=10, help="the search's size")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="embedding cache folder")
    parser.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    args = parser.parse_args(argv)
    try:
        crowds = [int(c) for c in args.crowded.split(",")]
    except ValueError:
        parser.error(f"--crowded: expected comma-separated integers, not {args.crowded!r}")
    if args.neighbours < 1 or any(c < 0 for c in crowds):
        parser.error("--neighbours must be >= 1 and --crowded sizes >= 0")
    rows = run(args.seed, crowds, args.neighbours, CachedEmbedder(args.cache).embed)
    print(json.dumps(rows, indent=1) if args.json else markdown(rows, args.neighbours))


if __name__ == "__main__":
    main()
