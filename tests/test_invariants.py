"""Issue 2, invariants the database enforces itself: the append-only log, version monotonicity of
the derived views, the deferred chunk/version foreign key, and rebuild/checksum equality."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groundkit import ContentObject, Groundkit, GroundkitError, InvariantViolation, SearchHit
from groundkit.errors import from_psycopg

Raw = psycopg.Connection[tuple[Any, ...]]
Rollback = Callable[[], AbstractContextManager[Groundkit]]


def sqlstate_of(raw: Raw, statement: str, params: tuple[Any, ...] = ()) -> str | None:
    try:
        raw.execute(statement, params)
    except psycopg.Error as exc:
        return exc.sqlstate
    return None


@pytest.fixture
def written(community: Groundkit) -> Groundkit:
    gk = community
    gk.put_object("a", 1, "board_post", "open", "T0", "Loom", "weaving on a loom")
    gk.put_object("a", 3, "board_post", "open", "T1", "Loom", "weaving on a floor loom")
    gk.put_object("b", 1, "board_post", "members", "T1", "Dye", "indigo dye vat")
    return gk


# -- the append-only log -------------------------------------------------------------------


def test_append_only_update_is_rejected(written: Groundkit, raw: Raw) -> None:
    assert raw.execute("select rolsuper from pg_roles where rolname = current_user").fetchone() == (True,)
    assert sqlstate_of(raw, "update groundkit.content_log set body = 'rewritten' where object_id = 'a'") == "GK006"
    assert sqlstate_of(raw, "update groundkit.content_log set version = version + 10") == "GK006"
    assert sqlstate_of(raw, "update groundkit.content_log set scrubbed = true where object_id = 'b'") == "GK006"
    row = raw.execute("select body from groundkit.content_log where object_id = 'a' order by seq").fetchall()
    assert row == [("weaving on a loom",), ("weaving on a floor loom",)]


def test_append_only_delete_is_rejected(written: Groundkit, raw: Raw) -> None:
    assert sqlstate_of(raw, "delete from groundkit.content_log where object_id = 'a'") == "GK006"
    assert sqlstate_of(raw, "delete from groundkit.content_log") == "GK006"
    assert raw.execute("select count(*) from groundkit.content_log").fetchone() == (3,)


def test_append_only_truncate_is_rejected(written: Groundkit, raw: Raw) -> None:
    assert sqlstate_of(raw, "truncate groundkit.content_log") == "GK006"
    assert sqlstate_of(raw, "truncate groundkit.content_log cascade") == "GK006"
    assert raw.execute("select count(*) from groundkit.content_log").fetchone() == (3,)


def test_append_only_violation_maps_to_invariant_violation(written: Groundkit) -> None:
    try:
        written.conn.execute("delete from groundkit.content_log")
    except psycopg.Error as exc:
        err: GroundkitError = from_psycopg(exc)
    else:
        pytest.fail("the delete was not rejected")
    assert isinstance(err, InvariantViolation)
    assert err.sqlstate == "GK006"
    assert "append-only" in err.message


def test_forged_scrub_without_redact_event_is_rejected(written: Groundkit, raw: Raw) -> None:
    """An UPDATE that looks exactly like redaction's scrub is rejected for an object that has
    no redact event in the log."""
    forged = (
        "update groundkit.content_log set title = null, body = null, segments = null, scrubbed = true"
        " where object_id = %s"
    )
    assert sqlstate_of(raw, forged, ("a",)) == "GK006"
    written.delete_object("a", 4)  # a delete is not a redaction
    assert sqlstate_of(raw, forged, ("a",)) == "GK006"
    assert raw.execute(
        "select count(*) from groundkit.content_log where object_id = 'a' and body is not null"
    ).fetchone() == (2,)
    # and a "scrub" of a redacted object's log that changes anything else is rejected too
    written.redact_object("b", 2)
    assert sqlstate_of(raw, "update groundkit.content_log set metadata = '{\"x\": 1}'"
                            " where object_id = 'b' and op = 'put'") == "GK006"
    assert sqlstate_of(raw, "update groundkit.content_log set scrubbed = false where object_id = 'b'") == "GK006"


# -- version monotonicity of the derived views --------------------------------------------


def test_objects_cannot_move_to_a_lower_version(written: Groundkit, raw: Raw) -> None:
    assert sqlstate_of(raw, "update groundkit.objects set version = 1 where object_id = 'a'") == "GK007"
    assert sqlstate_of(raw, "update groundkit.objects set version = 2 where object_id = 'a'") == "GK007"
    assert raw.execute("select version from groundkit.objects where object_id = 'a'").fetchone() == (3,)
    assert [h.object_version for h in written.search("t1", "loom")] == [3]


def test_tombstone_cannot_go_back_to_live(written: Groundkit, raw: Raw) -> None:
    written.delete_object("a", 4)
    revive = (
        "update groundkit.objects set state = 'live', content_type = 'board_post', space_id = 'open',"
        " tier_visibility = 'T0', title = 'Loom', content_hash = 'x', version = version + 1"
        " where object_id = %s"
    )
    assert sqlstate_of(raw, revive, ("a",)) == "GK007"
    written.redact_object("b", 2)
    assert sqlstate_of(raw, revive, ("b",)) == "GK007"
    assert sqlstate_of(raw, "update groundkit.objects set state = 'deleted' where object_id = 'b'") == "GK007"
    assert raw.execute("select object_id, state from groundkit.objects order by 1").fetchall() == [
        ("a", "deleted"), ("b", "redacted"),
    ]


def test_objects_rows_cannot_be_deleted(written: Groundkit, raw: Raw) -> None:
    written.delete_object("a", 4)
    assert sqlstate_of(raw, "delete from groundkit.objects where object_id = 'a'") == "GK007"
    assert sqlstate_of(raw, "delete from groundkit.objects where object_id = 'b'") == "GK007"
    assert raw.execute("select count(*) from groundkit.objects").fetchone() == (2,)


def test_object_id_cannot_change(written: Groundkit, raw: Raw) -> None:
    assert sqlstate_of(raw, "update groundkit.objects set object_id = 'z' where object_id = 'a'") == "GK007"


def test_chunk_for_a_non_current_version_is_rejected(written: Groundkit, raw: Raw) -> None:
    insert = (
        "insert into groundkit.chunks (object_id, object_version, chunk_seq, content, tsv, doc_len,"
        " chunker_version) values (%s, %s, 7, 'forged', to_tsvector('forged'), 1, 'gk-text-1')"
    )
    assert sqlstate_of(raw, insert, ("a", 1)) == "GK007"  # an old version
    assert sqlstate_of(raw, insert, ("a", 4)) == "GK007"  # a version that does not exist
    assert sqlstate_of(raw, insert, ("nope", 1)) == "GK007"  # an object that does not exist
    written.delete_object("b", 2)
    assert sqlstate_of(raw, insert, ("b", 2)) == "GK007"  # a tombstoned object
    assert sqlstate_of(raw, "update groundkit.chunks set object_version = 1 where object_id = 'a'") == "GK007"
    assert raw.execute("select count(*) from groundkit.chunks where content = 'forged'").fetchone() == (0,)


def test_deferred_fk_chunk_must_match_current_version_at_commit(written: Groundkit, dsn: str) -> None:
    """Moving an object to a new version without replacing its chunks passes the row triggers
    (versions only go up) but not the deferred foreign key at commit."""
    with psycopg.connect(dsn) as conn:  # not autocommit: one transaction
        conn.execute("update groundkit.objects set version = version + 1 where object_id = 'a'")
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            conn.commit()
    with psycopg.connect(dsn) as conn:
        conn.execute("update groundkit.objects set version = version + 1 where object_id = 'a'")
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            conn.execute("set constraints all immediate")
        conn.rollback()
    assert [h.object_version for h in written.search("t1", "loom")] == [3]
    # within one transaction the derived rows may be out of step, as _materialize_many needs them to be
    with psycopg.connect(dsn) as conn:
        conn.execute("update groundkit.objects set version = 5 where object_id = 'a'")
        conn.execute("delete from groundkit.chunks where object_id = 'a'")
        conn.commit()


# -- rebuild / checksum equality -----------------------------------------------------------

WORDS = ["loom", "weaving", "indigo", "dye", "the", "floor", "spindle", "wool", "wools", "felt"]
SPACES = ["open", "members", "vault"]
TIERS = ["T0", "T1", "T2", "T3"]
READERS = ["t0", "t1", "t2", "t3"]

text = st.lists(st.sampled_from(WORDS), min_size=0, max_size=8).map(" ".join)
put_op = st.tuples(st.just("put"), st.integers(0, 3), st.integers(1, 5), st.sampled_from(TIERS),
                   st.sampled_from(SPACES), text, st.sampled_from([False, False, False, True]))
space_op = st.tuples(st.just("space"), st.sampled_from(SPACES), st.sampled_from(TIERS), st.booleans())
op = st.one_of(
    put_op, put_op, put_op,
    st.tuples(st.just("retier"), st.integers(0, 3), st.integers(1, 5), st.sampled_from(TIERS)),
    st.tuples(st.just("delete"), st.integers(0, 3), st.integers(1, 5)),
    st.tuples(st.just("redact"), st.integers(0, 3), st.integers(1, 5)),
    space_op, space_op,
)


def apply(gk: Groundkit, step: tuple[Any, ...]) -> None:
    kind = step[0]
    try:
        with gk.conn.transaction():  # a savepoint: a rejected write leaves the rest intact
            if kind == "put":
                _, n, version, tier, space, body, owner_only = step
                gk.put_object(f"o{n}", version, "board_post", space, tier, f"post {n}", body,
                              owner_sub="t1" if owner_only else None, owner_only=owner_only)
            elif kind == "retier":
                gk.retier_object(f"o{step[1]}", step[2], step[3])
            elif kind == "delete":
                gk.delete_object(f"o{step[1]}", step[2])
            elif kind == "redact":
                gk.redact_object(f"o{step[1]}", step[2])
            else:
                gk.put_space(step[1], step[2], private=step[3])
    except GroundkitError as exc:  # a version conflict or a retier of an unknown object
        assert exc.sqlstate in ("GK001", "GK009"), exc


def all_results(gk: Groundkit) -> dict[tuple[str, str], list[SearchHit]]:
    return {(reader, q): gk.search(reader, q, k=50)
            for reader in READERS for q in ("loom weaving", "wool felt spindle", "indigo the dye dye")}


def same_hits(a: list[SearchHit], b: list[SearchHit]) -> bool:
    """Equal hits; scores equal up to the order a float sum was taken in."""
    return len(a) == len(b) and all(
        x.model_dump(exclude={"score"}) == y.model_dump(exclude={"score"})
        and math.isclose(x.score, y.score, rel_tol=1e-12)
        for x, y in zip(a, b, strict=True)
    )


def same_up_to_ties(a: list[SearchHit], b: list[SearchHit]) -> bool:
    """Equal scores position by position and the same hits, except that chunks whose scores are
    equal up to the order a float sum was taken in may swap places (many chunks here share one
    text, and which of them a strategy sums in which order depends on the physical layout)."""
    if len(a) != len(b) or not all(math.isclose(x.score, y.score, rel_tol=1e-12) for x, y in zip(a, b, strict=True)):
        return False

    def by_tie_group(hits: list[SearchHit]) -> list[set[str]]:
        groups: list[set[str]] = []
        for i, hit in enumerate(hits):
            if i == 0 or not math.isclose(hit.score, hits[i - 1].score, rel_tol=1e-12):
                groups.append(set())
            groups[-1].add(hit.model_dump_json(exclude={"score"}))
        return groups

    groups_a, groups_b = by_tie_group(a), by_tie_group(b)
    # the last group may be cut at k differently; every earlier group must hold the same hits
    return groups_a[:-1] == groups_b[:-1] if groups_a else True


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(op, min_size=4, max_size=25), policy=st.lists(space_op, min_size=1, max_size=3))
def test_rebuild_checksum_equality(community: Groundkit, rolled_back: Rollback,
                                   steps: list[tuple[Any, ...]], policy: list[tuple[Any, ...]]) -> None:
    """A random mix of writes and space policy changes, ending with policy changes over the
    content written: the incrementally maintained state equals a rebuild from the log."""
    with rolled_back() as gk:
        for step in steps + policy:
            apply(gk, step)
        gk.conn.execute("set constraints all immediate")  # rebuild() truncates: no pending checks
        checksum = gk.state_checksum()
        results = all_results(gk)
        logged = gk.conn.execute("select count(distinct object_id) as n from groundkit.content_log").fetchone()
        assert logged is not None
        assert gk.rebuild() == logged["n"]
        assert gk.state_checksum() == checksum
        rebuilt = all_results(gk)
        for key, hits in results.items():
            assert same_hits(rebuilt[key], hits), key


def test_checksum_reflects_derived_state(written: Groundkit, raw: Raw) -> None:
    """The checksum is not a constant: every kind of derived change moves it."""
    gk = written
    seen = {gk.state_checksum()}
    gk.put_object("c", 1, "board_post", "open", "T0", "Felt", "wet felting")
    seen.add(gk.state_checksum())
    gk.retier_object("c", 2, "T2")
    seen.add(gk.state_checksum())
    gk.put_space("open", "T3")  # moves the space's chunks to another statistics scope
    seen.add(gk.state_checksum())
    gk.delete_object("c", 3)
    seen.add(gk.state_checksum())
    assert len(seen) == 5
    # a derived row edited behind groundkit's back changes the checksum; a rebuild repairs it
    good = gk.state_checksum()
    raw.execute("update groundkit.chunks set doc_len = doc_len + 1 where object_id = 'a'")
    assert gk.state_checksum() != good
    gk.rebuild()
    assert gk.state_checksum() == good


def test_rebuild_reproduces_search_results_exactly(written: Groundkit) -> None:
    gk = written
    gk.put_object("c", 1, "member_note", "notes", "T0", "My loom", "my own loom notes", owner_sub="t1",
                  owner_only=True)
    gk.put_object("d", 1, "board_post", "vault", "T2", "Vault loom", "loom in the vault")
    gk.put_space("members", "T2")
    before = all_results(gk)
    assert any(before.values())
    checksum = gk.state_checksum()
    gk.rebuild()
    assert gk.state_checksum() == checksum
    after = all_results(gk)
    assert after.keys() == before.keys()
    for key in before:
        assert [h.model_dump() for h in after[key]] == [h.model_dump() for h in before[key]], key


def test_rebuild_in_batches(community: Groundkit) -> None:
    """rebuild() materializes a thousand objects per batch and counts the statistics once at
    the end: with several batches (a partial last one), replaced, retiered, deleted and redacted
    objects, owner-only notes and private content, the rebuilt state equals the incremental one."""
    gk = community
    spaces = ["open", "members", "vault", "notes"]
    objects = []
    for i in range(2345):
        space = spaces[i % 4]
        note = space == "notes" and i % 8 == 3
        objects.append(ContentObject(
            object_id=f"bulk-{i:05d}", version=1, content_type="member_note" if note else "board_post",
            space_id=space, tier_visibility=["T0", "T1", "T2", "T3"][i % 3 + (space == "vault")],
            title=f"post {i}", body=" ".join(WORDS[(i * j) % len(WORDS)] for j in range(1, 2 + i % 9)),
            owner_sub="t1" if note else None, owner_only=note))
    for start in range(0, len(objects), 1000):
        gk.put_objects(objects[start:start + 1000])
    for i in range(0, 2345, 97):
        gk.put_object(f"bulk-{i:05d}", 2, "board_post", "members", "T1", f"post {i} again", "loom loom wool")
    for i in range(5, 2345, 211):
        gk.retier_object(f"bulk-{i:05d}", 3, "T2")
    for i in range(7, 2345, 101):
        gk.delete_object(f"bulk-{i:05d}", 4)
    for i in range(11, 2345, 113):
        gk.redact_object(f"bulk-{i:05d}", 4)
    gk.put_space("members", "T2")
    before = all_results(gk)
    checksum = gk.state_checksum()
    level = gk.conn.execute("show client_min_messages").fetchone()
    indexes = """select c.relname, pg_get_indexdef(i.indexrelid), coalesce(pg_get_constraintdef(k.oid), '')
                   from pg_index i join pg_class c on c.oid = i.indexrelid
                   left join pg_constraint k on k.conindid = i.indexrelid
                  where i.indrelid = 'groundkit.postings'::regclass order by 1"""
    postings_indexes = gk.conn.execute(indexes).fetchall()
    assert len(postings_indexes) == 2
    calls: list[tuple[int, int]] = []
    # (the rebuild sketches the lists too, which reports its own progress: not the rebuild's)
    gk.conn.execute("update groundkit.config set sketch_min_postings = 50")
    gk.conn.execute("delete from groundkit.postings_sketch")
    assert gk.rebuild(progress=lambda done, total: calls.append((done, total))) == 2345
    assert calls == [(1000, 2345), (2000, 2345), (2345, 2345)]
    sketched = gk.conn.execute("select count(*) as n from groundkit.postings_sketch").fetchone()
    assert sketched is not None and sketched["n"] > 0
    assert gk.conn.execute("show client_min_messages").fetchone() == level  # the session's level is back
    assert gk.conn.execute(indexes).fetchall() == postings_indexes  # dropped for the load, built again
    assert gk.state_checksum() == checksum
    after = all_results(gk)
    for key in before:
        assert same_up_to_ties(after[key], before[key]), key


def _rebuild_behind(dsn: str, holder: psycopg.Connection[Any], hold: str,
                    meanwhile: Callable[[], None]) -> dict[str, object]:
    """Run ``hold`` on ``holder``, start a rebuild in a thread, check that it waits, run
    ``meanwhile`` (still holding), commit ``holder``; return what the rebuild returned or raised."""
    outcome: dict[str, object] = {}

    def rebuild() -> None:
        with Groundkit.connect(dsn) as admin:
            try:
                outcome["rebuilt"] = admin.rebuild()
            except GroundkitError as exc:
                outcome["error"] = exc.sqlstate

    try:
        holder.execute(hold)
        thread = threading.Thread(target=rebuild)
        thread.start()
        thread.join(1.0)
        assert thread.is_alive()  # waiting for the holder
        meanwhile()
        holder.commit()
        thread.join(30)
    finally:
        holder.close()
    return outcome


def test_rebuild_waits_for_a_writer_holding_an_object(community: Groundkit, dsn: str) -> None:
    """A writer that holds an object row and then writes derived rows finishes before a rebuild
    that started meanwhile (the rebuild locks objects first, as writers do); the two used to
    deadlock when the rebuild's truncate took postings and chunks first."""
    gk = community
    gk.put_object("a", 1, "board_post", "open", "T0", "Loom", "weaving on a loom")
    writer = psycopg.connect(dsn)

    def write() -> None:
        writer.execute("select groundkit.put_object('a', 2, 'board_post', 'open', 'T0', 'Loom', 'a floor loom')")

    outcome = _rebuild_behind(dsn, writer, "select 1 from groundkit.objects where object_id = 'a' for update", write)
    assert outcome == {"rebuilt": 1}
    assert {h.object_version for h in gk.search("t0", "loom")} == {2}


def test_rebuild_waits_for_a_running_analyze(community: Groundkit, dsn: str) -> None:
    """An analyze_postings() in flight holds the sketches and reads the statistics; a rebuild
    that starts meanwhile waits for it before truncating anything (it sketches at its end, and
    the two used to deadlock: the rebuild holding the truncated statistics, waiting for the
    sketches)."""
    gk = community
    gk.put_object("a", 1, "board_post", "open", "T0", "Loom", "weaving on a loom")
    gk.merge_pending()  # into term_stats
    analyze = psycopg.connect(dsn)  # plays an analyze_postings() between its lock and its reads

    def read_statistics() -> None:
        analyze.execute("set local lock_timeout = '5s'")
        row = analyze.execute("select count(*) from groundkit.term_stats").fetchone()
        assert row is not None and row[0] > 0  # the statistics are still there to read

    outcome = _rebuild_behind(dsn, analyze, "lock table groundkit.postings_sketch in share row exclusive mode",
                              read_statistics)
    assert outcome == {"rebuilt": 1}
