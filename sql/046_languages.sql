-- A space's language (docs/bm25/analysis.md, "Languages"). Replaceable.

-- Name the language a space's objects are analyzed in (null or 'english': English, the
-- default), and analyze again, in this transaction, every live object of the space whose
-- language changes with it (an object naming its own in metadata.language keeps it). Returns how
-- many objects were analyzed again. GK003 for an unknown space, GK026 for an unknown language.
-- Locks the space row as put_space does (writers into the space wait), then the objects in key
-- order, as every writer locks them.
create or replace function groundkit.set_space_language(space_id text, language text)
returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
    new_language text := groundkit._check_language(set_space_language.language);
    old_language text;
    ids text[];
    n bigint := 0;
    i integer;
begin
    select s.language into old_language
      from groundkit.spaces s where s.space_id = set_space_language.space_id for update;
    if not found then
        raise exception 'unknown space %', coalesce(quote_literal(set_space_language.space_id), 'NULL')
            using errcode = 'GK003';
    end if;
    update groundkit.spaces s set language = new_language, updated_at = now()
     where s.space_id = set_space_language.space_id;
    -- the space's languages are recorded again as its objects are analyzed (_materialize_many)
    delete from groundkit.space_languages l where l.space_id = set_space_language.space_id;
    insert into groundkit.space_languages (space_id, language)
    select distinct c.space_id, coalesce(c.language, 'english')
      from (select o.space_id, groundkit._object_language(o.metadata, new_language) as language
              from groundkit.objects o
             where o.space_id = set_space_language.space_id and o.state = 'live') c
     where c.language is distinct from new_language
    on conflict do nothing;
    if old_language is not distinct from new_language then
        return 0;
    end if;
    ids := array(select o.object_id from groundkit.objects o
                  where o.space_id = set_space_language.space_id and o.state = 'live'
                    and groundkit._object_language(o.metadata, old_language)
                        is distinct from groundkit._object_language(o.metadata, new_language)
                  order by o.object_id);
    perform groundkit._lock_objects(ids);
    i := 1;
    while i <= cardinality(ids) loop
        perform groundkit._materialize_many(ids[i:i + 999]);
        n := n + least(1000, cardinality(ids) - i + 1);
        i := i + 1000;
    end loop;
    return n;
end
$$;
