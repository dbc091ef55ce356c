"""Reference BM25 retrieval arms, run side by side with groundkit on the same collection.

Each arm indexes ``title + " " + text`` for every document of a :class:`Collection`, runs every query,
and returns the top :data:`TOP_K` docs per query as a run (query id -> doc id -> score, higher is
better) together with the time spent indexing and querying.

===========  ==========================================================================================
arm          ranking
===========  ==========================================================================================
``fts5``     SQLite FTS5 ``bm25()`` (k1 1.2, b 0.75, fixed), ``tokenize='porter unicode61'``, no stopwords;
             the query is an OR of its quoted terms
``tantivy``  tantivy BM25 (k1 1.2, b 0.75, fixed), ``en_stem`` tokenizer (Snowball English, no stopwords);
             the query is a disjunction of its terms
``bm25s``    bm25s, Lucene variant, k1 0.9, b 0.4, Lucene's 33 English stopwords, PyStemmer ``english``
===========  ==========================================================================================

The engines are optional: each is imported inside its arm, and a missing one raises
:class:`ArmUnavailable` naming the package to install.
"""

from __future__ import annotations

import importlib
import re
import sqlite3
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Final

from groundkit.quality.datasets import Collection, Doc

__all__ = [
    "ARMS",
    "TOP_K",
    "ArmResult",
    "ArmUnavailable",
    "bm25s_arm",
    "fts5_arm",
    "query_terms",
    "tantivy_arm",
]

TOP_K: Final = 100

# Letters and digits (Unicode-aware), i.e. "word" characters without the underscore. Everything else
# (punctuation, quotes, brackets, operators such as + - : ^ ~ *) separates terms, so no query text can
# reach an engine's query language as syntax.
_TERM = re.compile(r"[^\W_]+")


class ArmUnavailable(ImportError):
    """The optional engine behind a reference arm is not installed."""


@dataclass(frozen=True, slots=True)
class ArmResult:
    """One arm's run over a collection's queries, with timings in seconds."""

    arm: str
    run: dict[str, dict[str, float]]
    index_seconds: float
    query_seconds: float
    #: the queries search refused, by query id, with the reason (each counts as no results)
    refused: dict[str, str] = field(default_factory=dict)


def _import(module: str, package: str, arm: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ArmUnavailable(
            f"the {arm!r} arm needs the {package!r} package: pip install {package} (or 'groundkit[eval]')"
        ) from exc


def _body(doc: Doc) -> str:
    return f"{doc.title} {doc.text}"


def query_terms(text: str) -> list[str]:
    """Split query text into plain terms (letters and digits only), dropping all query syntax."""
    return _TERM.findall(text)


# --------------------------------------------------------------------------------------------- FTS5


def _fts5_match(text: str) -> str | None:
    terms = query_terms(text)
    if not terms:
        return None
    # Each term as an FTS5 string (double quotes doubled), joined with OR: a bag-of-words query.
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


def fts5_arm(collection: Collection, k: int = TOP_K) -> ArmResult:
    """SQLite FTS5 ``bm25()`` with the ``porter unicode61`` tokenizer, in an in-memory database."""
    con = sqlite3.connect(":memory:")
    try:
        started = time.perf_counter()
        con.execute("CREATE VIRTUAL TABLE docs USING fts5(body, tokenize='porter unicode61')")
        doc_ids = [doc.doc_id for doc in collection.docs]
        con.executemany(
            "INSERT INTO docs(rowid, body) VALUES (?, ?)",
            ((rowid, _body(doc)) for rowid, doc in enumerate(collection.docs)),
        )
        con.commit()
        index_seconds = time.perf_counter() - started

        started = time.perf_counter()
        run: dict[str, dict[str, float]] = {}
        for query in collection.queries:
            match = _fts5_match(query.text)
            hits: dict[str, float] = {}
            if match is not None:
                rows = con.execute(
                    "SELECT rowid, bm25(docs) FROM docs WHERE docs MATCH ? ORDER BY bm25(docs) LIMIT ?",
                    (match, k),
                )
                # bm25() is negative, lower is better: flip the sign so that higher is better.
                hits = {doc_ids[rowid]: -float(score) for rowid, score in rows}
            run[query.query_id] = hits
        query_seconds = time.perf_counter() - started
    finally:
        con.close()
    return ArmResult("fts5", run, index_seconds, query_seconds)


# ------------------------------------------------------------------------------------------ tantivy


def tantivy_arm(collection: Collection, k: int = TOP_K) -> ArmResult:
    """tantivy BM25 over an in-memory index with the ``en_stem`` tokenizer."""
    tantivy = _import("tantivy", "tantivy", "tantivy")
    started = time.perf_counter()
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("body", stored=False, tokenizer_name="en_stem")
    builder.add_unsigned_field("ord", stored=True)
    schema = builder.build()
    index = tantivy.Index(schema)
    writer = index.writer(heap_size=128_000_000, num_threads=1)
    for ordinal, doc in enumerate(collection.docs):
        writer.add_document(tantivy.Document(body=_body(doc), ord=ordinal))
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    searcher = index.searcher()
    doc_ids = [doc.doc_id for doc in collection.docs]
    index_seconds = time.perf_counter() - started

    started = time.perf_counter()
    run: dict[str, dict[str, float]] = {}
    for query in collection.queries:
        terms = query_terms(query.text)
        hits: dict[str, float] = {}
        if terms:
            # Lower-cased, syntax-free terms: "AND"/"OR"/"NOT" become plain words and the parser's
            # default conjunction (OR) applies. en_stem lower-cases anyway.
            parsed = index.parse_query(" ".join(terms).lower(), ["body"])
            for score, address in searcher.search(parsed, k).hits:
                hits[doc_ids[searcher.doc(address)["ord"][0]]] = float(score)
        run[query.query_id] = hits
    query_seconds = time.perf_counter() - started
    return ArmResult("tantivy", run, index_seconds, query_seconds)


# -------------------------------------------------------------------------------------------- bm25s


def bm25s_arm(collection: Collection, k: int = TOP_K, k1: float = 0.9, b: float = 0.4) -> ArmResult:
    """bm25s, Lucene BM25 variant, English stopwords and PyStemmer's Snowball English stemmer."""
    bm25s = _import("bm25s", "bm25s", "bm25s")
    stemmer_module = _import("Stemmer", "PyStemmer", "bm25s")
    tokenization = _import("bm25s.tokenization", "bm25s", "bm25s")

    started = time.perf_counter()
    stemmer = stemmer_module.Stemmer("english")
    tokenizer = tokenization.Tokenizer(stopwords="en", stemmer=stemmer.stemWord)
    corpus_tokens = tokenizer.tokenize([_body(doc) for doc in collection.docs], return_as="tuple", show_progress=False)
    retriever = bm25s.BM25(method="lucene", k1=k1, b=b)
    retriever.index(corpus_tokens, show_progress=False)
    doc_ids = [doc.doc_id for doc in collection.docs]
    index_seconds = time.perf_counter() - started

    started = time.perf_counter()
    # Queries go through the same tokenizer without growing its vocabulary. bm25s drops terms the
    # corpus lacks, and scores a query left with no term as all zeros (filtered out below).
    query_tokens = tokenizer.tokenize(
        [query.text for query in collection.queries],
        update_vocab=False,
        return_as="string",
        show_progress=False,
    )
    run: dict[str, dict[str, float]] = {query.query_id: {} for query in collection.queries}
    depth = min(k, len(doc_ids))
    if collection.queries and depth:
        ids, scores = retriever.retrieve(query_tokens, k=depth, show_progress=False, n_threads=1)
        for query, row_ids, row_scores in zip(collection.queries, ids, scores, strict=True):
            run[query.query_id] = {doc_ids[int(i)]: float(s) for i, s in zip(row_ids, row_scores, strict=True) if s > 0}
    query_seconds = time.perf_counter() - started
    return ArmResult("bm25s", run, index_seconds, query_seconds)


ARMS: Final[Mapping[str, Callable[[Collection], ArmResult]]] = {
    "fts5": fts5_arm,
    "tantivy": tantivy_arm,
    "bm25s": bm25s_arm,
}
