"""The production-traffic sampler: config.sample_rate, the sample tables, engagement on samples."""

from __future__ import annotations

import math
import os
import stat
import uuid
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from psycopg.rows import dict_row
from typer.testing import CliRunner

from groundkit import Groundkit, InvalidArgument, ReaderNotAllowed, SampleRefused
from groundkit.cli import app
from groundkit.gate import roles


def _samples(gk: Groundkit) -> list[dict[str, object]]:
    return gk._fetch("select * from groundkit.search_samples order by sampled_at", {})


def _hits(gk: Groundkit, sample_id: uuid.UUID) -> list[dict[str, object]]:
    return gk._fetch("select * from groundkit.search_sample_hits where sample_id = %(s)s order by position",
                     {"s": sample_id})


@pytest.fixture
def world(community: Groundkit) -> Groundkit:
    gk = community
    gk.put_object("a", 1, "board_post", "open", "T0", "Pricing", "How to price a commission")
    gk.put_object("b", 1, "document", "members", "T1", "Pricing guide", "Pricing for members: price by the hour")
    gk.put_object("c", 1, "document", "vault", "T2", "Vault", "private pricing notes")
    return gk


def test_sample_rate_defaults_to_zero_and_records_nothing(world: Groundkit) -> None:
    assert world._scalar("select sample_rate from groundkit.config", {}) == 0
    for _ in range(20):
        world.search("t1", "pricing")
    assert world.last_sample_id is None
    assert _samples(world) == []


def test_sampled_search_records_query_mode_hits_and_tier_rank_not_the_reader(world: Groundkit) -> None:
    gk = world
    assert gk.set_sample_rate(1.0) == 1.0
    hits = gk.search("t1", "pricing", k=5)
    assert gk.last_sample_id is not None
    (sample,) = _samples(gk)
    assert sample["sample_id"] == gk.last_sample_id
    assert (sample["query"], sample["mode"], sample["k"], sample["tier_rank"]) == ("pricing", "bm25", 5, 1)
    assert "t1" not in {str(v) for v in sample.values()}  # no column holds the reader
    recorded = _hits(gk, gk.last_sample_id)
    assert [(r["object_id"], r["object_version"], r["chunk_seq"], r["score"]) for r in recorded] == [
        (h.object_id, h.object_version, h.chunk_seq, h.score) for h in hits]
    assert [r["position"] for r in recorded] == list(range(1, len(hits) + 1))


def test_sample_columns_never_name_the_reader(world: Groundkit) -> None:
    cols = {r["column_name"] for r in world._fetch(
        "select column_name from information_schema.columns where table_schema = 'groundkit'"
        " and table_name in ('search_samples', 'search_sample_hits', 'sample_engagement')", {})}
    assert not {"reader_sub", "member_sub", "reader"} & cols


def test_search_of_an_unknown_reader_records_no_sample(world: Groundkit) -> None:
    """No active reader: nothing it could have been shown and no rank to score it under (and no
    quota row for every made-up reader_sub)."""
    world.set_sample_rate(1)
    assert world.search("nobody", "pricing") == []
    assert world.last_sample_id is None and _samples(world) == []


def test_sampled_search_with_no_hits(world: Groundkit) -> None:
    world.set_sample_rate(1)
    assert world.search("t1", "zzzznothing") == []
    (sample,) = _samples(world)
    assert sample["tier_rank"] == 1
    assert _hits(world, world.last_sample_id) == []  # type: ignore[arg-type]


def test_sample_rate_is_a_fraction(world: Groundkit) -> None:
    world.set_sample_limit(1000, timedelta(hours=1))  # the bound per reader is another test's
    world.set_sample_rate(0.5)
    for _ in range(200):
        world.search("t1", "pricing")
    n = len(_samples(world))
    assert 50 < n < 150  # binomial(200, 0.5): outside this about once in 10^12


@pytest.mark.parametrize("rate", [-0.1, 1.5, math.nan, math.inf])
def test_sample_rate_out_of_range_is_refused(world: Groundkit, rate: float) -> None:
    with pytest.raises(InvalidArgument):
        world.set_sample_rate(rate)
    assert world._scalar("select sample_rate from groundkit.config", {}) == 0
    with pytest.raises(psycopg.errors.CheckViolation):
        world.conn.execute("update groundkit.config set sample_rate = 2")


def test_sample_rolls_back_with_the_callers_transaction(world: Groundkit) -> None:
    world.set_sample_rate(1)
    with world.conn.transaction(force_rollback=True):
        world.search("t1", "pricing")
        assert len(_samples(world)) == 1
    assert _samples(world) == []


def test_read_only_transaction_searches_without_a_sample(world: Groundkit) -> None:
    world.set_sample_rate(1)
    with world.conn.transaction():
        world.conn.execute("set transaction read only")
        hits = world.search("t1", "pricing")
        # the transaction is still usable after the refused sample (a savepoint took it)
        assert world._scalar("select 1 as one", {}) == 1
    assert hits and world.last_sample_id is None
    assert _samples(world) == []


def test_engagement_click_and_dwell_on_a_sampled_hit(world: Groundkit) -> None:
    world.set_sample_rate(1)
    hits = world.search("t1", "pricing")
    sid = world.last_sample_id
    assert sid is not None
    world.record_sample_engagement(sid, hits[0].object_id, "click")
    world.record_sample_engagement(str(sid), hits[0].object_id, "dwell_ms", 1200)
    rows = world._fetch("select object_id, kind, value from groundkit.sample_engagement order by at, kind", {})
    assert [(r["object_id"], r["kind"], r["value"]) for r in rows] == [
        (hits[0].object_id, "click", None), (hits[0].object_id, "dwell_ms", 1200.0)]


def test_engagement_outside_the_retrieved_set_is_refused(world: Groundkit) -> None:
    world.set_sample_rate(1)
    hits = world.search("t1", "pricing")
    assert "c" not in {h.object_id for h in hits}  # the vault's object: not in t1's set
    sid = world.last_sample_id
    assert sid is not None
    with pytest.raises(InvalidArgument, match="not among the hits") as raised:
        world.record_sample_engagement(sid, "c", "click")
    assert raised.value.sqlstate == "GK005"
    assert world._fetch("select * from groundkit.sample_engagement", {}) == []


@pytest.mark.parametrize(("sample", "kind", "value", "message"), [
    ("unknown", "click", None, "no sample"),
    ("known", "like", None, "kind must be"),
    ("known", "click", 3.0, "takes no value"),
    ("known", "dwell_ms", None, "needs a finite value"),
    ("known", "dwell_ms", -1.0, "needs a finite value"),
    ("known", "dwell_ms", math.inf, "needs a finite value"),
])
def test_bad_engagement_is_gk005_and_records_nothing(world: Groundkit, sample: str, kind: str,
                                                     value: float | None, message: str) -> None:
    world.set_sample_rate(1)
    world.search("t1", "pricing")
    sid = world.last_sample_id if sample == "known" else uuid.uuid4()
    assert sid is not None
    with pytest.raises(InvalidArgument, match=message):
        world.record_sample_engagement(sid, "a", kind, value)
    assert world._fetch("select * from groundkit.sample_engagement", {}) == []


def test_engagement_sample_id_that_is_not_a_uuid(world: Groundkit) -> None:
    with pytest.raises(InvalidArgument, match="UUID"):
        world.record_sample_engagement("not-a-uuid", "a", "click")


def test_reader_role_login_searches_sampled_and_records_engagement(server_dsn: str, dsn: str) -> None:
    roles._world(dsn)
    with Groundkit.connect(dsn) as owner:
        owner.set_sample_rate(1)
    with roles.login_roles(server_dsn, dsn) as who:
        with Groundkit.connect(who.reader) as reader:
            hits = reader.search("alice", "kiln")
            assert [h.object_id for h in hits] == ["p1"]
            assert reader.last_sample_id is not None
            reader.record_sample_engagement(reader.last_sample_id, "p1", "click")
        with psycopg.connect(who.reader, autocommit=True) as conn, pytest.raises(
                psycopg.errors.InsufficientPrivilege):
            conn.execute("select * from groundkit.search_samples")
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        assert conn.execute("select count(*) as n from groundkit.sample_engagement").fetchone() == {"n": 1}


# -- sampler poisoning (issue 50, item 3) --------------------------------------------------------

NOTE_TEXT = "m0 private diary: the door code is 4711"


def _poisoning_world(dsn: str) -> None:
    """The gate's role world plus m0 and m0's owner-only note on the open board."""
    roles._world(dsn)
    with Groundkit.connect(dsn) as owner:
        owner.put_member("m0", "T3")
        owner.put_object("n0", 1, "member_note", "board", "T0", "Diary", NOTE_TEXT, owner_sub="m0",
                         owner_only=True)
        owner.set_sample_rate(1)


def _call(dsn: str, statement: str, params: tuple[object, ...]) -> object:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(statement, params).fetchone()
        return None if row is None else row[0]


RECORD = "select groundkit.record_sample(%s, %s, 'bm25', 10, %s)"


def _export_text(dsn: str, tmp_path: Path) -> str:
    out = tmp_path / "samples.jsonl"
    result = CliRunner().invoke(app, ["eval", "export-samples", "--since", "1d", "--out", str(out), "--dsn", dsn])
    assert result.exit_code == 0, result.output
    return out.read_text()


def test_reader_login_cannot_record_a_sample_naming_another_members_owner_only_note(
        server_dsn: str, dsn: str, tmp_path: Path) -> None:
    """The attack as the run made it: a groundkit_reader login records a sample that names m0's
    note (as a reader who may not see it), with offsets of its own, and clicks on it; the export
    then held the note's text. Now: refused, nothing recorded, nothing exported."""
    _poisoning_world(dsn)
    forged = [{"object_id": "n0", "object_version": 1, "chunk_seq": 0, "score": 9.9}]
    with roles.login_roles(server_dsn, dsn) as who:
        with pytest.raises(psycopg.Error) as refused:
            _call(who.reader, RECORD, ("alice", "diary", psycopg.types.json.Jsonb(forged)))
        assert refused.value.sqlstate == "GK027"
        # made-up offsets are no longer the caller's to give: the hit's keys are exactly four
        with pytest.raises(psycopg.Error) as offsets:
            _call(who.reader, RECORD, ("alice", "kiln", psycopg.types.json.Jsonb(
                [{"object_id": "p1", "object_version": 1, "chunk_seq": 0, "score": 1.0, "char_start": 0,
                  "char_end": 10_000}])))
        assert offsets.value.sqlstate == "GK005"
        # a chunk that does not exist, or an old version, is refused alike
        for hit in ({"object_id": "p1", "object_version": 1, "chunk_seq": 7, "score": 1.0},
                    {"object_id": "nope", "object_version": 1, "chunk_seq": 0, "score": 1.0}):
            with pytest.raises(psycopg.Error) as unknown:
                _call(who.reader, RECORD, ("alice", "kiln", psycopg.types.json.Jsonb([hit])))
            assert unknown.value.sqlstate == "GK027"
        # what alice may see is recorded, with the chunk's own offsets and alice's own tier rank
        sid = _call(who.reader, RECORD, ("alice", "kiln", psycopg.types.json.Jsonb(
            [{"object_id": "p1", "object_version": 1, "chunk_seq": 0, "score": 1.0}])))
        assert sid is not None
        with pytest.raises(psycopg.Error) as click:
            _call(who.reader, "select groundkit.record_sample_engagement(%s, 'n0', 'click')", (sid,))
        assert click.value.sqlstate == "GK005"
    with Groundkit.connect(dsn) as owner:
        rows = owner._fetch("select s.tier_rank, h.object_id, h.char_start, h.char_end, c.char_start as real_start,"
                            "       c.char_end as real_end"
                            "  from groundkit.search_samples s join groundkit.search_sample_hits h using (sample_id)"
                            "  join groundkit.chunks c using (object_id, chunk_seq)", {})
        assert [(r["tier_rank"], r["object_id"]) for r in rows] == [(1, "p1")]
        assert (rows[0]["char_start"], rows[0]["char_end"]) == (rows[0]["real_start"], rows[0]["real_end"])
    exported = _export_text(dsn, tmp_path)
    assert "door code" not in exported and "n0" not in exported and "kiln schedule" in exported


def test_a_bound_reader_login_cannot_record_a_sample_as_the_notes_owner(server_dsn: str, dsn: str,
                                                                        tmp_path: Path) -> None:
    _poisoning_world(dsn)
    forged = [{"object_id": "n0", "object_version": 1, "chunk_seq": 0, "score": 9.9}]
    with roles.login_roles(server_dsn, dsn) as who:
        login = str(psycopg.conninfo.conninfo_to_dict(who.reader)["user"])
        _call(dsn, "insert into groundkit.login_members (login, member_sub) values (%s, 'alice') returning login",
              (login,))
        with pytest.raises(psycopg.Error) as raised:
            _call(who.reader, RECORD, ("m0", "diary", psycopg.types.json.Jsonb(forged)))
        assert raised.value.sqlstate == "GK010"
        with Groundkit.connect(who.reader) as reader, pytest.raises(ReaderNotAllowed):
            reader.search("m0", "diary")
        _call(dsn, "delete from groundkit.login_members where login = %s returning login", (login,))
    assert "door code" not in _export_text(dsn, tmp_path)


def test_the_tier_rank_of_a_sample_is_the_readers_not_the_callers(world: Groundkit) -> None:
    """record_sample reads the reader's rank itself: a caller cannot file a T0 reader's sample
    under rank 3 (the old signature took the rank as an argument)."""
    sid = world._scalar("select groundkit.record_sample('t0', 'pricing', 'bm25', 10, '[]') as id", {})
    assert world._scalar("select tier_rank from groundkit.search_samples where sample_id = %(s)s", {"s": sid}) == 0
    assert world._fetch("select 1 from pg_proc where proname = 'record_sample'"
                        " and pg_get_function_identity_arguments(oid) like '%%tier_rank%%'", {}) == []


def test_a_hit_changed_between_search_and_record_drops_the_sample_not_the_search(world: Groundkit) -> None:
    world.set_sample_rate(1)
    hits = world.search("t1", "pricing")
    world.put_object("a", 2, "board_post", "open", "T0", "Pricing", "How to price a commission, revised")
    with pytest.raises(SampleRefused):
        world._fetch("select groundkit.record_sample('t1', 'pricing', 'bm25', 10, %(h)s)",
                     {"h": psycopg.types.json.Jsonb([{"object_id": h.object_id, "object_version": h.object_version,
                                                      "chunk_seq": h.chunk_seq, "score": h.score} for h in hits])})
    assert world._record_sample("t1", "pricing", "bm25", 10, hits) is None  # the client: no sample, no error
    assert len(_samples(world)) == 1  # the search's own sample, before the edit


def test_samples_per_reader_are_bounded_per_window(world: Groundkit) -> None:
    world.set_sample_rate(1)
    world.set_sample_limit(3, timedelta(hours=1))
    recorded = []
    for _ in range(5):
        assert world.search("t1", "pricing")  # the search answers whatever the sampler does
        recorded.append(world.last_sample_id is not None)
    assert recorded == [True, True, True, False, False]
    world.search("t2", "pricing")
    assert world.last_sample_id is not None  # another reader has its own bound
    assert len(_samples(world)) == 4
    quota = world._fetch("select reader_sub, taken, window_start from groundkit.sample_quota order by 1", {})
    assert [(q["reader_sub"], q["taken"]) for q in quota] == [("t1", 3), ("t2", 1)]
    # windows are aligned to the epoch: no window starts at a sample's time
    assert not {q["window_start"] for q in quota} & {s["sampled_at"] for s in _samples(world)}
    # the next window: t1 is sampled again, and t2's passed row is deleted by anyone's next sample
    world.conn.execute("update groundkit.sample_quota set window_start = window_start - interval '1 hour'")
    world.search("t1", "pricing")
    assert world.last_sample_id is not None
    assert [(q["reader_sub"], q["taken"]) for q in world._fetch(
        "select reader_sub, taken from groundkit.sample_quota order by 1", {})] == [("t1", 1)]


def test_engagements_per_hit_of_a_sample_are_bounded(world: Groundkit) -> None:
    """A login cannot grow sample_engagement without end through one sample: 32 per hit."""
    world.set_sample_rate(1)
    hits = world.search("t1", "pricing")
    sid = world.last_sample_id
    assert sid is not None and hits
    for _ in range(32):
        world.record_sample_engagement(sid, hits[0].object_id, "click")
    with pytest.raises(InvalidArgument, match="has its 32 engagements already"):
        world.record_sample_engagement(sid, hits[0].object_id, "dwell_ms", 10)
    if len({h.object_id for h in hits}) > 1:  # another hit of the same sample has its own bound
        other = next(h.object_id for h in hits if h.object_id != hits[0].object_id)
        world.record_sample_engagement(sid, other, "click")
    rows = world._fetch("select count(*) as n from groundkit.sample_engagement where object_id = %(o)s",
                        {"o": hits[0].object_id})
    assert rows == [{"n": 32}]


@pytest.mark.parametrize(("per_reader", "per"), [(0, timedelta(hours=1)), (-1, timedelta(hours=1)),
                                                 (10, timedelta(0)), (10, timedelta(days=32))])
def test_a_bad_sample_limit_is_gk005_and_changes_nothing(world: Groundkit, per_reader: int, per: timedelta) -> None:
    with pytest.raises(InvalidArgument):
        world.set_sample_limit(per_reader, per)
    assert world._fetch("select sample_limit, sample_window from groundkit.config", {}) == [
        {"sample_limit": 100, "sample_window": timedelta(hours=1)}]


def test_config_set_sample_limit_cli(world: Groundkit, dsn: str) -> None:
    result = CliRunner().invoke(app, ["config", "set-sample-limit", "20", "--per", "30m", "--dsn", dsn])
    assert result.exit_code == 0, result.output
    assert world._fetch("select sample_limit, sample_window from groundkit.config", {}) == [
        {"sample_limit": 20, "sample_window": timedelta(minutes=30)}]
    bad = CliRunner().invoke(app, ["config", "set-sample-limit", "20", "--per", "soon", "--dsn", dsn])
    assert bad.exit_code == 1 and "--per takes a number and a unit" in bad.output


def test_export_file_is_created_0600_atomically_whatever_the_umask(world: Groundkit, dsn: str, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    world.set_sample_rate(1)
    world.search("t1", "pricing")
    out = tmp_path / "samples.jsonl"
    out.write_text("old labels\n")
    out.chmod(0o644)
    modes_before_rename: list[int] = []
    replace = os.replace

    def watching(src: str, dst: str) -> None:
        modes_before_rename.append(stat.S_IMODE(os.stat(src).st_mode))
        replace(src, dst)

    monkeypatch.setattr(os, "replace", watching)
    old_umask = os.umask(0)
    try:
        result = CliRunner().invoke(app, ["eval", "export-samples", "--out", str(out), "--dsn", dsn])
    finally:
        os.umask(old_umask)
    assert result.exit_code == 0, result.output
    assert modes_before_rename == [0o600]  # the new file never had wider permissions
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert "old labels" not in out.read_text() and "pricing" in out.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["samples.jsonl"]  # no temporary file left
