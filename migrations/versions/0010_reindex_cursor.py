"""Where a recompute of the impacts in steps has got to (docs/bm25.md, "Recomputing the impacts
in steps").

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02

Revision 0009 let the recompute run in steps, each its own transaction, with the caller passing
each step the key the last one reached, and ``_reindex_end()`` trusting the caller that no range
was skipped: a caller that skipped one (or ended early) left postings at the older reference while
search, told none was, bounded them too tightly. The position now lives here, written by the
steps themselves, and the end is refused until a step has found nothing left after it. An
interrupted recompute also resumes from it instead of starting over.

- ``reindex_term``, ``reindex_chunk``: the last postings key the steps have brought to
  ``avgdl_ref`` (both NULL: none yet);
- ``reindex_done``: a step found no posting after it.

Set only while a recompute is under way or unfinished (``avgdl_ref_min`` not NULL).

Also ``avgdl_ref`` must be finite: the old check (``> 0``) let NaN through, which Postgres sorts
above every number, and ``reindex_impacts('NaN')`` stored it (and ``'infinity'`` too). A
database holding one gets its impacts recomputed here at 64 tokens, a new database's reference
(``analyze`` moves it to the chunks' length later), so that the new check can hold.
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # (the impact formula as groundkit._impact has it, spelled out: a revision does not call the
    # replaceable SQL, which is applied after it)
    op.execute(
        """
do $repair$
begin
    if exists (select 1 from groundkit.bm25_impact i where not (i.avgdl_ref < 'infinity'::double precision)) then
        update groundkit.bm25_impact set avgdl_ref = 64, avgdl_ref_min = null;
        update groundkit.postings p
           set imp = (p.tf / (p.tf + i.k1 * (1 - i.b + i.b * p.doc_len / i.avgdl_ref)))::real
          from groundkit.bm25_impact i;
    end if;
end
$repair$;
"""
    )
    op.execute(
        """
alter table groundkit.bm25_impact
    add column reindex_term text,
    add column reindex_chunk bigint,
    add column reindex_done boolean not null default false,
    add constraint bm25_impact_reindex_cursor check (
        (reindex_term is null) = (reindex_chunk is null)
        and (avgdl_ref_min is not null or (reindex_term is null and not reindex_done))),
    add constraint bm25_impact_avgdl_ref_finite check (avgdl_ref < 'infinity'::double precision);
"""
    )


def downgrade() -> None:
    raise NotImplementedError("groundkit revisions are forward-only; restore from a backup instead")
