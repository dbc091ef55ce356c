"""A deterministic synthetic community corpus for the BM25 benchmark (docs/bm25.md).

Words are synthetic and pronounceable (consonant-vowel syllables), drawn from a Zipf-like
distribution over a fixed vocabulary, mixed with real English stopwords at their natural rate, so
the ``english`` stemmer and stopword list behave as on prose. Each object has a small topic of
bursty words (repeated within the object, so tf > 1 happens as in real text). Queries take 1-8
terms, mostly from one object's topic plus common vocabulary, the way people search for a thing
they half remember.

Tier mix (share of objects): shared T0 5 %, T1 45 %, T2 30 %, T3 13 %, private boards 5 %,
personal (owner-only) notes 2 %. Readers: ``r100`` (T3 with every private-board grant),
``r50`` (T1), ``r5`` (T0).

Each chunk is one paragraph of 210-390 characters; with ``chunk_chars = 400`` and no overlap the
chunker cuts exactly at paragraph breaks, so the number of chunks is known before loading.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass

STOPWORDS = ("the of and to a in is that for it as was with be by on not he this are or his from at "
             "which but have an they you were her she there been one all we their has would when if "
             "so no will more can who its what about into than them only other some could our").split()
ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "tr", "st", "pl", "gr", "sh"]
VOWELS = ["a", "e", "i", "o", "u", "ai", "ou"]
CHUNK_CHARS = 400
CHUNK_OVERLAP = 0

# (category, share of objects, tier, space kind)
CATEGORIES = [
    ("shared", 0.05, "T0"),
    ("shared", 0.45, "T1"),
    ("shared", 0.30, "T2"),
    ("shared", 0.13, "T3"),
    ("private", 0.05, "T0"),
    ("note", 0.02, "T0"),
]
N_BOARDS = 20
N_COURSES = 12  # min tier T1, T2, T3 by course % 3
N_PRIVATE = 5
N_OWNERS = 500


def make_vocab(size: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    seen: set[str] = set(STOPWORDS)
    out: list[str] = []
    while len(out) < size:
        n = rng.choice((2, 2, 3, 3, 3, 4))
        w = "".join(rng.choice(ONSETS) + rng.choice(VOWELS) for _ in range(n))
        if rng.random() < 0.3:
            w += rng.choice(("n", "r", "l", "m"))
        if w not in seen:
            seen.add(w)
            out.append(w)
    return out


# The benchmark scripts' one-object write: put_object with its named parameters, bound to
# Obj.as_json() (whose keys are exactly those names).
PUT_OBJECT_SQL = (
    "select groundkit.put_object(object_id => %(object_id)s, version => %(version)s,"
    " content_type => %(content_type)s, space_id => %(space_id)s, tier_visibility => %(tier_visibility)s,"
    " title => %(title)s, body => %(body)s, owner_sub => %(owner_sub)s, owner_only => %(owner_only)s)"
)


@dataclass
class Obj:
    object_id: str
    content_type: str
    space_id: str
    tier: str
    owner_sub: str | None
    owner_only: bool
    title: str
    paragraphs: list[str]
    topic: list[str]

    @property
    def body(self) -> str:
        return "\n\n".join(self.paragraphs)

    def as_json(self, version: int = 1) -> dict[str, object]:
        return {
            "object_id": self.object_id, "version": version, "content_type": self.content_type,
            "space_id": self.space_id, "tier_visibility": self.tier, "title": self.title,
            "body": self.body, "owner_sub": self.owner_sub, "owner_only": self.owner_only,
        }


class Corpus:
    def __init__(self, seed: int = 7, vocab_size: int = 60_000, zipf_s: float = 1.05) -> None:
        self.seed = seed
        self.vocab = make_vocab(vocab_size, seed)
        weights = [1.0 / (r + 1) ** zipf_s for r in range(len(self.vocab))]
        self.cum = list(itertools.accumulate(weights))
        sw = [1.0 / (r + 1) for r in range(len(STOPWORDS))]
        self.sw_cum = list(itertools.accumulate(sw))

    def spaces(self) -> list[tuple[str, str, bool]]:
        out = [(f"board-{i}", "T0", False) for i in range(N_BOARDS)]
        out += [(f"course-{i}", ("T1", "T2", "T3")[i % 3], False) for i in range(N_COURSES)]
        out += [(f"private-{i}", "T0", True) for i in range(N_PRIVATE)]
        out.append(("notes", "T0", False))
        return out

    def _word(self, rng: random.Random) -> str:
        return self.vocab[bisect.bisect_left(self.cum, rng.random() * self.cum[-1])]

    def _stop(self, rng: random.Random) -> str:
        return STOPWORDS[bisect.bisect_left(self.sw_cum, rng.random() * self.sw_cum[-1])]

    def _paragraph(self, rng: random.Random, topic: list[str]) -> str:
        target = rng.randint(210, 380)
        words: list[str] = []
        length = -1
        while True:
            r = rng.random()
            w = self._stop(rng) if r < 0.35 else (rng.choice(topic) if r < 0.5 else self._word(rng))
            if length + 1 + len(w) > 390:
                break
            words.append(w)
            length += 1 + len(w)
            if length >= target:
                break
        return " ".join(words)

    @staticmethod
    def _category(rng: random.Random, cat_cum: list[float]) -> tuple[str, str]:
        """An object's (category, tier), drawn by CATEGORIES' shares."""
        cat, _share, tier = CATEGORIES[bisect.bisect_left(cat_cum, rng.random() * cat_cum[-1])]
        return cat, tier

    @staticmethod
    def _place(rng: random.Random, cat: str, tier: str) -> tuple[str, str | None, bool, str]:
        """An object's (space, owner, owner_only, content type) in its category. (objects() draws
        these after the topic: the kept benchmark databases' queries depend on that order.)"""
        if cat == "shared":
            if tier == "T0" or rng.random() < 0.6:
                return f"board-{rng.randrange(N_BOARDS)}", None, False, "board_post"
            rank = int(tier[1])
            return f"course-{rng.randrange(N_COURSES // 3) * 3 + rng.randrange(rank)}", None, False, "course_section"
        if cat == "private":
            return f"private-{rng.randrange(N_PRIVATE)}", None, False, "board_post"
        return "notes", f"owner-{rng.randrange(N_OWNERS)}", True, "member_note"

    def _topic(self, rng: random.Random) -> list[str]:
        # topics come from the middle of the distribution, like real subjects
        return [self.vocab[min(int(rng.paretovariate(0.6) * 30), len(self.vocab) - 1)] for _ in range(8)]

    def documents(self, n: int) -> Iterator[Obj]:
        """``n`` documents of 40-160 words each, one body without paragraph breaks (chunked by the
        database's own settings), placed like objects(): what a new user's first load looks like."""
        rng = random.Random(self.seed * 1_000_003 + 2)
        cat_cum = list(itertools.accumulate(c[1] for c in CATEGORIES))
        for i in range(n):
            cat, tier = self._category(rng, cat_cum)
            topic = self._topic(rng)
            space, owner, owner_only, ctype = self._place(rng, cat, tier)
            words = [self._stop(rng) if (r := rng.random()) < 0.35 else
                     (rng.choice(topic) if r < 0.5 else self._word(rng)) for _ in range(rng.randint(40, 160))]
            title = " ".join(rng.choice(topic) for _ in range(rng.randint(2, 6)))
            yield Obj(f"doc-{i}", ctype, space, tier, owner, owner_only, title, [" ".join(words)], topic)

    def objects(self, n_chunks: int) -> Iterator[Obj]:
        """Objects until exactly ``n_chunks`` paragraphs (= chunks) have been produced."""
        rng = random.Random(self.seed * 1_000_003 + 1)
        cat_cum = list(itertools.accumulate(c[1] for c in CATEGORIES))
        produced = 0
        i = 0
        while produced < n_chunks:
            cat, tier = self._category(rng, cat_cum)
            x = rng.random()
            n = 1 if x < 0.6 else (rng.randint(2, 3) if x < 0.85 else rng.randint(4, 8))
            n = min(n, n_chunks - produced)
            topic = self._topic(rng)
            space, owner, owner_only, ctype = self._place(rng, cat, tier)
            title = " ".join(rng.choice(topic) if rng.random() < 0.6 else self._word(rng)
                             for _ in range(rng.randint(2, 6)))
            paragraphs = [self._paragraph(rng, topic) for _ in range(n)]
            yield Obj(f"obj-{i}", ctype, space, tier, owner, owner_only, title, paragraphs, topic)
            produced += n
            i += 1

    def queries(self, n: int, sample: list[Obj], seed: int = 11) -> list[str]:
        rng = random.Random(seed)
        lengths = [1, 2, 3, 4, 5, 6, 7, 8]
        weights = [0.12, 0.22, 0.22, 0.16, 0.10, 0.08, 0.05, 0.05]
        out = []
        for _ in range(n):
            m = rng.choices(lengths, weights)[0]
            obj = rng.choice(sample)
            terms = []
            for _ in range(m):
                r = rng.random()
                if r < 0.6:
                    terms.append(rng.choice(obj.topic))
                elif r < 0.9:
                    terms.append(self._word(rng))
                else:
                    terms.append(self._stop(rng))
            if all(t in STOPWORDS for t in terms):
                terms[0] = rng.choice(obj.topic)
            out.append(" ".join(terms))
        return out
