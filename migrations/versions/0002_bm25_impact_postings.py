"""BM25 impact-ordered postings: exact top-k without reading every posting (docs/bm25.md).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

Each posting carries what the pruned search needs to read it from an index alone:

- ``doc_len``: the chunk's length (copied; a chunk's length never changes);
- ``vis_key``: the visibility bucket of the chunk. Shared content: the tier rank a reader needs
  (= ``chunks.stat_scope``). Content in a private space: a hash of the space id. Owner-only
  content: a hash of the owner. A reader reads only its own buckets; the live permission
  predicate is still evaluated on every chunk that can reach the answer.
- ``imp``: the BM25 tf-part of the posting, ``tf / (tf + k1 (1 - b + b dl / avgdl_ref))``, with
  the parameters in ``groundkit.bm25_impact``. The covering index ``postings_impact_idx`` orders
  each (term, bucket) list by it, best first.

The foreign key from postings to chunks (and the index on ``chunk_id`` it needed for cascading
deletes) is dropped: ``groundkit._materialize_many`` deletes postings through the primary key
(the chunk's lexemes are in its tsvector), in the same statement sequence as the chunk, and
``state_checksum()`` counts orphan postings, so a stray row cannot go unnoticed.
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
-- The parameters the stored impacts were computed with. Search uses the pruned path only while
-- they equal groundkit.config's k1 and b (otherwise it scores exhaustively, still exactly);
-- groundkit.reindex_impacts() recomputes them.
create table groundkit.bm25_impact (
    id boolean primary key default true check (id),
    k1 double precision not null,
    b double precision not null,
    avgdl_ref double precision not null check (avgdl_ref > 0)
);
insert into groundkit.bm25_impact (k1, b, avgdl_ref)
select c.bm25_k1, c.bm25_b, 64 from groundkit.config c;

alter table groundkit.postings
    drop constraint postings_chunk_id_fkey,
    add column doc_len integer,
    add column vis_key bigint,
    add column imp real;
drop index groundkit.postings_chunk_idx;

update groundkit.postings p
   set doc_len = c.doc_len,
       vis_key = case when o.owner_only then hashtextextended('o:' || o.owner_sub, 0)
                      when s.private then hashtextextended('s:' || o.space_id, 0)
                      else greatest(ot.rank, st.rank) end,
       imp = (p.tf / (p.tf + i.k1 * (1 - i.b + i.b * c.doc_len / i.avgdl_ref)))::real
  from groundkit.chunks c
  join groundkit.objects o on o.object_id = c.object_id
  join groundkit.spaces s on s.space_id = o.space_id
  join groundkit.tiers st on st.name = s.min_tier
  join groundkit.tiers ot on ot.name = o.tier_visibility,
       groundkit.bm25_impact i
 where c.chunk_id = p.chunk_id;
delete from groundkit.postings p where p.vis_key is null;

alter table groundkit.postings
    alter column doc_len set not null,
    alter column vis_key set not null,
    alter column imp set not null;

create index postings_impact_idx on groundkit.postings (term, vis_key, imp desc)
    include (chunk_id, tf, doc_len);
-- Random access (a candidate's tf for a term) reads the primary key alone.
alter table groundkit.postings
    drop constraint postings_pkey,
    add constraint postings_pkey primary key (term, chunk_id) include (tf);
"""
    )


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only; restore from a backup instead")
