"""Labelling sampled traffic and scoring search against the labels (docs/telemetry.md).

``export_samples`` writes each sampled search (``groundkit.search_samples``) as one JSON line: the
query and its candidates, each with the text it had at the sampled version, read back from the
content log (nothing of it is copied into the samples, so a redacted object exports ``null``), and
an empty ``relevance`` slot for a labeller to fill with a grade (0 = not relevant).

``score_labels`` searches again, now, once per labelled query, as a reader of the sample's tier
rank, and scores the ranking against the labels per tier rank. The reader is, by default, a
synthetic member of a tier of that rank, with no space grants and owning nothing, created inside a
transaction that is rolled back (nothing is left behind, no sample is recorded): it sees what every
member of that rank sees. ``readers`` names a real member per rank instead (private spaces, owner
notes). The leak check: a labelled candidate that reader may not see now (re-tiered, deleted,
redacted, in a space it has no grant for) is reported and never counts as relevant; a hit search
returns although the check says it is not visible would be a permission bug, and is reported too.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from datetime import timedelta
from pathlib import Path
from typing import Any, TextIO

from pydantic import BaseModel, ConfigDict, ValidationError

from groundkit.client import Groundkit
from groundkit.errors import InvalidArgument

__all__ = ["LabelReport", "NotVisible", "RankScore", "export_samples", "parse_since", "private_file", "score_labels"]

_SINCE = re.compile(r"(\d+)([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
SEARCH_K = 100  # deep enough for recall@100
SYNTHETIC = "groundkit-eval:rank-{rank}"


def parse_since(text: str, flag: str = "--since") -> timedelta:
    """``30d``, ``12h``, ``2w``, ``90m`` or ``45s`` as a duration."""
    found = _SINCE.fullmatch(text.strip())
    if not found:
        raise InvalidArgument(f"{flag} takes a number and a unit (s, m, h, d, w), such as 30d (got {text!r})")
    return timedelta(**{_UNITS[found[2]]: int(found[1])})


@contextmanager
def private_file(path: Path) -> Iterator[TextIO]:
    """``path`` written whole or not at all, readable by its owner alone (0600) from the moment
    it exists: the text goes to a new file that ``mkstemp`` creates 0600 (``O_EXCL``, whatever
    the umask) beside ``path``, which then replaces ``path`` in one rename (a file there before,
    whatever its mode, or a symlink, is replaced, never written through). A labelling file holds
    the text members were shown, owner-only notes and private boards included."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def export_samples(gk: Groundkit, since: timedelta, out: TextIO) -> int:
    """Write the samples taken within ``since`` as labelling JSON lines, oldest first; returns
    how many. Reads the samples and the content log: the schema owner's call."""
    rows = gk._fetch(
        "select s.sample_id, s.sampled_at, s.query, s.mode, s.k, s.tier_rank,"
        "       coalesce(jsonb_agg(jsonb_build_object("
        "           'position', h.position, 'object_id', h.object_id, 'object_version', h.object_version,"
        "           'chunk_seq', h.chunk_seq, 'score', h.score, 'chunker', h.chunker,"
        "           'content', t.content, 'redacted', t.redacted,"
        "           'clicks', (select count(*) from groundkit.sample_engagement e where e.sample_id = s.sample_id"
        "                       and e.object_id = h.object_id and e.kind = 'click'),"
        "           'dwell_ms', (select coalesce(sum(e.value), 0) from groundkit.sample_engagement e"
        "                         where e.sample_id = s.sample_id and e.object_id = h.object_id"
        "                           and e.kind = 'dwell_ms'),"
        "           'relevance', null) order by h.position) filter (where h.sample_id is not null),"
        "         '[]'::jsonb) as candidates"
        "  from groundkit.search_samples s"
        "  left join groundkit.search_sample_hits h on h.sample_id = s.sample_id"
        "  left join lateral groundkit.sample_hit_text(h.object_id, h.object_version, h.chunk_seq,"
        "                                              h.char_start, h.char_end) t on true"
        " where s.sampled_at >= now() - %(since)s"
        " group by s.sample_id order by s.sampled_at, s.sample_id",
        {"since": since},
    )
    for row in rows:
        record = {**row, "sample_id": str(row["sample_id"]), "sampled_at": row["sampled_at"].isoformat()}
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
    return len(rows)


class _Candidate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    object_id: str
    relevance: int | None = None


class _Labelled(BaseModel):
    model_config = ConfigDict(extra="ignore")

    sample_id: str
    query: str
    tier_rank: int | None
    candidates: list[_Candidate]


class NotVisible(BaseModel):
    """A labelled candidate the rank's reader may not see now (never scored as relevant), or,
    with ``returned``, one search returned anyway (a permission bug)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tier_rank: int
    sample_id: str
    object_id: str
    relevance: int | None
    why: str
    returned: bool = False


class RankScore(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    tier_rank: int
    reader: str
    queries: int
    ndcg_10: float
    recall_10: float
    recall_100: float
    mrr_10: float


class LabelReport(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    ranks: list[RankScore]
    not_visible: list[NotVisible]
    skipped: list[str]  # why some lines were not scored

    @property
    def leaks(self) -> list[NotVisible]:
        return [n for n in self.not_visible if n.returned]


def read_labels(path: Path) -> Iterator[_Labelled]:
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield _Labelled.model_validate_json(line)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                raise InvalidArgument(f"{path}:{n}: {where}: {first['msg']}") from None


def _visibility(gk: Groundkit, reader: str, object_ids: list[str]) -> dict[str, str | None]:
    """Why each object is not visible to ``reader`` now (``None``: visible)."""
    rows = gk._fetch(
        "select x.object_id, o.state,"
        "       exists (select 1 from groundkit.chunks c"
        "                 where c.object_id = x.object_id"
        "                   and exists (select 1 from groundkit.fetch_citation(%(reader)s, c.object_id,"
        "                                                                      c.object_version, c.chunk_seq))"
        "       ) as visible"
        "  from unnest(%(ids)s::text[]) x(object_id)"
        "  left join groundkit.objects o on o.object_id = x.object_id",
        {"reader": reader, "ids": object_ids},
    )
    out: dict[str, str | None] = {}
    for r in rows:
        if r["visible"]:
            out[r["object_id"]] = None
        elif r["state"] in ("deleted", "redacted"):
            out[r["object_id"]] = str(r["state"])
        elif r["state"] is None:
            out[r["object_id"]] = "unknown object"
        else:
            out[r["object_id"]] = "not visible to this rank's reader"
    return out


def labelled_by_rank(path: Path) -> tuple[dict[int, list[_Labelled]], list[str]]:
    """The labelled file's samples that can be judged, by the tier rank of their reader; and why
    the others cannot (no active reader when sampled, no candidate labelled)."""
    by_rank: dict[int, list[_Labelled]] = defaultdict(list)
    skipped: list[str] = []
    for item in read_labels(path):
        if item.tier_rank is None:
            skipped.append(f"{item.sample_id}: no active reader when sampled")
        elif not any(c.relevance is not None for c in item.candidates):
            skipped.append(f"{item.sample_id}: no candidate labelled")
        else:
            by_rank[item.tier_rank].append(item)
    return by_rank, skipped


def _reader_for(gk: Groundkit, rank: int, readers: Mapping[int, str]) -> str | None:
    if rank in readers:
        return readers[rank]
    tier = gk._fetch("select name from groundkit.tiers where rank = %(rank)s order by name limit 1", {"rank": rank})
    if not tier:
        return None
    sub = SYNTHETIC.format(rank=rank)
    gk.put_member(sub, str(tier[0]["name"]))
    return sub


def score_labels(gk: Groundkit, path: Path, readers: Mapping[int, str] | None = None) -> LabelReport:
    """Score the current search against the labelled file at ``path``, per tier rank (see the
    module's docstring). Needs the ``eval`` extra (trec_eval's measures)."""
    from groundkit.quality.metrics import per_query

    by_rank, skipped = labelled_by_rank(path)
    ranks: list[RankScore] = []
    hidden: list[NotVisible] = []
    for rank in sorted(by_rank):
        # the synthetic member, the searches and any sample they draw are rolled back
        with gk.conn.transaction(force_rollback=True):
            reader = _reader_for(gk, rank, readers or {})
            if reader is None:
                skipped.extend(f"{s.sample_id}: no tier of rank {rank} now" for s in by_rank[rank])
                continue
            qrels, run = _judge(gk, rank, reader, by_rank[rank], hidden, skipped)
        values = per_query(qrels, run) if qrels else {}
        mean = {key: sum(v[key] for v in values.values()) / len(values) for key in
                ("ndcg@10", "recall@10", "recall@100", "mrr@10")} if values else dict.fromkeys(
                    ("ndcg@10", "recall@10", "recall@100", "mrr@10"), 0.0)
        ranks.append(RankScore(tier_rank=rank, reader=reader if reader in (readers or {}).values() else "synthetic",
                               queries=len(values), ndcg_10=mean["ndcg@10"], recall_10=mean["recall@10"],
                               recall_100=mean["recall@100"], mrr_10=mean["mrr@10"]))
    return LabelReport(ranks=ranks, not_visible=hidden, skipped=skipped)


def _judge(gk: Groundkit, rank: int, reader: str, items: list[_Labelled], hidden: list[NotVisible],
           skipped: list[str]) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, float]]]:
    """The qrels (visible labelled objects only) and the run (object -> best score) of one rank."""
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for item in items:
        labelled: dict[str, int] = {}
        for c in item.candidates:
            if c.relevance is not None:
                labelled[c.object_id] = max(labelled.get(c.object_id, 0), c.relevance)
        hits = gk.search(reader, item.query, k=SEARCH_K)
        why = _visibility(gk, reader, sorted(set(labelled) | {h.object_id for h in hits}))
        for object_id, grade in labelled.items():
            if why[object_id] is not None:
                hidden.append(NotVisible(tier_rank=rank, sample_id=item.sample_id, object_id=object_id,
                                         relevance=grade, why=str(why[object_id])))
        ranking: dict[str, float] = {}
        for h in hits:
            if why[h.object_id] is not None:
                hidden.append(NotVisible(tier_rank=rank, sample_id=item.sample_id, object_id=h.object_id,
                                         relevance=labelled.get(h.object_id), why=str(why[h.object_id]),
                                         returned=True))
            ranking.setdefault(h.object_id, h.score)
        visible = {o: g for o, g in labelled.items() if why[o] is None}
        if not any(g > 0 for g in visible.values()):
            skipped.append(f"{item.sample_id}: no relevant candidate visible to rank {rank} now")
            continue
        qrels[item.sample_id] = visible
        run[item.sample_id] = ranking
    return qrels, run


def as_json(report: LabelReport) -> Iterator[dict[str, Any]]:
    for r in report.ranks:
        yield {"kind": "rank", **r.model_dump()}
    for n in report.not_visible:
        yield {"kind": "not_visible", **n.model_dump()}
