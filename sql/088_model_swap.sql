-- Model swaps (docs/embedding-worker.md): the models being built beside the active one
-- (embedding_models.reindexing_at, revision 0023), and the cutover that moves that mark.

-- Mark a model being built (building => false: no longer). The worker and `groundkit embed` keep
-- the active model and every model so marked embedded; search serves only the active one.
create or replace function groundkit.start_reindex(model text, building boolean default true)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
    update groundkit.embedding_models m
       set reindexing_at = case when start_reindex.building then coalesce(m.reindexing_at, now()) end
     where m.name = start_reindex.model;
    if not found then
        raise exception 'no embedding model %', quote_nullable(start_reindex.model) using errcode = 'GK015';
    end if;
end
$$;

-- groundkit.cutover (one transaction, refused while the model's lag is not zero unless forced),
-- then: the model made active is no longer being built, and the one it replaces is, so that a
-- rollback (a cutover back to it) finds its embeddings current. Returns the model replaced.
create or replace function groundkit.cutover_model(model text, force boolean default false)
returns text
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    previous text;
begin
    select m.name into previous from groundkit.embedding_models m where m.active;
    perform groundkit.cutover(model => cutover_model.model, force => cutover_model.force);
    update groundkit.embedding_models m
       set reindexing_at = case when m.name = cutover_model.model then null
                                else coalesce(m.reindexing_at, now()) end
     where m.name = cutover_model.model or m.name = previous;
    return previous;
end
$$;
