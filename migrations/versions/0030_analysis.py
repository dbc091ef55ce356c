"""The analysis: code tokens, accents, languages; phrase and exclusion filters in search.

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-05

docs/bm25/analysis.md.

- ``spaces.language``: the language a space names (null: English, the default).
- ``chunks.language``: the language a chunk was analyzed in (null: English); its lexemes other
  than English carry the language as a prefix.
- ``space_languages``: the languages the objects of a space name besides the space's own, so that
  a query is analyzed in each of them.
- ``analysis_state``: the analysis the index was built with (its version, and each language's
  digest on probe words); ``groundkit status`` compares it with the analysis now. A database
  that already holds chunks was analyzed by ``gk-analysis-1`` (``to_tsvector`` alone): it is
  recorded so, and status asks for a rebuild.
- Search's internal functions gain a filter argument (phrases and exclusions, checked with the
  permission predicate): their old signatures are dropped here, once, so that no stale overload
  is left behind (a call with the old arguments would otherwise be ambiguous).
"""

from __future__ import annotations

from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
alter table groundkit.spaces add column language text;
alter table groundkit.chunks add column language text;
create index spaces_language_idx on groundkit.spaces (language) where language is not null;

create table groundkit.space_languages (
    space_id text not null,
    language text not null,
    primary key (space_id, language)
);

create table groundkit.analysis_state (
    one boolean primary key default true check (one),
    version text not null,
    digests jsonb not null default '{}',
    unaccent boolean not null,
    server_version_num integer not null,
    recorded_at timestamptz not null default now()
);
insert into groundkit.analysis_state (version, unaccent, server_version_num)
select 'gk-analysis-1', false, current_setting('server_version_num')::integer
 where exists (select 1 from groundkit.chunks);

drop function if exists groundkit._chunk_tsv(text, text, text);
drop function if exists groundkit._snippet(text, tsquery, text, text);
drop function if exists groundkit._query_tsquery(text);
drop function if exists groundkit._visible_chunk(bigint, integer, text, text[], text[]);
drop function if exists groundkit._search_scan(text[], double precision[], bigint[], double precision,
                                               double precision, double precision, integer, text, text[],
                                               text[], integer);
drop function if exists groundkit._search_rounds(text[], double precision[], bigint[], double precision,
                                                 double precision, double precision, double precision, integer,
                                                 text, text[], text[], integer, integer);
drop function if exists groundkit._top_lb(text[], double precision[], bigint[], integer, integer,
                                          double precision, double precision, double precision, integer, text,
                                          text[], text[], integer);
drop function if exists groundkit._short_lb(text[], double precision[], double precision[], integer, bigint[],
                                            integer, double precision, double precision, double precision,
                                            integer, text, text[], text[], integer, double precision);
drop function if exists groundkit._search_threshold(text, text[], double precision[], double precision[],
                                                    bigint[], double precision, double precision,
                                                    double precision, double precision, double precision,
                                                    integer, text, text[], text[], integer, integer, text);
drop function if exists groundkit._pending_top(text[], double precision[], bigint[], double precision,
                                               double precision, double precision, integer, text, text[],
                                               text[], integer);
"""
    )


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only")
