"""Structural checks of the derived state against the log, shared by the fault and concurrency
sections: is every object whole at one version, is the derived state a function of the log?"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

# The rows state_checksum() digests, readable, for a diagnostic when two checksums differ.
_LINES = """
select concat_ws('|', 'o', o.object_id, o.version, o.state, o.tier_visibility, o.space_id, o.owner_only,
                 o.content_hash, o.log_seq) as line from groundkit.objects o
union all
select concat_ws('|', 'c', c.object_id, c.chunk_seq, c.object_version, md5(c.content), c.doc_len,
                 coalesce(c.stat_scope::text, '-'), c.chunker_version, coalesce(c.char_start::text, '-'),
                 coalesce(c.char_end::text, '-')) from groundkit.chunks c
union all
select concat_ws('|', 't', t.term, t.scope, sum(t.df))
  from (select t.term, t.scope, t.df from groundkit.term_stats t
        union all
        select p.term, p.stat_scope, 1 from groundkit.pending_postings p where p.stat_scope is not null) t
 group by t.term, t.scope having sum(t.df) <> 0
union all
select concat_ws('|', 's', s.scope, sum(s.n_chunks), sum(s.total_len)) from groundkit.scope_stats s
 group by s.scope having sum(s.n_chunks) <> 0 or sum(s.total_len) <> 0
"""

# Each query returns rows describing a violation; none may return a row.
STRUCTURE: dict[str, str] = {
    "a chunk at a version other than its object's current one": """
        select c.object_id, c.object_version, o.version from groundkit.chunks c
          left join groundkit.objects o on o.object_id = c.object_id
         where o.object_id is null or o.version <> c.object_version or o.state <> 'live'""",
    "a posting without its chunk": """
        select p.term, p.chunk_id from groundkit.postings p
         where not exists (select 1 from groundkit.chunks c where c.chunk_id = p.chunk_id)
        union all
        select p.term, p.chunk_id from groundkit.pending_postings p
         where not exists (select 1 from groundkit.chunks c where c.chunk_id = p.chunk_id)""",
    "a posting both merged and pending": """
        select p.term, p.chunk_id from groundkit.pending_postings p
         where exists (select 1 from groundkit.postings q where q.term = p.term and q.chunk_id = p.chunk_id)""",
    "a live object without chunks": """
        select o.object_id from groundkit.objects o
         where o.state = 'live' and not exists (select 1 from groundkit.chunks c where c.object_id = o.object_id)""",
    "a chunk without postings although it has terms": """
        select c.chunk_id from groundkit.chunks c where length(c.tsv) > 0
           and not exists (select 1 from groundkit.postings p where p.chunk_id = c.chunk_id)
           and not exists (select 1 from groundkit.pending_postings p where p.chunk_id = c.chunk_id)""",
    "a log row without its views (objects row missing or behind the log)": """
        select l.object_id, max(l.seq) as last_seq, o.log_seq from groundkit.content_log l
          left join groundkit.objects o on o.object_id = l.object_id
         group by l.object_id, o.log_seq having o.log_seq is distinct from max(l.seq)""",
    "an object row without a log row": """
        select o.object_id from groundkit.objects o
         where not exists (select 1 from groundkit.content_log l
                            where l.object_id = o.object_id and l.seq = o.log_seq)""",
    "a chunk sequence with gaps": """
        select c.object_id from groundkit.chunks c group by c.object_id
        having max(c.chunk_seq) + 1 <> count(*) or min(c.chunk_seq) <> 0""",
}


def derived_lines(conn: psycopg.Connection[Any]) -> list[str]:
    try:
        return [str(next(iter(r.values())) if isinstance(r, dict) else r[0])
                for r in conn.execute(_LINES).fetchall()]
    except psycopg.Error as exc:  # the tables may change shape (BM25 rewrite): diagnostics only
        return [f"(could not list derived rows: {exc})"]


def diff_lines(before: Sequence[str], after: Sequence[str], limit: int = 20) -> list[str]:
    b, a = set(before), set(after)
    out = [f"before rebuild only: {x}" for x in sorted(b - a)[:limit]]
    out += [f"after rebuild only:  {x}" for x in sorted(a - b)[:limit]]
    return out


def structure_problems(conn: psycopg.Connection[Any]) -> list[str]:
    problems = []
    for what, query in STRUCTURE.items():
        rows = conn.execute(query).fetchall()
        if rows:
            problems.append(f"{what}: {[tuple(r.values()) if isinstance(r, dict) else tuple(r) for r in rows[:5]]}")
    return problems
