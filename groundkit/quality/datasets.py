"""Typed loaders for the retrieval test collections used to measure groundkit's ranking quality.

Two on-disk layouts are understood:

* **BEIR**: ``corpus.jsonl`` (``_id``, ``title``, ``text``), ``queries.jsonl`` (``_id``, ``text``) and
  ``qrels/<split>.tsv`` (header ``query-id<TAB>corpus-id<TAB>score``). The copies on our machines have
  CRLF line endings.
* **Cranfield (SMART)**: ``cran.all.1400``, ``cran.qry`` and ``cranqrel``, records introduced by ``.I``
  with ``.T``/``.A``/``.B``/``.W`` fields, also CRLF.
* **Transcripts**: a BEIR folder with ``segments.jsonl`` beside it (QMSum's, see
  :mod:`groundkit.quality.transcripts`): documents are windows of turns ``MEETING:s-e`` and queries
  ``MEETING:qJ``, so each knows its meeting (:attr:`Collection.doc_groups`, ``query_groups``).

What content type the eval writes a collection's documents as (:attr:`Collection.content_type`):
``transcript`` for transcripts, ``board_post`` for the forum collections named in
:data:`CONTENT_TYPES`, else ``document``.

Loaders read files by path and never copy them. Everything returned is an immutable pydantic model.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Final

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "CONTENT_TYPES",
    "CRANFIELD_GAINS",
    "Collection",
    "CollectionFormatError",
    "Doc",
    "Query",
    "load_beir",
    "load_collection",
    "load_cranfield",
]


class CollectionFormatError(ValueError):
    """A path is not a test collection groundkit can read, or one of its files is malformed."""


class Doc(BaseModel):
    """One document of a collection. Retrieval indexes ``title + " " + text``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    doc_id: str
    title: str
    text: str


class Query(BaseModel):
    """One evaluation query."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    query_id: str
    text: str


class Collection(BaseModel):
    """Documents, the judged queries of one split, and graded judgments (query id -> doc id -> gain).

    Gains follow trec_eval: a gain >= 1 is relevant, 0 (or less) is judged non-relevant.
    ``content_type`` is what the eval writes the documents as. ``doc_groups`` and
    ``query_groups`` (empty, or one entry per document and per query) name the group each belongs
    to, a meeting of a transcript collection: scored per group, a query is searched within its
    own group only, as a member searches one meeting's talk.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    docs: tuple[Doc, ...]
    queries: tuple[Query, ...]
    qrels: Mapping[str, Mapping[str, int]]
    content_type: str = "document"
    doc_groups: Mapping[str, str] = Field(default_factory=dict)
    query_groups: Mapping[str, str] = Field(default_factory=dict)

    @property
    def grouped(self) -> bool:
        """Whether every document and query names its group (a meeting)."""
        return bool(self.doc_groups) and bool(self.query_groups)


#: collection folder -> the content type its documents are written as (forum posts and replies:
#: a board's posts). A folder not named here is ``document``, a transcript folder ``transcript``.
CONTENT_TYPES: Final[Mapping[str, str]] = MappingProxyType({
    "semeval-cqa-forum": "board_post",
    "semeval-cqa-comments": "board_post",
})


# Cranfield relevance codes (cranqrel column 3) -> trec_eval gains.
#
# cranqrel.readme quotes Cleverdon's scale, where a LOWER code is MORE relevant:
#   1 complete answer, 2 high degree of relevance, 3 useful background, 4 minimum interest,
#   5 no interest (never present).
# The file also holds exactly one ``-1`` line per query (225 in all), which the readme does not explain;
# ir_datasets documents it as "References of no interest".
#
# ir_datasets (``cranfield``) passes the raw codes through as relevance, and its QREL_DEFS describe the
# scale upside down (4 = complete answer, 1 = minimum interest), contradicting the readme shipped with
# the collection. We follow the readme instead: gain = 5 - code, so code 1 gets the largest gain and
# every code 1-4 counts as relevant for binary measures (recall, MRR). ``-1`` becomes gain 0: judged,
# not relevant.
CRANFIELD_GAINS: Final[Mapping[int, int]] = MappingProxyType({1: 4, 2: 3, 3: 2, 4: 1, -1: 0})


def _lines(path: Path) -> Iterator[str]:
    """Yield the lines of a UTF-8 text file without their LF or CRLF ending."""
    with path.open(encoding="utf-8", newline="") as handle:
        for line in handle:
            yield line.rstrip("\r\n")


def _require(path: Path) -> Path:
    if not path.is_file():
        raise CollectionFormatError(f"missing file: {path}")
    return path


# --------------------------------------------------------------------------------------------- BEIR


def _read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, object]]]:
    for lineno, line in enumerate(_lines(_require(path)), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CollectionFormatError(f"{path}:{lineno}: invalid JSON: {exc.msg}") from exc
        if not isinstance(record, dict):
            raise CollectionFormatError(f"{path}:{lineno}: expected a JSON object")
        yield lineno, record


def _field(record: dict[str, object], key: str, where: str, *, default: str | None = None) -> str:
    value = record.get(key, default)
    if not isinstance(value, str):
        raise CollectionFormatError(f"{where}: expected string field {key!r}")
    return value


def _read_beir_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    for lineno, line in enumerate(_lines(_require(path)), start=1):
        if not line.strip():
            continue
        cols = line.split("\t")
        if lineno == 1 and cols[0] == "query-id":
            continue
        if len(cols) != 3:
            raise CollectionFormatError(f"{path}:{lineno}: expected 3 tab-separated columns, got {len(cols)}")
        query_id, doc_id, score = (c.strip() for c in cols)
        try:
            qrels.setdefault(query_id, {})[doc_id] = int(score)
        except ValueError as exc:
            raise CollectionFormatError(f"{path}:{lineno}: score {score!r} is not an integer") from exc
    return qrels


def load_beir(path: Path, split: str = "test") -> Collection:
    """Load a BEIR-format collection, keeping only the queries judged in ``qrels/<split>.tsv``.

    Queries keep the order of ``queries.jsonl``; documents keep the order of ``corpus.jsonl``.
    """
    qrels = _read_beir_qrels(path / "qrels" / f"{split}.tsv")

    docs: list[Doc] = []
    for lineno, record in _read_jsonl(path / "corpus.jsonl"):
        where = f"{path / 'corpus.jsonl'}:{lineno}"
        docs.append(
            Doc(
                doc_id=_field(record, "_id", where),
                title=_field(record, "title", where, default=""),
                text=_field(record, "text", where, default=""),
            )
        )

    queries: list[Query] = []
    for lineno, record in _read_jsonl(path / "queries.jsonl"):
        where = f"{path / 'queries.jsonl'}:{lineno}"
        query_id = _field(record, "_id", where)
        if query_id in qrels:
            queries.append(Query(query_id=query_id, text=_field(record, "text", where)))

    missing = qrels.keys() - {q.query_id for q in queries}
    if missing:
        raise CollectionFormatError(
            f"{path}: {len(missing)} judged queries are not in queries.jsonl, e.g. {sorted(missing)[0]!r}"
        )
    return Collection(name=path.name, docs=tuple(docs), queries=tuple(queries), qrels=qrels)


# ---------------------------------------------------------------------------------------- Cranfield


def _smart_records(path: Path) -> Iterator[tuple[str, list[str]]]:
    """Split a SMART file into (``.I`` value, following lines) records."""
    record_id: str | None = None
    body: list[str] = []
    for lineno, line in enumerate(_lines(_require(path)), start=1):
        if line.startswith(".I"):
            if record_id is not None:
                yield record_id, body
            parts = line.split()
            if len(parts) != 2:
                raise CollectionFormatError(f"{path}:{lineno}: expected '.I <id>', got {line!r}")
            record_id, body = parts[1], []
        elif record_id is None:
            if line.strip():
                raise CollectionFormatError(f"{path}:{lineno}: text before the first .I record")
        else:
            body.append(line)
    if record_id is not None:
        yield record_id, body


def _smart_fields(lines: list[str]) -> dict[str, str]:
    """Group a record's lines by field marker (``.T``, ``.A``, ``.B``, ``.W``).

    Once ``.W`` (the body) has started, every following line up to the next ``.I`` belongs to it:
    three records of cran.all.1400 (240, 576, 578) have stray ``.A``/``.B``/``.W`` marker lines inside
    their abstract, and switching fields there would cut the abstract short. The stray marker lines
    themselves are dropped.
    """
    fields: dict[str, list[str]] = {}
    current: str | None = None
    for line in lines:
        marker = line.strip()
        if len(marker) == 2 and marker[0] == "." and marker[1] in "TABW":
            if current != "W":
                current = marker[1]
            fields.setdefault(current, [])
            continue
        if current is not None and line.strip():
            fields[current].append(line.strip())
    return {key: " ".join(parts) for key, parts in fields.items()}


def load_cranfield(path: Path) -> Collection:
    """Load the Cranfield 1400 collection in its SMART text form.

    * Documents: ``doc_id`` is the ``.I`` number, ``title`` is ``.T`` and ``text`` is ``.W`` (which
      repeats the title, as distributed). Lines are joined with single spaces.
    * Queries: cran.qry numbers its queries ``001, 002, 004, 008, ... 365`` but cranqrel refers to them
      by position, 1..225. ``query_id`` is therefore the 1-based position in cran.qry, as a string, so
      that it matches the qrels; the original ``.I`` label is not used.
    * Judgments: codes are mapped to gains with :data:`CRANFIELD_GAINS`.
    """
    docs = []
    for doc_id, lines in _smart_records(path / "cran.all.1400"):
        fields = _smart_fields(lines)
        docs.append(Doc(doc_id=doc_id, title=fields.get("T", ""), text=fields.get("W", "")))

    queries = [
        Query(query_id=str(position), text=_smart_fields(lines).get("W", ""))
        for position, (_label, lines) in enumerate(_smart_records(path / "cran.qry"), start=1)
    ]

    qrels_path = _require(path / "cranqrel")
    qrels: dict[str, dict[str, int]] = {}
    for lineno, line in enumerate(_lines(qrels_path), start=1):
        cols = line.split()
        if not cols:
            continue
        if len(cols) != 3:
            raise CollectionFormatError(f"{qrels_path}:{lineno}: expected 3 columns, got {len(cols)}")
        query_id, doc_id, code = cols
        try:
            gain = CRANFIELD_GAINS[int(code)]
        except (KeyError, ValueError) as exc:
            raise CollectionFormatError(f"{qrels_path}:{lineno}: unknown relevance code {code!r}") from exc
        qrels.setdefault(query_id, {})[doc_id] = gain

    query_ids = {q.query_id for q in queries}
    unknown = qrels.keys() - query_ids
    if unknown:
        raise CollectionFormatError(
            f"{qrels_path}: judgments for query positions beyond cran.qry, e.g. {sorted(unknown)[0]!r}"
        )
    judged = tuple(q for q in queries if q.query_id in qrels)
    return Collection(name=path.name, docs=tuple(docs), queries=judged, qrels=qrels)


# ------------------------------------------------------------------------------------------ detect


def load_collection(path: Path, split: str = "test") -> Collection:
    """Load the collection at ``path``, telling BEIR, transcripts (BEIR with ``segments.jsonl``)
    and Cranfield apart by the files present.

    ``split`` applies to BEIR only (Cranfield has a single set of judgments).
    """
    if (path / "corpus.jsonl").is_file() and (path / "queries.jsonl").is_file() and (path / "qrels").is_dir():
        collection = load_beir(path, split)
        if (path / "segments.jsonl").is_file():
            from groundkit.quality.transcripts import with_meetings

            return with_meetings(collection)
        if path.name in CONTENT_TYPES:
            return collection.model_copy(update={"content_type": CONTENT_TYPES[path.name]})
        return collection
    if all((path / name).is_file() for name in ("cran.all.1400", "cran.qry", "cranqrel")):
        return load_cranfield(path)
    raise CollectionFormatError(
        f"{path}: not a test collection (expected BEIR corpus.jsonl + queries.jsonl + qrels/, "
        "or Cranfield cran.all.1400 + cran.qry + cranqrel)"
    )
