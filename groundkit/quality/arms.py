"""Reference BM25 retrieval arms, run side by side with groundkit on the same collection.

Each arm indexes ``title + " " + text`` for every document of a :class:`Collection`, runs every query,
and returns the top :data:`TOP_K` docs per query as a run (query id -> doc id -> score, higher is
better) together with the time spent indexing and querying.

==============  ==========================================================================================
arm             ranking
==============  ==========================================================================================
``fts5``        SQLite FTS5 ``bm25()`` (k1 1.2, b 0.75, fixed), ``tokenize='porter unicode61'``, no
                stopwords; the query is an OR of its quoted terms
``tantivy``     tantivy BM25 (k1 1.2, b 0.75, fixed), ``en_stem`` tokenizer (Snowball English, no
                stopwords); the query is a disjunction of its terms
``bm25s``       bm25s, Lucene variant, k1 0.9, b 0.4 (groundkit's defaults), Lucene's 33 English
                stopwords, PyStemmer ``english``
``bm25s-k1.2``  the same at k1 1.2, b 0.75: the settings ``datasets/README.md`` measures with
==============  ==========================================================================================

``per_group``: each query is answered from the documents of its own group only (a meeting:
:attr:`Collection.query_groups`), the statistics staying the whole collection's, as groundkit's
search filtered to one space keeps them: bm25s masks the other documents' scores to 0, tantivy
and FTS5 filter on a group field that takes no part in the score.

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
from typing import Final, Protocol

from groundkit.quality.datasets import Collection, Doc

__all__ = [
    "ARMS",
    "TOP_K",
    "ArmResult",
    "ArmUnavailable",
    "ReferenceArm",
    "Refusal",
    "bm25s_arm",
    "bm25s_lucene_arm",
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
class Refusal:
    """A query an arm refused to run (groundkit's search: a typed error), and why."""

    query_id: str
    code: str  # the error's SQLSTATE (GK005, ...), or its class where it has none
    reason: str


@dataclass(frozen=True, slots=True)
class ArmResult:
    """One arm's run over a collection's queries, with timings in seconds. A refused query has
    no entry in ``run`` (it scores 0) and one in ``refused``."""

    arm: str
    run: dict[str, dict[str, float]]
    index_seconds: float
    query_seconds: float
    refused: tuple[Refusal, ...] = field(default=())


class ReferenceArm(Protocol):
    def __call__(self, collection: Collection, k: int = ..., *, per_group: bool = ...) -> ArmResult: ...


def _group_of(collection: Collection, per_group: bool) -> Callable[[str], str | None]:
    """The group a query is answered within (None: the whole collection)."""
    if not per_group:
        return lambda _query_id: None
    if not collection.grouped:
        raise ValueError(f"{collection.name} names no groups: it cannot be searched per group")
    return lambda query_id: collection.query_groups[query_id]


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


def fts5_arm(collection: Collection, k: int = TOP_K, *, per_group: bool = False) -> ArmResult:
    """SQLite FTS5 ``bm25()`` with the ``porter unicode61`` tokenizer, in an in-memory database."""
    group_of = _group_of(collection, per_group)
    con = sqlite3.connect(":memory:")
    try:
        started = time.perf_counter()
        con.execute("CREATE VIRTUAL TABLE docs USING fts5(body, grp UNINDEXED, tokenize='porter unicode61')")
        doc_ids = [doc.doc_id for doc in collection.docs]
        con.executemany(
            "INSERT INTO docs(rowid, body, grp) VALUES (?, ?, ?)",
            ((rowid, _body(doc), collection.doc_groups.get(doc.doc_id)) for rowid, doc in enumerate(collection.docs)),
        )
        con.commit()
        index_seconds = time.perf_counter() - started

        started = time.perf_counter()
        run: dict[str, dict[str, float]] = {}
        for query in collection.queries:
            match = _fts5_match(query.text)
            group = group_of(query.query_id)
            hits: dict[str, float] = {}
            if match is not None:
                rows = con.execute(
                    "SELECT rowid, bm25(docs) FROM docs WHERE docs MATCH ? AND (? IS NULL OR grp = ?)"
                    " ORDER BY bm25(docs) LIMIT ?",
                    (match, group, group, k),
                )
                # bm25() is negative, lower is better: flip the sign so that higher is better.
                hits = {doc_ids[rowid]: -float(score) for rowid, score in rows}
            run[query.query_id] = hits
        query_seconds = time.perf_counter() - started
    finally:
        con.close()
    return ArmResult("fts5", run, index_seconds, query_seconds)


# ------------------------------------------------------------------------------------------ tantivy


def tantivy_arm(collection: Collection, k: int = TOP_K, *, per_group: bool = False) -> ArmResult:
    """tantivy BM25 over an in-memory index with the ``en_stem`` tokenizer."""
    tantivy = _import("tantivy", "tantivy", "tantivy")
    group_of = _group_of(collection, per_group)
    started = time.perf_counter()
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("body", stored=False, tokenizer_name="en_stem")
    builder.add_text_field("grp", stored=False, tokenizer_name="raw")
    builder.add_unsigned_field("ord", stored=True)
    schema = builder.build()
    index = tantivy.Index(schema)
    writer = index.writer(heap_size=128_000_000, num_threads=1)
    for ordinal, doc in enumerate(collection.docs):
        writer.add_document(tantivy.Document(body=_body(doc), grp=collection.doc_groups.get(doc.doc_id, ""),
                                             ord=ordinal))
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
            group = group_of(query.query_id)
            if group is not None:
                # both must match; the group's clause scores 0, so the ranking is BM25's alone
                only = tantivy.Query.const_score_query(tantivy.Query.term_query(schema, "grp", group), 0.0)
                parsed = tantivy.Query.boolean_query([(tantivy.Occur.Must, only), (tantivy.Occur.Must, parsed)])
            for score, address in searcher.search(parsed, k).hits:
                hits[doc_ids[searcher.doc(address)["ord"][0]]] = float(score)
        run[query.query_id] = hits
    query_seconds = time.perf_counter() - started
    return ArmResult("tantivy", run, index_seconds, query_seconds)


# -------------------------------------------------------------------------------------------- bm25s


def bm25s_arm(collection: Collection, k: int = TOP_K, k1: float = 0.9, b: float = 0.4, *,
              per_group: bool = False, name: str = "bm25s") -> ArmResult:
    """bm25s, Lucene BM25 variant, English stopwords and PyStemmer's Snowball English stemmer."""
    bm25s = _import("bm25s", "bm25s", "bm25s")
    group_of = _group_of(collection, per_group)
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
    # queries by the group they are answered within; the other documents' scores masked to 0
    batches: dict[str | None, list[int]] = {}
    for n, query in enumerate(collection.queries):
        batches.setdefault(group_of(query.query_id), []).append(n)
    np = _import("numpy", "numpy", "bm25s")
    doc_group = [collection.doc_groups.get(d) for d in doc_ids]
    for group, positions in batches.items():
        if not depth:
            break
        mask = None if group is None else np.array([g == group for g in doc_group], dtype=np.float32)
        ids, scores = retriever.retrieve([query_tokens[n] for n in positions], k=depth, show_progress=False,
                                         n_threads=1, weight_mask=mask)
        for n, row_ids, row_scores in zip(positions, ids, scores, strict=True):
            run[collection.queries[n].query_id] = {
                doc_ids[int(i)]: float(s) for i, s in zip(row_ids, row_scores, strict=True) if s > 0}
    query_seconds = time.perf_counter() - started
    return ArmResult(name, run, index_seconds, query_seconds)


def bm25s_lucene_arm(collection: Collection, k: int = TOP_K, *, per_group: bool = False) -> ArmResult:
    """bm25s at k1 1.2, b 0.75 (the settings datasets/README.md's reference figures use)."""
    return bm25s_arm(collection, k, k1=1.2, b=0.75, per_group=per_group, name="bm25s-k1.2")


ARMS: Final[Mapping[str, ReferenceArm]] = {
    "fts5": fts5_arm,
    "tantivy": tantivy_arm,
    "bm25s": bm25s_arm,
    "bm25s-k1.2": bm25s_lucene_arm,
}
