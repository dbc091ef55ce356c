"""Dense search by visibility bucket: the dense index holds one entry per current chunk, in the
chunk's bucket, so that a reader's scan walks only entries of buckets it may see (issue 50;
docs/dense.md, "Buckets").

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-05

- ``dense_entries``: one row per (current chunk, model) whose text the model has embedded: the
  chunk's visibility bucket (``vis_key``, as its postings': the scope rank of shared content, a
  hash naming a private space or a note's owner), its content hash and a copy of the vector.
  Each model's HNSW indexes are partial indexes of this table, one per bucket
  (``... where model = '<model>' and vis_key = <bucket>``), built concurrently by the worker
  (``groundkit.dense.build_hnsw_indexes``). Writes, the worker's store and ``put_space`` keep it
  in step with the chunks (sql/040_materialize.sql, sql/086_dense.sql, sql/030_authority.sql).
  ``pending``: an entry a writer filed or moved, which the indexes leave out (their predicate
  says ``not pending``) until the worker merges it, so that no write pays for HNSW inserts;
  searches read a bucket's pending entries whole meanwhile.
- ``dense_recheck``: texts the worker stored while a writer may have written a chunk of the
  same text that neither could see; each is filed again once every transaction running at the
  time (``fence``) has finished.
- The per-model HNSW index of ``embeddings`` (revision 0022's design) is dropped: it held every
  chunk's vector whoever may see it, and a scan's time told a reader about hidden neighbours.
  Existing chunks are filed here; the worker builds the buckets' indexes once due (searches scan
  each bucket exactly meanwhile).
"""

from __future__ import annotations

from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
create table groundkit.dense_entries (
    chunk_id bigint not null,
    model text not null references groundkit.embedding_models (name) on delete cascade,
    vis_key bigint not null,
    content_hash bytea not null,
    embedding real[] not null,
    pending boolean not null default false,
    primary key (chunk_id, model)
);
alter table groundkit.dense_entries alter column embedding set storage main;
-- a bucket's entries (the exact scan of a bucket without an index; the indexes' sizes)
create index dense_entries_bucket_idx on groundkit.dense_entries (model, vis_key);
-- the entries writers filed or moved, not yet in their bucket's HNSW index
create index dense_entries_pending_idx on groundkit.dense_entries (model, vis_key) where pending;
-- a text's entries (filing and checking again by hash)
create index dense_entries_hash_idx on groundkit.dense_entries (model, content_hash);

create table groundkit.dense_recheck (
    model text not null references groundkit.embedding_models (name) on delete cascade,
    content_hash bytea not null,
    fence xid8,
    primary key (model, content_hash)
);

-- the current chunks' entries (the bucket as groundkit._vis_key computes it, written out: a
-- revision does not call replaceable functions)
insert into groundkit.dense_entries (chunk_id, model, vis_key, content_hash, embedding)
select c.chunk_id, m.name,
       case when o.owner_only then hashtextextended('o:' || o.owner_sub, 0)
            when c.stat_scope is null then hashtextextended('s:' || o.space_id, 0)
            else c.stat_scope::bigint end,
       e.content_hash, e.embedding
  from groundkit.chunks c
  join groundkit.objects o on o.object_id = c.object_id
 cross join groundkit.embedding_models m
  join groundkit.embeddings e
    on e.model = m.name
   and e.content_hash = case m.recipe when 'text' then c.embed_hash_text else c.embed_hash_titled end;

do $drop$
declare
    idx text;
begin
    for idx in select i.relname from pg_catalog.pg_index x
                 join pg_catalog.pg_class i on i.oid = x.indexrelid
                where x.indrelid = 'groundkit.embeddings'::regclass and i.relname like 'embeddings\\_hnsw\\_%'
    loop
        execute format('drop index groundkit.%I', idx);
    end loop;
end
$drop$;
"""
    )


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only; restore from a backup instead")
