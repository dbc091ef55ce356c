"""Planted bugs: deliberately broken search variants the gate must catch.

A gate that never fails proves nothing. Each variant below is installed, in the gate's own
throwaway database only, as a function in schema ``gk_planted``; the golden set is then run
against it and must report failures. The variants read only the stable tables (chunks,
objects, spaces, tiers, grants, reader_authority) and rank with ``ts_rank``: ranking quality
is beside the point, the broken predicate is the point.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from groundkit.gate.golden import Hit, Searcher

SCHEMA = "gk_planted"

_QUERY = """
    select (select string_agg(quote_literal(u.lexeme), ' | ')
              from unnest(to_tsvector('groundkit.english'::regconfig, p_query)) u)::tsquery as q
"""

_CANDIDATES = """
    select c.object_id, c.object_version, o.title, c.content, c.chunk_seq, o.owner_only, o.owner_sub,
           o.content_type, o.space_id, s.private, ot.rank as obj_rank, st.rank as space_rank,
           ts_rank(c.tsv, q.q) as score
      from groundkit.chunks c
      join groundkit.objects o on o.object_id = c.object_id and o.version = c.object_version
                              and o.state = 'live'
      join groundkit.tiers ot on ot.name = o.tier_visibility
      join groundkit.spaces s on s.space_id = o.space_id
      join groundkit.tiers st on st.name = s.min_tier
      cross join q
     where c.tsv @@ q.q
       and (p_content_types is null or o.content_type = any (p_content_types))
       and (p_space_ids is null or o.space_id = any (p_space_ids))
"""

_PRIVATE_OK = """(not x.private or exists (select 1 from groundkit.space_grants g
                                        where g.space_id = x.space_id and g.member_sub = r.member_sub))"""

VARIANTS: dict[str, dict[str, str]] = {
    "ignores_pending": {
        "what": "treats a 'pending' member (tier change in flight) as active",
        "status": "a.status in ('active', 'pending')",
        "owner": "(not x.owner_only or x.owner_sub = r.member_sub)",
        "prelimit": "",
    },
    "filters_after_topk": {
        "what": "ranks every chunk, keeps the top k, then applies the permission filter",
        "status": "a.status = 'active'",
        "owner": "(not x.owner_only or x.owner_sub = r.member_sub)",
        "prelimit": "order by score desc, object_id, chunk_seq limit p_k",
    },
    "ignores_owner_only": {
        "what": "forgets that owner-only notes reach their owner alone",
        "status": "a.status = 'active'",
        "owner": "true",
        "prelimit": "",
    },
}


_BODY = """
    with q as ({query}),
    reader as (
        select a.member_sub, t.rank from groundkit.reader_authority a
          join groundkit.tiers t on t.name = a.tier
         where a.member_sub = p_reader_sub and {status}
    ),
    cand as ({candidates} {prelimit})
    select x.object_id, x.object_version, x.title, x.content
      from cand x cross join reader r
     where r.rank >= x.obj_rank and r.rank >= x.space_rank and {private_ok} and {owner}
     order by x.score desc, x.object_id, x.chunk_seq
     limit p_k
"""


def _function(name: str, v: dict[str, str]) -> sql.Composed:
    body = sql.SQL(_BODY).format(
        query=sql.SQL(_QUERY), candidates=sql.SQL(_CANDIDATES), private_ok=sql.SQL(_PRIVATE_OK),
        status=sql.SQL(v["status"]), prelimit=sql.SQL(v["prelimit"]), owner=sql.SQL(v["owner"]))
    return sql.SQL(
        "create or replace function {}.{}(p_reader_sub text, p_query text, p_k integer,"
        " p_content_types text[], p_space_ids text[])"
        " returns table (object_id text, object_version bigint, title text, content text)"
        " language sql stable set search_path = pg_catalog, pg_temp as $planted$ {} $planted$"
    ).format(sql.Identifier(SCHEMA), sql.Identifier(name), body)


def install(conn: psycopg.Connection[Any]) -> None:
    """Create the planted variants in ``conn``'s database (the gate's throwaway one)."""
    conn.execute(sql.SQL("create schema if not exists {}").format(sql.Identifier(SCHEMA)))
    for name, v in VARIANTS.items():
        conn.execute(_function(name, v))


def planted_searcher(conn: psycopg.Connection[Any], name: str) -> Searcher:
    if name not in VARIANTS:
        raise ValueError(f"unknown planted variant {name!r}")
    stmt = sql.SQL("select object_id, object_version, title, content from {}.{}(%s, %s, %s, %s, %s)").format(
        sql.Identifier(SCHEMA), sql.Identifier(name))

    def search(reader_sub: str, query: str, k: int = 10, content_types: Sequence[str] | None = None,
               space_ids: Sequence[str] | None = None) -> list[Hit]:
        rows = conn.execute(stmt, (reader_sub, query, k,
                                    None if content_types is None else list(content_types),
                                    None if space_ids is None else list(space_ids))).fetchall()
        return [Hit(r["object_id"], int(r["object_version"]), r["title"], r["content"]) for r in rows]

    return search
