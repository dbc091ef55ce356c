"""Issue 39, items 6, 7, 8, 14 and 16: locks no other role can take, redaction that leaves no
text in the planner's statistics or in zero counters, logins bound to one member, and a tier
rank that only set_tier_rank() can move."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import groundkit
from groundkit import ContentObject, Groundkit, ReaderNotAllowed
from tests.conftest import upgrade_revisions_only

Raw = psycopg.Connection[tuple[Any, ...]]

# The advisory keys groundkit took before revision 0014: public formulas anyone could compute.
OLD_KEYS = ["groundkit.redact", "groundkit.pending", "groundkit.reindex_impacts",
            "groundkit.object:p1", "groundkit.object:p2", "groundkit.object:new1"]


@contextmanager
def logins(server_dsn: str, dsn: str, **member_of: str | None) -> Iterator[dict[str, str]]:
    """Non-superuser LOGIN roles (each a member of the named role, or of none), dropped after.
    Yields a DSN for ``dsn``'s database per name."""
    token = secrets.token_hex(4)
    password = secrets.token_urlsafe(18)
    names = {kind: f"gk_locks_{token}_{kind}" for kind in member_of}
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        try:
            for kind, name in names.items():
                conn.execute(sql.SQL("create role {} login password {} nosuperuser nocreatedb nocreaterole").format(
                    sql.Identifier(name), sql.Literal(password)))
                role = member_of[kind]
                if role:
                    conn.execute(sql.SQL("grant {} to {}").format(sql.Identifier(role), sql.Identifier(name)))
            yield {kind: make_conninfo(dsn, user=name, password=password) for kind, name in names.items()}
        finally:
            for name in names.values():
                conn.execute(sql.SQL("drop role if exists {}").format(sql.Identifier(name)))


def login_name(login_dsn: str) -> str:
    return str(psycopg.conninfo.conninfo_to_dict(login_dsn)["user"])


def _world(gk: Groundkit) -> None:
    gk.put_member("alice", "T1")
    gk.put_member("bob", "T1")
    gk.put_space("board", "T0")
    for i in (1, 2):
        gk.put_object(f"p{i}", 1, "board_post", "board", "T0", "Kiln", f"kiln schedule number {i}")


# -- item 6: locks ------------------------------------------------------------------------------

def _every_lock_taking_call_goes_through(dsn: str, gk: Groundkit) -> None:
    """With lock_timeout 2 s: a one-object write (of an object and of a new one), a bulk write, a
    merge, a redaction, a delete and both forms of the impacts' recompute; index_status() names
    the recompute in steps while it runs, and nothing after."""
    with psycopg.connect(dsn, autocommit=True) as owner:
        owner.execute("set lock_timeout = '2s'")
        for stmt in (
            "select groundkit.put_object(object_id => 'p1', version => 2, content_type => 'board_post',"
            " space_id => 'board', tier_visibility => 'T0', title => 'Kiln', body => 'kiln glaze')",
            "select groundkit.put_object(object_id => 'new1', version => 1, content_type => 'board_post',"
            " space_id => 'board', tier_visibility => 'T0', title => 'New', body => 'new kiln')",
            "select * from groundkit.put_objects('[{\"object_id\": \"p2\", \"version\": 2,"
            " \"content_type\": \"board_post\", \"space_id\": \"board\", \"tier_visibility\": \"T0\","
            " \"title\": \"Kiln\", \"body\": \"kiln glaze two\"}]')",
            "select groundkit.merge_pending()",
            "select groundkit.redact_object('p1', 3)",
            "select groundkit.delete_object('p2', 3)",
            "select groundkit.reindex_impacts()",
        ):
            owner.execute(stmt)
        owner.execute("select groundkit._reindex_begin()")
        assert gk.index_status().reindex_pid == owner.info.backend_pid
        while owner.execute("select * from groundkit._reindex_step(100)").fetchone()[0] is not None:  # type: ignore[index]
            pass
        owner.execute("select groundkit._reindex_end()")
    assert gk.index_status().reindex_pid is None
    states = {r["object_id"]: r["state"]
              for r in gk.conn.execute("select object_id, state from groundkit.objects").fetchall()}
    assert states == {"p1": "redacted", "p2": "deleted", "new1": "live"}


def test_a_login_without_grants_cannot_stall_writers_merges_or_recomputes(server_dsn: str, dsn: str) -> None:
    """A login with no groundkit grant holds every advisory key groundkit used before 0014
    (public formulas), exclusive and shared, session-level and in an open transaction."""
    with Groundkit.connect(dsn) as gk:
        _world(gk)
        gk.merge_pending()
        with logins(server_dsn, dsn, nobody=None) as who, psycopg.connect(who["nobody"]) as nobody:
            for key in OLD_KEYS:
                nobody.execute("select pg_advisory_lock(hashtextextended(%s, 0))", (key,))
                nobody.execute("select pg_advisory_xact_lock_shared(hashtextextended(%s, 0))", (key,))
            _every_lock_taking_call_goes_through(dsn, gk)


def test_no_other_role_can_lock_the_lock_rows(server_dsn: str, dsn: str) -> None:
    """The lock tables are the owner's alone: a locking read is denied to a login without
    grants and to a groundkit_reader login. The reader may still prepare one (parse takes the
    table's ROW SHARE lock, held until its transaction ends), which conflicts with no row lock:
    every lock-taking call goes through meanwhile."""
    with Groundkit.connect(dsn) as gk:
        _world(gk)
        gk.merge_pending()
        with logins(server_dsn, dsn, nobody=None, reader="groundkit_reader") as who, \
                psycopg.connect(who["nobody"]) as nobody, psycopg.connect(who["reader"]) as reader:
            for table in ("locks", "object_locks"):
                locking = sql.SQL("select * from groundkit.{} for update").format(sql.Identifier(table))
                for conn in (nobody, reader):
                    with pytest.raises(psycopg.errors.InsufficientPrivilege):
                        conn.execute(locking)
                    conn.rollback()
                reader.execute(sql.SQL("prepare {} as {}").format(sql.Identifier(f"p_{table}"), locking))
            _every_lock_taking_call_goes_through(dsn, gk)


def test_the_recompute_s_key_taken_by_another_role_blocks_no_later_recompute(server_dsn: str, dsn: str) -> None:
    """pg_locks shows the recompute's advisory key while it runs. A login without grants that
    asks for it only waits; once it has it (after the recompute ended), the next recompute
    draws a new key, and index_status() names the recompute's backend, never the login's."""
    with Groundkit.connect(dsn) as gk:
        _world(gk)
        gk.merge_pending()
        with logins(server_dsn, dsn, nobody=None) as who, psycopg.connect(who["nobody"], autocommit=True) as nobody, \
                psycopg.connect(dsn, autocommit=True) as steps:
            steps.execute("select groundkit._reindex_begin()")
            held = nobody.execute(
                "select classid::bigint << 32 | objid::bigint from pg_locks"
                " where locktype = 'advisory' and pid = %s and granted", (steps.info.backend_pid,)).fetchall()
            assert len(held) == 1
            key = held[0][0]
            assert nobody.execute("select pg_try_advisory_lock(%s)", (key,)).fetchone() == (False,)
            while steps.execute("select * from groundkit._reindex_step(100)").fetchone()[0] is not None:  # type: ignore[index]
                pass
            steps.execute("select groundkit._reindex_end()")
            assert nobody.execute("select pg_try_advisory_lock(%s)", (key,)).fetchone() == (True,)
            assert gk.index_status().reindex_pid is None
            steps.execute("set lock_timeout = '2s'")
            steps.execute("select groundkit._reindex_begin(7.0)")
            assert gk.index_status().reindex_pid == steps.info.backend_pid
            steps.execute("select groundkit._reindex_release()")
            assert gk.index_status().reindex_pid is None


def test_a_recompute_whose_session_died_can_be_begun_again(dsn: str) -> None:
    """The claim goes with its session, like the advisory lock it replaces."""
    with Groundkit.connect(dsn) as gk:
        _world(gk)
        gk.merge_pending()
        with psycopg.connect(dsn, autocommit=True) as first:
            first.execute("select groundkit._reindex_begin()")
            with pytest.raises(psycopg.errors.LockNotAvailable, match="another session"):
                gk.conn.execute("select groundkit._reindex_begin()")
            gk.conn.execute("select pg_terminate_backend(%s)", (first.info.backend_pid,))
        gk.conn.execute("select pg_sleep(0.2)")
        gk.conn.execute("select groundkit._reindex_begin()")
        assert gk.index_status().reindex_pid == gk.conn.info.backend_pid
        gk.conn.execute("select groundkit._reindex_release()")


def test_writers_of_one_new_object_queue_on_its_lock_row(dsn: str) -> None:
    """Two first writes of the same object id: the second waits for the first's transaction
    (its lock row's insert), then sees the object and returns 'duplicate'."""
    put = ("select groundkit.put_object(object_id => 'fresh', version => 1, content_type => 'board_post',"
           " space_id => 'board', tier_visibility => 'T0', title => 'F', body => 'fresh kiln')")
    with Groundkit.connect(dsn) as gk:
        _world(gk)
    with psycopg.connect(dsn) as first:
        assert first.execute(put).fetchone() == ("applied",)
        result: dict[str, Any] = {}

        def second() -> None:
            with psycopg.connect(dsn, autocommit=True) as conn:
                result["status"] = conn.execute(put).fetchone()

        t = threading.Thread(target=second)
        t.start()
        t.join(0.5)
        assert t.is_alive(), "the second first-write did not wait for the first"
        first.commit()
        t.join(10)
    assert result["status"] == ("duplicate",)


# -- item 7: planner statistics -----------------------------------------------------------------

SECRET_WORDS = ["zanzibarquux", "xylophonique", "quetzalbrine"]


def _stats_holding(raw: Raw, words: list[str]) -> list[str]:
    """Every groundkit column whose planner statistics mention one of ``words``."""
    rows = raw.execute(
        "select s.tablename || '.' || s.attname from pg_stats s"
        " where s.schemaname = 'groundkit'"
        "   and exists (select 1 from unnest(%s::text[]) w"
        "                where concat_ws(' ', s.most_common_vals::text, s.histogram_bounds::text,"
        "                                s.most_common_elems::text) like '%%' || w || '%%')"
        " order by 1", (words,)).fetchall()
    return [str(r[0]) for r in rows]


def test_no_planner_statistics_keep_redacted_text(gk: Groundkit, raw: Raw) -> None:
    """After ANALYZE, the terms of a small database are in the term columns' statistics; the
    columns of text have none. A redaction leaves none of its text in pg_stats."""
    _world(gk)
    body = " ".join(SECRET_WORDS) + " kiln"
    gk.put_object("secret", 1, "board_post", "board", "T0", "Zanzibarquux memo " + SECRET_WORDS[1], body)
    gk.put_object("secret", 2, "board_post", "board", "T0", "Zanzibarquux memo", body + " glaze")
    gk.merge_pending()
    gk.put_object("secret2", 1, "board_post", "board", "T0", "Zanzibarquux memo", body + " pending")
    raw.execute("analyze")
    before = _stats_holding(raw, ["zanzibarquux"])
    assert {"postings.term", "pending_postings.term", "term_stats.term"} <= set(before), before
    assert not {"content_log.body", "content_log.title", "chunks.content", "chunks.tsv",
                "objects.title"} & set(before), before
    gk.redact_object("secret", 3)
    gk.redact_object("secret2", 2)
    assert _stats_holding(raw, SECRET_WORDS) == []
    raw.execute("analyze")
    assert _stats_holding(raw, SECRET_WORDS) == []


# -- item 8: counters after a change of the chunker's settings ------------------------------------

def test_redaction_leaves_no_zero_counter_after_the_chunk_size_changed(gk: Groundkit, raw: Raw) -> None:
    """v1 of a text without separators under chunk_chars 1500, v2 replaces it, a merge, then
    chunk_chars 1000, then the redaction: no term_stats row keeps any of the text (v1's
    counters fell to zero; chunking the log's payloads again with today's size missed them)."""
    _world(gk)
    raw.execute("update groundkit.config set chunk_chars = 1500")
    # letters none of _world's terms (kiln, schedul, number) uses, so that no term of other
    # content is a substring of v1 or v2 by chance ("kiln" was, once in CI)
    letters = "afgjopqtvwxyz"
    v1 = "".join(secrets.choice(letters) for _ in range(3600))
    v2 = "".join(secrets.choice(letters) for _ in range(3600))
    gk.put_object("blob", 1, "board_post", "board", "T0", "", v1)
    gk.merge_pending()
    gk.put_object("blob", 2, "board_post", "board", "T0", "", v2)
    gk.merge_pending()
    zero = raw.execute("select count(*) from groundkit.term_stats t where length(t.term) > 100"
                       " group by t.term, t.scope having sum(t.df) = 0").fetchall()
    assert zero, "v1's counters should be left at zero by the replacement"
    raw.execute("update groundkit.config set chunk_chars = 1000")
    gk.redact_object("blob", 3)
    left = raw.execute("select t.term, t.df from groundkit.term_stats t"
                       " where length(t.term) > 20 or strpos(%s, t.term) > 0 or strpos(%s, t.term) > 0",
                       (v1, v2)).fetchall()
    assert left == []
    # and no counter group anywhere sums to zero with a term in it
    assert raw.execute("select count(*) from (select 1 from groundkit.term_stats t group by t.term, t.scope"
                       " having sum(t.df) = 0) z").fetchone() == (0,)


# -- item 14: a login bound to one member -------------------------------------------------------

def test_a_bound_login_searches_only_as_its_member(server_dsn: str, dsn: str) -> None:
    with Groundkit.connect(dsn) as gk:
        _world(gk)
    with logins(server_dsn, dsn, bound="groundkit_reader", free="groundkit_reader") as who:
        with psycopg.connect(dsn, autocommit=True) as owner:
            owner.execute("insert into groundkit.login_members (login, member_sub) values (%s, 'alice')",
                          (login_name(who["bound"]),))
        with Groundkit.connect(who["bound"]) as bound:
            assert {h.object_id for h in bound.search("alice", "kiln")} == {"p1", "p2"}
            for other in ("bob", "nobody-at-all"):
                with pytest.raises(ReaderNotAllowed) as err:
                    bound.search(other, "kiln")
                assert err.value.sqlstate == "GK010"
                with pytest.raises(ReaderNotAllowed):  # the citation of a hit: the same binding
                    bound.fetch_citation(other, "p1", 1, 0)
        with psycopg.connect(who["bound"], autocommit=True) as conn:
            for stmt, params in (
                ("select * from groundkit.search(reader_sub => %s, query => 'kiln')", ("bob",)),
                ("select * from groundkit.search(reader_sub => %s, query => 'kiln')", (None,)),
            ):
                with pytest.raises(psycopg.Error) as raw_err:
                    conn.execute(stmt, params)
                assert raw_err.value.sqlstate == "GK010"
            conn.execute("set role groundkit_reader")  # session_user stays the login
            with pytest.raises(psycopg.Error) as as_role:
                conn.execute("select * from groundkit.search(reader_sub => 'bob', query => 'kiln')")
            assert as_role.value.sqlstate == "GK010"
            conn.execute("reset role")
            # the binding is the owner's: the login can neither read nor change it
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("update groundkit.login_members set member_sub = 'bob'")
        with Groundkit.connect(who["free"]) as free:
            assert {h.object_id for h in free.search("bob", "kiln")} == {"p1", "p2"}


# -- item 16: the tier rank's token -------------------------------------------------------------

def test_a_setting_cannot_let_a_tier_rank_change_through(gk: Groundkit, raw: Raw) -> None:
    """The old bypass, `set local groundkit.tier_rank_change = on`, is GK007 like any direct
    update; set_tier_rank() still works and leaves no token behind."""
    _world(gk)
    with raw.transaction():
        raw.execute("set local groundkit.tier_rank_change = on")
        with pytest.raises(psycopg.Error) as err:
            raw.execute("update groundkit.tiers set rank = 9 where name = 'T0'")
    assert err.value.sqlstate == "GK007"
    assert gk.set_tier_rank("T0", 9) >= 0
    moved = gk.state_checksum()
    assert raw.execute("select holder_xact from groundkit.locks where name = 'tier_rank'").fetchone() == (None,)
    with pytest.raises(psycopg.Error) as again:
        raw.execute("update groundkit.tiers set rank = 0 where name = 'T0'")
    assert again.value.sqlstate == "GK007"
    gk.rebuild()
    assert gk.state_checksum() == moved  # the rank moved together with what is stamped from it
    assert gk.set_tier_rank("T0", 0) >= 0
    assert {h.object_id for h in gk.search("alice", "kiln")} == {"p1", "p2"}


def test_bulk_write_of_many_objects_is_not_bounded_by_the_lock_table(gk: Groundkit) -> None:
    """Row locks take no slot of the server's shared lock table: one transaction writes more
    objects than max_locks_per_transaction x max_connections advisory locks would allow."""
    _world(gk)
    slots = gk.conn.execute("select current_setting('max_locks_per_transaction')::int"
                            " * (current_setting('max_connections')::int"
                            "    + current_setting('max_prepared_transactions')::int) as n").fetchone()
    assert slots is not None
    n = 3 * int(slots["n"])  # (the shared table has some slack: 1x went through on today's code)
    objs = [ContentObject(object_id=f"b{i}", version=1, content_type="board_post", space_id="board",
                          tier_visibility="T0", title="", body="kiln")
            for i in range(n)]
    results = gk.put_objects(objs)
    assert len(results) == n and {r.status.value for r in results} == {"applied"}


def test_revision_0014_clears_the_statistics_already_gathered(empty_dsn: str) -> None:
    """A database analyzed before 0014 has samples of the log's text in pg_stats; after the
    migrate they are gone, and an ANALYZE gathers none again."""
    upgrade_revisions_only(empty_dsn, "0012")
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute("insert into groundkit.content_log (object_id, version, op, title, body)"
                     " select 'o' || i, 1, 'put', 'zanzibarquux title', 'zanzibarquux body'"
                     " from generate_series(1, 50) i")
        conn.execute("analyze groundkit.content_log")
        assert _stats_holding(conn, ["zanzibarquux"]) == ["content_log.body", "content_log.title"]
    groundkit.migrate(empty_dsn, gate=False)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        assert _stats_holding(conn, ["zanzibarquux"]) == []
        conn.execute("analyze groundkit.content_log")
        assert _stats_holding(conn, ["zanzibarquux"]) == []


def test_a_prepared_statement_holds_a_table_lock_as_documented(server_dsn: str, dsn: str) -> None:
    """The residue docs/sql-operations.md ("Locks") names: a groundkit_reader login prepares an update
    of the postings it may not run; parsing took ROW EXCLUSIVE, held until its transaction ends,
    so reindex_impacts() (SHARE) waits for it. Writes do not."""
    with Groundkit.connect(dsn) as gk:
        _world(gk)
        gk.merge_pending()
        with logins(server_dsn, dsn, reader="groundkit_reader") as who, psycopg.connect(who["reader"]) as reader:
            reader.execute("prepare p as update groundkit.postings set imp = 0")
            with psycopg.connect(dsn, autocommit=True) as owner:
                owner.execute("set lock_timeout = '1s'")
                owner.execute("select groundkit.put_object(object_id => 'p1', version => 2,"
                              " content_type => 'board_post', space_id => 'board', tier_visibility => 'T0',"
                              " title => 'Kiln', body => 'kiln glaze')")
                with pytest.raises(psycopg.errors.LockNotAvailable):
                    owner.execute("select groundkit.reindex_impacts()")
            reader.rollback()
        gk.conn.execute("select groundkit.reindex_impacts()")


# -- item 15: isolation levels (documented in docs/sql-api.md, "Reading") -------------------------

def test_a_downgrade_counts_from_the_next_statement_or_the_next_repeatable_read_transaction(dsn: str) -> None:
    """What the docs say: in READ COMMITTED a downgrade counts from the reader's next
    statement; inside REPEATABLE READ, from its next transaction."""
    with Groundkit.connect(dsn) as gk:
        _world(gk)
        gk.put_object("t1only", 1, "board_post", "board", "T1", "Kiln", "kiln for tier one")
    query = "select object_id from groundkit.search(reader_sub => 'alice', query => 'kiln') order by 1"
    for level, counts_at_once in (("read committed", True), ("repeatable read", False)):
        with Groundkit.connect(dsn) as gk:
            gk.put_member("alice", "T1")
        with psycopg.connect(dsn) as reader, psycopg.connect(dsn, autocommit=True) as admin:
            reader.execute(sql.SQL("set transaction isolation level {}").format(sql.SQL(level)))
            assert [r[0] for r in reader.execute(query).fetchall()] == ["p1", "p2", "t1only"]
            admin.execute("select groundkit.put_member('alice', 'T0')")
            during = [r[0] for r in reader.execute(query).fetchall()]
            assert ("t1only" not in during) is counts_at_once, level
            reader.commit()
            assert [r[0] for r in reader.execute(query).fetchall()] == ["p1", "p2"], level


def test_a_writer_login_s_redaction_refreshes_the_statistics(server_dsn: str, dsn: str, raw: Raw) -> None:
    """The ANALYZE a redaction may run is the owner's (redact_object is SECURITY DEFINER): a
    groundkit_writer login's redaction clears its terms from pg_stats too."""
    with Groundkit.connect(dsn) as gk:
        _world(gk)
        gk.put_object("secret", 1, "board_post", "board", "T0", "Memo", " ".join(SECRET_WORDS))
        gk.merge_pending()
    raw.execute("analyze")
    assert "postings.term" in _stats_holding(raw, SECRET_WORDS)
    with logins(server_dsn, dsn, writer="groundkit_writer") as who, psycopg.connect(who["writer"]) as writer:
        assert writer.execute("select groundkit.redact_object('secret', 2)").fetchone() == ("applied",)
        writer.commit()
    assert _stats_holding(raw, SECRET_WORDS) == []
