"""Least privilege, as Postgres sees it.

Two halves, in the style of pgai's privilege tests:

- the catalog: every privilege PUBLIC, ``groundkit_reader`` and ``groundkit_writer`` hold on
  the schema and anything in it, who owns what, and which functions are SECURITY DEFINER, as
  a grid compared with ``groundkit/gate/data/privileges.txt``, which also lists the functions
  that do not pin ``search_path`` (the inlined SQL helpers, and nothing else);
- the behaviour: non-superuser login roles that are members of those roles connect and try
  both doors. Direct table access is denied; the functions work.

Login roles are cluster-wide: they get a random name and are dropped at the end.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

from groundkit.client import Groundkit
from groundkit.gate.tap import Counts, Tap
from groundkit.gate.throwaway import GateDatabases, connect_dict

# Every table and view of the schema, read from the catalog when the check runs, so that a new
# table cannot be left out of it.
RELATIONS_SQL = """
select c.relname from pg_catalog.pg_class c join pg_catalog.pg_namespace n on n.oid = c.relnamespace
 where n.nspname = 'groundkit' and c.relkind in ('r', 'p', 'v', 'm') order by 1
"""

GRID_SQL = """
with acl as (
    select 'schema' as kind, n.nspname::text as object, a.grantee, a.privilege_type
      from pg_catalog.pg_namespace n, aclexplode(n.nspacl) a where n.nspname = 'groundkit'
    union all
    select case c.relkind when 'v' then 'view' when 'S' then 'sequence' else 'table' end,
           'groundkit.' || c.relname, a.grantee, a.privilege_type
      from pg_catalog.pg_class c join pg_catalog.pg_namespace n on n.oid = c.relnamespace,
           aclexplode(coalesce(c.relacl,
                               acldefault((case when c.relkind = 'S' then 's' else 'r' end)::"char", c.relowner))) a
     where n.nspname = 'groundkit' and c.relkind in ('r', 'p', 'v', 'm', 'S')
    union all
    select 'function', p.oid::regprocedure::text, a.grantee, a.privilege_type
      from pg_catalog.pg_proc p join pg_catalog.pg_namespace n on n.oid = p.pronamespace,
           aclexplode(coalesce(p.proacl, acldefault('f'::"char", p.proowner))) a
     where n.nspname = 'groundkit'
)
select concat_ws('  ', case when acl.grantee = 0 then 'PUBLIC' else pg_catalog.pg_get_userbyid(acl.grantee) end,
                 acl.kind, acl.object, acl.privilege_type) as line
  from acl
 where acl.grantee = 0
    or pg_catalog.pg_get_userbyid(acl.grantee) in ('groundkit_reader', 'groundkit_writer', 'groundkit_auditor')
union all
select concat_ws('  ', 'security definer', p.oid::regprocedure::text,
                 'owner=' || pg_catalog.pg_get_userbyid(p.proowner),
                 array_to_string(p.proconfig, ','))
  from pg_catalog.pg_proc p join pg_catalog.pg_namespace n on n.oid = p.pronamespace
 where n.nspname = 'groundkit' and p.prosecdef
union all
select concat_ws('  ', 'search_path not pinned', p.oid::regprocedure::text, 'language=' || l.lanname)
  from pg_catalog.pg_proc p join pg_catalog.pg_namespace n on n.oid = p.pronamespace
  join pg_catalog.pg_language l on l.oid = p.prolang
 where n.nspname = 'groundkit'
   and not coalesce('search_path=pg_catalog, pg_temp' = any (p.proconfig), false)
union all
select concat_ws('  ', 'owner', 'schema groundkit', pg_catalog.pg_get_userbyid(n.nspowner))
  from pg_catalog.pg_namespace n where n.nspname = 'groundkit'
union all
select concat_ws('  ', 'not owned by groundkit_owner', c.relname)
  from pg_catalog.pg_class c join pg_catalog.pg_namespace n on n.oid = c.relnamespace
 where n.nspname = 'groundkit' and c.relkind in ('r', 'p', 'v', 'm', 'S')
   and pg_catalog.pg_get_userbyid(c.relowner) <> 'groundkit_owner'
union all
select concat_ws('  ', 'not owned by groundkit_owner', p.oid::regprocedure::text)
  from pg_catalog.pg_proc p join pg_catalog.pg_namespace n on n.oid = p.pronamespace
 where n.nspname = 'groundkit' and pg_catalog.pg_get_userbyid(p.proowner) <> 'groundkit_owner'
order by 1
"""


def privilege_grid(conn: psycopg.Connection[Any]) -> list[str]:
    return [str(r["line"] if isinstance(r, dict) else r[0]) for r in conn.execute(GRID_SQL).fetchall()]


def expected_grid() -> list[str]:
    text = resources.files("groundkit.gate").joinpath("data/privileges.txt").read_text(encoding="utf-8")
    return sorted(line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#"))


@dataclass(frozen=True)
class Logins:
    reader: str
    writer: str
    nobody: str
    auditor: str


@contextmanager
def login_roles(admin_dsn: str, db_dsn: str) -> Iterator[Logins]:
    """Non-superuser login roles (members of groundkit_reader / groundkit_writer / nothing /
    groundkit_auditor),
    dropped afterwards. Yields DSNs for ``db_dsn``'s database."""
    token = secrets.token_hex(4)
    password = secrets.token_urlsafe(18)
    names = {kind: f"gk_gate_{token}_{kind}" for kind in ("reader", "writer", "nobody", "auditor")}
    member_of = {"reader": "groundkit_reader", "writer": "groundkit_writer", "nobody": None,
                 "auditor": "groundkit_auditor"}
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        try:
            for kind, name in names.items():
                conn.execute(sql.SQL("create role {} login password {} nosuperuser nocreatedb nocreaterole").format(
                    sql.Identifier(name), sql.Literal(password)))
                if member_of[kind]:
                    conn.execute(sql.SQL("grant {} to {}").format(sql.Identifier(str(member_of[kind])),
                                                                  sql.Identifier(name)))
            yield Logins(**{k: make_conninfo(db_dsn, user=n, password=password) for k, n in names.items()})
        finally:
            for name in names.values():
                with contextlib.suppress(psycopg.Error):
                    conn.execute(sql.SQL("drop role if exists {}").format(sql.Identifier(name)))


def _attempt(dsn: str, statement: str | sql.Composable, params: tuple[Any, ...] = ()) -> str:
    """'ok' or the SQLSTATE the statement failed with (each attempt on its own connection)."""
    try:
        with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
            conn.execute(statement, params)  # type: ignore[arg-type]
            return "ok"
    except psycopg.Error as exc:
        return exc.sqlstate or type(exc).__name__


def _select_all(table: str) -> sql.Composed:
    return sql.SQL("select * from {}.{} limit 1").format(sql.Identifier("groundkit"), sql.Identifier(table))


SEARCH = ("select object_id from groundkit.search(reader_sub => %s, query => %s, k => 10)", ("alice", "kiln"))
WRITES: dict[str, tuple[str, tuple[Any, ...]]] = {
    "put_member": ("select groundkit.put_member(member_sub => %s, tier => 'T1')", ("zed",)),
    "put_space": ("select groundkit.put_space(space_id => %s)", ("new-space",)),
    "grant_space": ("select groundkit.grant_space(space_id => 'board', member_sub => %s)", ("zed",)),
    "revoke_space": ("select groundkit.revoke_space(space_id => 'board', member_sub => %s)", ("zed",)),
    "put_object": ("select groundkit.put_object(object_id => %s, version => 1, content_type => 'board_post',"
                   " space_id => 'board', tier_visibility => 'T0', title => 'x', body => 'kiln notes')", ("w1",)),
    "retier_object": ("select groundkit.retier_object(object_id => %s, version => 2, tier_visibility => 'T1')",
                      ("w1",)),
    "delete_object": ("select groundkit.delete_object(object_id => %s, version => 3)", ("w1",)),
    "redact_object": ("select groundkit.redact_object(object_id => %s, version => 4)", ("w1",)),
    "record_call": ("select groundkit.record_call(p_flow => %s, p_model => 'm-1', p_kind => 'llm',"
                    " p_tokens_in => 10, p_tokens_out => 2)", ("tutor",)),
}
ADMIN_ONLY: dict[str, tuple[str, tuple[Any, ...]]] = {
    "rebuild": ("select groundkit.rebuild()", ()),
    "analyze_postings": ("select groundkit.analyze_postings()", ()),
    "merge_pending": ("select groundkit.merge_pending()", ()),
    "postings_growth": ("select groundkit.postings_growth()", ()),
    "impact_drift": ("select groundkit.impact_drift()", ()),
    "index_status": ("select * from groundkit.index_status()", ()),
    "reindex_impacts": ("select groundkit.reindex_impacts()", ()),
    "_reindex_begin": ("select groundkit._reindex_begin()", ()),
    "_reindex_step": ("select * from groundkit._reindex_step()", ()),
    "_reindex_end": ("select groundkit._reindex_end()", ()),
    "state_checksum": ("select groundkit.state_checksum()", ()),
    "_materialize_many": ("select groundkit._materialize_many(%s)", (["p1"],)),
    "set_tier_rank": ("select groundkit.set_tier_rank(%s, %s)", ("T3", 7)),
    "_restat_space": ("select groundkit._restat_space(%s)", ("board",)),
    "log UPDATE": ("update groundkit.content_log set body = 'x'", ()),
    "cost_summary": ("select * from groundkit.cost_summary()", ()),
    "add_flow": ("select groundkit.add_flow(%s)", ("gate",)),
    # an operator token opens the console: the owner's alone to make (sql/081_console.sql)
    "create_console_token": ("select groundkit.create_console_token(%s, sha256('x'::bytea))", ("op",)),
    "revoke_console_tokens": ("select groundkit.revoke_console_tokens(%s)", ("op",)),
    # the oracle a reader must never have: whether an object exists, its policy, its terms
    "explain_visibility": ("select * from groundkit.explain_visibility(%s, %s)", ("alice", "p2")),
    "explain_match": ("select * from groundkit.explain_match(%s, %s)", ("p2", "kiln")),
}
# The auditor's: why a member can or cannot see an object (sql/078_explain.sql).
AUDITOR_EXPLAIN = {name: ADMIN_ONLY[name] for name in ("explain_visibility", "explain_match")}


def _world(dsn: str) -> None:
    with connect_dict(dsn) as conn:
        conn.execute("select groundkit.put_member('alice', 'T1')")
        conn.execute("select groundkit.put_space('board', 'T0')")
        conn.execute("select groundkit.put_object(object_id => 'p1', version => 1, content_type => 'board_post',"
                     " space_id => 'board', tier_visibility => 'T1', title => 'Kiln', body => 'kiln schedule')")
        conn.execute("select groundkit.put_object(object_id => 'p2', version => 1, content_type => 'board_post',"
                     " space_id => 'board', tier_visibility => 'T3', title => 'Kiln', body => 'kiln secrets')")


def run_section(dbs: GateDatabases, tap: Tap, opts: Any) -> None:
    dsn = dbs.clone()
    try:
        _run(dbs.admin_dsn, dsn, tap)
    finally:
        dbs.drop(dsn)


def _grid_check(dsn: str, tap: Tap) -> None:
    with connect_dict(dsn) as conn:
        got = privilege_grid(conn)
    want = expected_grid()
    extra = [f"+ {line}" for line in got if line not in want]
    missing = [f"- {line}" for line in want if line not in got]
    tap.check(not extra and not missing, f"privilege grid matches privileges.txt ({len(want)} lines: grants to "
              "PUBLIC/reader/writer, owners, SECURITY DEFINER functions)", extra + missing,
              counts=Counts(privileges=len(extra) + len(missing)))


def _run(admin_dsn: str, dsn: str, tap: Tap) -> None:
    _grid_check(dsn, tap)
    _world(dsn)
    with login_roles(admin_dsn, dsn) as who:
        def expect(description: str, dsn_: str, cases: dict[str, tuple[Any, tuple[Any, ...]]],
                   want: Callable[[str], bool], wording: str) -> None:
            results = {name: _attempt(dsn_, stmt, params) for name, (stmt, params) in cases.items()}
            bad = [f"{name}: {r} ({wording})" for name, r in results.items() if not want(r)]
            tap.check(not bad, description, bad, counts=Counts(privileges=len(bad)))

        denied = ("42501".__eq__)
        with psycopg.connect(dsn, autocommit=True) as conn:
            relations = [str(r[0]) for r in conn.execute(RELATIONS_SQL).fetchall()]
        tables = {t: (_select_all(t), ()) for t in relations}
        expect(f"reader login: SELECT on every groundkit table and view is denied ({len(tables)} relations)",
               who.reader, tables, denied, "want 42501 permission denied")
        expect("reader login: write, membership and admin functions are denied", who.reader,
               {**WRITES, **ADMIN_ONLY}, denied, "want 42501")
        rows = []
        try:
            with psycopg.connect(who.reader, autocommit=True) as conn:
                rows = [r[0] for r in conn.execute(SEARCH[0], SEARCH[1]).fetchall()]
        except psycopg.Error as exc:
            rows = [f"error {exc.sqlstate}: {exc}"]
        tap.check(rows == ["p1"], "reader login: groundkit.search works and applies the predicate (SECURITY DEFINER)",
                  [f"got {rows}, want ['p1']"], counts=Counts(privileges=int(rows != ["p1"])))
        expect(f"writer login: SELECT on every groundkit table and view is denied ({len(tables)} relations)",
               who.writer, tables, denied, "want 42501 permission denied")
        expect("writer login: every write and membership function works", who.writer, WRITES, "ok".__eq__, "want ok")
        expect("writer login: search and admin functions are denied", who.writer,
               {"search": SEARCH, **ADMIN_ONLY}, denied, "want 42501")
        expect("login without a groundkit role: search and writes are denied", who.nobody,
               {"search": SEARCH, "put_object": WRITES["put_object"], "chunks": tables["chunks"]}, denied,
               "want 42501")
        expect("login without a groundkit role: explain is denied", who.nobody, AUDITOR_EXPLAIN, denied, "want 42501")
        expect("auditor login: explain_visibility and explain_match work", who.auditor, AUDITOR_EXPLAIN,
               "ok".__eq__, "want ok")
        _locks_held_by_nobody(dsn, who, tap)
        _login_binding(dsn, who, tap)
        _sampler_poisoning(dsn, who, tap)
        _tier_rank_token(dsn, tap)
        _runs_replay(dsn, who, tap)
        _app_authority(dsn, who, tap)


# The advisory keys groundkit's locks had before revision 0014: public formulas.
OLD_LOCK_KEYS = ("groundkit.redact", "groundkit.pending", "groundkit.reindex_impacts", "groundkit.object:lk1")
LOCK_TAKERS = (
    "select groundkit.put_object(object_id => 'lk1', version => 1, content_type => 'board_post',"
    " space_id => 'board', tier_visibility => 'T0', title => 'x', body => 'kiln lock')",
    "select * from groundkit.put_objects('[{\"object_id\": \"lk2\", \"version\": 1, \"content_type\": \"board_post\","
    " \"space_id\": \"board\", \"tier_visibility\": \"T0\", \"title\": \"x\", \"body\": \"bulk lock\"}]')",
    "select groundkit.merge_pending()",
    "select groundkit.redact_object('lk1', 2)",
    "select groundkit.reindex_impacts()",
)


def _locks_held_by_nobody(dsn: str, who: Logins, tap: Tap) -> None:
    """A login without grants holds every advisory key groundkit ever used and tries the lock
    rows: a bulk write, a merge, a redaction and a recompute still go through (lock_timeout)."""
    bad: list[str] = []
    with psycopg.connect(who.nobody) as nobody:
        for key in OLD_LOCK_KEYS:
            nobody.execute("select pg_advisory_lock(hashtextextended(%s, 0))", (key,))
        tried = _attempt(who.nobody, "select * from groundkit.locks for update")
        if tried != "42501":
            bad.append(f"locking groundkit.locks: {tried}, want 42501")
        with connect_dict(dsn) as conn:
            conn.execute("set lock_timeout = '2s'")
            for stmt in LOCK_TAKERS:
                try:
                    conn.execute(stmt)
                except psycopg.Error as exc:
                    bad.append(f"{stmt[:60]}...: {exc.sqlstate}")
    tap.check(not bad, "login without grants holding groundkit's old advisory keys: writes, merges, redactions "
              "and recomputes do not wait for it", bad, counts=Counts(privileges=len(bad)))


def _login_binding(dsn: str, who: Logins, tap: Tap) -> None:
    """A reader login bound to alice (login_members) searches as alice, and as bob gets GK010."""
    login = str(psycopg.conninfo.conninfo_to_dict(who.reader)["user"])
    with connect_dict(dsn) as conn:
        conn.execute("insert into groundkit.login_members (login, member_sub) values (%s, 'alice')", (login,))
    try:
        own = _attempt(who.reader, SEARCH[0], ("alice", "kiln"))
        other = _attempt(who.reader, SEARCH[0], ("bob", "kiln"))
        unbound = _attempt(who.writer, "select 1")  # (another login: unbound, unaffected)
    finally:
        with connect_dict(dsn) as conn:
            conn.execute("delete from groundkit.login_members where login = %s", (login,))
    ok = (own, other, unbound) == ("ok", "GK010", "ok")
    tap.check(ok, "reader login bound to one member (login_members): searches as it, and as another reader_sub "
              "gets GK010", [f"as alice {own}, as bob {other}; want ok, GK010"], counts=Counts(privileges=int(not ok)))


RECORD_SAMPLE = "select groundkit.record_sample(%s, 'kiln', 'bm25', 10, %s::jsonb)"


def _sampler_poisoning(dsn: str, who: Logins, tap: Tap) -> None:
    """A reader login records a sample naming a chunk its reader may not see (alice, T1: p2 is
    T3), or with offsets of its own: refused, nothing recorded (the export would have written
    p2's text; issue 50)."""
    hidden = '[{"object_id": "p2", "object_version": 1, "chunk_seq": 0, "score": 1}]'
    offsets = '[{"object_id": "p1", "object_version": 1, "chunk_seq": 0, "score": 1, "char_start": 0, "char_end": 99}]'
    got = tuple(_attempt(who.reader, RECORD_SAMPLE, ("alice", hits)) for hits in (hidden, offsets))
    with connect_dict(dsn) as conn:
        row = conn.execute("select count(*) as n from groundkit.search_sample_hits").fetchone()
    recorded = int(row["n"]) if row else -1
    ok = got == ("GK027", "GK005") and recorded == 0
    tap.check(ok, "reader login: record_sample naming a chunk its reader may not see is GK027, with offsets of its "
              "own GK005; nothing is recorded", [f"got {got} and {recorded} hit(s) recorded; want GK027, GK005, 0"],
              counts=Counts(privileges=int(not ok)))


def _tier_rank_token(dsn: str, tap: Tap) -> None:
    """The owner cannot let a rank change through tiers_guard with a setting."""
    with connect_dict(dsn) as conn:
        try:
            with conn.transaction():
                conn.execute("set local groundkit.tier_rank_change = on")
                conn.execute("update groundkit.tiers set rank = 9 where name = 'T1'")
            got = "ok"
        except psycopg.Error as exc:
            got = exc.sqlstate or type(exc).__name__
    tap.check(got == "GK007", "owner: `set local groundkit.tier_rank_change = on` does not let a rank change past "
              "tiers_guard (only set_tier_rank() can)", [f"got {got}, want GK007"],
              counts=Counts(privileges=int(got != "GK007")))


def _runs_replay(dsn: str, who: Logins, tap: Tap) -> None:
    """Runs (docs/runs.md): a reader login replays its own member's run and not another's; an
    auditor login replays anyone's; prune is the owner's alone; and a replay after a redaction
    shows the redaction marker, never the text."""
    login = str(psycopg.conninfo.conninfo_to_dict(who.reader)["user"])
    with Groundkit.connect(dsn) as gk:
        gk.put_member("bob", "T3")
        gk.put_object("rr1", 1, "board_post", "board", "T0", "Kiln log", "kiln firing log zebracode")
        with gk.run(flow="tutor", reader="alice") as own:
            own.search("kiln firing")
        with gk.run(flow="tutor", reader="bob") as other:
            other.search("kiln firing")
        gk.conn.execute("insert into groundkit.login_members (login, member_sub) values (%s, 'alice')", (login,))
    replay = "select content from groundkit.replay_run(%s::uuid, %s)"
    try:
        got = {
            "reader, own run": _attempt(who.reader, replay, (str(own.id), "alice")),
            "reader, another's run": _attempt(who.reader, replay, (str(other.id), "alice")),
            "reader, another's run as its reader": _attempt(who.reader, replay, (str(other.id), "bob")),
            "reader, list runs": _attempt(who.reader, "select * from groundkit.list_runs()"),
            "auditor, another's run": _attempt(who.auditor, replay, (str(other.id), None)),
            "auditor, list runs": _attempt(who.auditor, "select * from groundkit.list_runs()"),
            "auditor, prune": _attempt(who.auditor, "select groundkit.prune_runs(now())"),
            "writer, prune": _attempt(who.writer, "select groundkit.prune_runs(now())"),
        }
    finally:
        with connect_dict(dsn) as conn:
            conn.execute("delete from groundkit.login_members where login = %s", (login,))
    want = {"reader, own run": "ok", "reader, another's run": "GK010", "reader, another's run as its reader": "GK010",
            "reader, list runs": "42501", "auditor, another's run": "ok", "auditor, list runs": "ok",
            "auditor, prune": "42501", "writer, prune": "42501"}
    bad = [f"{k}: {got[k]}, want {v}" for k, v in want.items() if got[k] != v]
    tap.check(not bad, "runs: a reader login replays its own member's runs only; groundkit_auditor replays and "
              "lists anyone's; prune_runs is the owner's alone", bad, counts=Counts(privileges=len(bad)))
    with Groundkit.connect(dsn) as gk:
        gk.redact_object("rr1", 2)
        hits = [h for h in gk.replay(other.id).hits if h.object_id == "rr1"]
        with psycopg.connect(who.auditor, autocommit=True) as conn:
            raw = str(conn.execute("select * from groundkit.replay_run(%s)", (other.id,)).fetchall())
    ok = bool(hits) and all(h.redacted and h.content is None and h.now == "redacted" for h in hits) \
        and "zebracode" not in raw and "zebracode" not in str(hits)
    tap.check(ok, "replay after a redaction: the redaction marker (content null, redacted, now 'redacted'), "
              "never the text", [f"hits {hits}"], counts=Counts(privileges=int(not ok)))


def _app_authority(dsn: str, who: Logins, tap: Tap) -> None:
    """An app points groundkit.reader_authority at its own membership table."""
    with connect_dict(dsn) as conn:
        conn.execute("create schema app")
        conn.execute("create table app.people (sub text primary key, plan text not null, state text not null)")
        conn.execute("insert into app.people values ('alice', 'T3', 'active'), ('bob', 'T1', 'active')")
        conn.execute("create or replace view groundkit.reader_authority as"
                     " select p.sub as member_sub, p.plan as tier, p.state as status from app.people p")
    before = _attempt(who.reader, *SEARCH)
    tap.check(before == "42501", "app-owned authority table without a grant to groundkit_owner: search fails "
              "closed with permission denied", [f"got {before}, want 42501"], counts=Counts(privileges=int(
                  before != "42501")))
    with connect_dict(dsn) as conn:
        conn.execute("grant usage on schema app to groundkit_owner")
        conn.execute("grant select on app.people to groundkit_owner")
    with psycopg.connect(who.reader, autocommit=True) as conn:
        rows = sorted(r[0] for r in conn.execute(SEARCH[0], SEARCH[1]).fetchall())
        table = _attempt(who.reader, "select * from app.people")
    ok = rows == ["p1", "p2"] and table == "42501"
    tap.check(ok, "app-owned authority table granted to groundkit_owner: search reads the app's tiers (T3 sees "
              "both posts), while the reader still cannot SELECT the app's table",
              [f"search {rows}, want ['p1', 'p2']; SELECT app.people: {table}, want 42501"],
              counts=Counts(privileges=int(not ok)))
