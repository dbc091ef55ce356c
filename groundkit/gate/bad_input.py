"""Bad input, tried through the Python API and straight through the SQL API (malformed DSNs:
:mod:`~groundkit.gate.bad_dsns`).

Each case must end in a clear, typed error (a :class:`~groundkit.errors.GroundkitError` subclass
from Python; a ``GKnnn`` or data-exception SQLSTATE from SQL) or, for input that is merely
hostile (tsquery syntax, SQL-injection strings in a query), in a normal answer; and in both
cases nothing may change: the derived-state checksum, the log length and a digest of the
members, spaces and grants are compared before and after. SQL-injection strings written as
ids, titles and bodies must be stored verbatim and leave every table in place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from groundkit.client import Groundkit
from groundkit.errors import GroundkitError, InvalidArgument, MigrationError, VersionConflict
from groundkit.gate import bad_dsns
from groundkit.gate.tap import Counts, Tap
from groundkit.gate.throwaway import GateDatabases, connect_dict

INJECTIONS = (
    "x'); drop table groundkit.content_log; --",
    "' or '1'='1",
    "$$; select pg_sleep(5); $$",
    "%(k)s {0} %s \\x00",
    "robert'); delete from groundkit.members where ('1'='1",
)
META = "kiln & | ! : * ( ) ' <-> <2> \\ \" ; -- /* */ ~ @@ !! && ||"
LONG = "pricing " * 4200  # 33,600 characters


@dataclass(frozen=True)
class Case:
    name: str
    call: Callable[..., Any]  # (Groundkit, psycopg connection) -> answer
    expect: str  # "error" (typed error, nothing changed) or "answer" (no error, nothing changed)
    check: Callable[[Any], str | None] | None = None  # extra check of an answer; returns a problem


def _fingerprint(conn: psycopg.Connection[Any]) -> tuple[Any, ...]:
    row = conn.execute(
        "select groundkit.state_checksum() as c, (select count(*) from groundkit.content_log) as n,"
        " (select md5(coalesce(string_agg(x, '|' order by x), '')) from ("
        "   select concat_ws(',', 'm', member_sub, tier, status) as x from groundkit.members"
        "   union all select concat_ws(',', 's', space_id, min_tier, private) from groundkit.spaces"
        "   union all select concat_ws(',', 'g', space_id, member_sub) from groundkit.space_grants) a) as a,"
        " (select count(*) from pg_catalog.pg_tables where schemaname = 'groundkit') as t").fetchone()
    assert row is not None
    return tuple(row.values()) if isinstance(row, dict) else tuple(row)


def _expect_ids(*want: str) -> Callable[[Any], str | None]:
    def check(hits: Any) -> str | None:
        got = sorted(h.object_id for h in hits)
        return None if got == sorted(want) else f"got {got}, want {sorted(want)}"

    return check


def _put(gk: Groundkit, **over: Any) -> Any:
    kw: dict[str, Any] = {"object_id": "b1", "version": 5, "content_type": "board_post", "space_id": "board",
                          "tier_visibility": "T0", "title": "t", "body": "b"}
    kw.update(over)
    return gk.put_object(**kw)


def _sql(statement: str, *params: Any) -> Callable[[Groundkit, psycopg.Connection[Any]], Any]:
    def call(gk: Groundkit, conn: psycopg.Connection[Any]) -> Any:
        return conn.execute(statement, params).fetchall()

    return call


_PUT_SQL = ("select groundkit.put_object(object_id => 'b2', version => %s::bigint, content_type => 'transcript',"
            " space_id => 'board', tier_visibility => 'T0', title => 't', body => null,"
            " segments => %s::jsonb, metadata => %s::jsonb)")
_SEG_OK = '[{"start_ms": 0, "end_ms": 10, "text": "hello"}]'


def cases() -> list[Case]:
    c: list[Case] = []
    s = c.append
    # -- search: hostile text is text -----------------------------------------------------
    s(Case("search: tsquery metacharacters are plain text", lambda g, _: g.search("ana", META), "answer",
           _expect_ids("p1")))
    s(Case("search: nothing but tsquery syntax", lambda g, _: g.search("ana", "&|!:*()'<->"), "answer",
           _expect_ids()))
    for inj in INJECTIONS:
        s(Case(f"search: SQL injection as query {inj!r}", lambda g, _, i=inj: g.search("ana", i), "answer"))
        s(Case(f"search: SQL injection as reader_sub {inj!r} fails closed", lambda g, _, i=inj: g.search(i, "kiln"),
               "answer", _expect_ids()))
        s(Case(f"search: SQL injection in space_ids {inj!r}", lambda g, _, i=inj: g.search("ana", "kiln",
               space_ids=[i]), "answer", _expect_ids()))
    s(Case("search: query of 32,769 characters", lambda g, _: g.search("ana", "x" * 32769), "error"))
    s(Case("search: query of 1,000,000 characters", lambda g, _: g.search("ana", "x" * 1_000_000), "error"))
    s(Case("search: query of 32,768 characters is allowed", lambda g, _: g.search("ana", LONG[:32768]), "answer"))
    # (past 64 distinct terms a language, search keeps the most informative: docs/bm25/analysis.md)
    s(Case("search: 5,000 distinct terms are read, not refused",
           lambda g, _: g.search("ana", " ".join(f"q{i}" for i in range(5000))), "answer"))
    s(Case("search: unpaired quotes, lone minus signs and OR are words",
           lambda g, _: g.search("ana", '"kiln -" OR - "" -"'), "answer"))
    s(Case("search: NUL byte in query", lambda g, _: g.search("ana", "kiln\x00"), "error"))
    s(Case("search: NUL byte in reader_sub", lambda g, _: g.search("ana\x00", "kiln"), "error"))
    s(Case("search: lone surrogate (invalid UTF-8) in query", lambda g, _: g.search("ana", "kiln\ud800"), "error"))
    s(Case("search: lone surrogate in reader_sub", lambda g, _: g.search("\udcff", "kiln"), "error"))
    for k in (0, -1, 201, 2**31, 2**63, True):
        s(Case(f"search: k = {k!r}", lambda g, _, k=k: g.search("ana", "kiln", k=k), "error"))
    s(Case("search: unknown content type", lambda g, _: g.search("ana", "kiln", content_types=["bogus"]), "error"))
    s(Case("search: content_types as a string", lambda g, _: g.search("ana", "kiln", content_types="board_post"),
           "error"))
    s(Case("search: NUL in space_ids", lambda g, _: g.search("ana", "kiln", space_ids=["board\x00"]), "error"))
    # -- citations: markers are checked; a citation request never errors into a leak ------
    s(Case("search: snippet_start of 65 characters", lambda g, _: g.search("ana", "kiln", snippet_start="<" * 65),
           "error"))
    s(Case("search: snippet_end with control character 2", lambda g, _: g.search("ana", "kiln", snippet_end="\x02"),
           "error"))
    s(Case("search: snippet_start as None", lambda g, _: g.search("ana", "kiln", snippet_start=None), "error"))
    s(Case("SQL search: NULL snippet_end", _sql("select * from groundkit.search('ana', 'kiln', snippet_end => null)"),
           "error"))
    s(Case("fetch_citation: NUL in object_id", lambda g, _: g.fetch_citation("ana", "p\x00", 1, 0), "error"))
    s(Case("fetch_citation: version as a string", lambda g, _: g.fetch_citation("ana", "p1", "1", 0), "error"))
    for inj in INJECTIONS:
        s(Case(f"fetch_citation: SQL injection as object_id {inj!r} is no row",
               lambda g, _, i=inj: g.fetch_citation("ana", i, 1, 0), "answer",
               lambda got: None if got is None else f"got {got!r}"))
        s(Case(f"fetch_citation: SQL injection as reader_sub {inj!r} fails closed",
               lambda g, _, i=inj: g.fetch_citation(i, "p1", 1, 0), "answer",
               lambda got: None if got is None else f"got {got!r}"))
    s(Case("SQL fetch_citation: NULL arguments are no row",
           _sql("select * from groundkit.fetch_citation(null, null, null, null)"), "answer",
           lambda rows: None if rows == [] else f"got {rows!r}"))
    # -- membership and spaces ----------------------------------------------------------
    s(Case("put_member: unknown tier", lambda g, _: g.put_member("zed", "T9"), "error"))
    s(Case("put_member: unknown status", lambda g, _: g.put_member("zed", "T1", "admin"), "error"))
    s(Case("put_member: empty member_sub", lambda g, _: g.put_member("", "T1"), "error"))
    s(Case("put_member: 257-character member_sub", lambda g, _: g.put_member("z" * 257, "T1"), "error"))
    s(Case("put_member: NUL in member_sub", lambda g, _: g.put_member("z\x00", "T1"), "error"))
    s(Case("put_member: lone surrogate in member_sub", lambda g, _: g.put_member("z\ud800", "T1"), "error"))
    for inj in INJECTIONS:
        s(Case(f"put_member: SQL injection as tier {inj!r}", lambda g, _, i=inj: g.put_member("zed", i), "error"))
        s(Case(f"put_member: SQL injection as status {inj!r}", lambda g, _, i=inj: g.put_member("zed", "T1", i),
               "error"))
        s(Case(f"put_space: SQL injection as min_tier {inj!r}", lambda g, _, i=inj: g.put_space("sp", i), "error"))
        s(Case(f"grant_space: SQL injection as unknown space {inj!r}",
               lambda g, _, i=inj: g.grant_space(i, "ana"), "error"))
        s(Case(f"revoke_space: SQL injection as unknown space {inj!r}",
               lambda g, _, i=inj: g.revoke_space(i, "ana"), "error"))
    s(Case("put_space: unknown tier", lambda g, _: g.put_space("sp", "T9"), "error"))
    s(Case("grant_space: NUL in member_sub", lambda g, _: g.grant_space("board", "a\x00"), "error"))
    # -- objects --------------------------------------------------------------------------
    s(Case("put_object: unknown content type", lambda g, _: _put(g, content_type="bogus"), "error"))
    s(Case("put_object: unknown space", lambda g, _: _put(g, space_id="nowhere"), "error"))
    s(Case("put_object: unknown tier", lambda g, _: _put(g, tier_visibility="T9"), "error"))
    for v in (0, -1, 2**63, 10**30):
        s(Case(f"put_object: version {v}", lambda g, _, v=v: _put(g, version=v), "error"))
    s(Case("put_object: same version, different content", lambda g, _: _put(g, object_id="p1", version=1),
           "error"))
    for name, oid in (("newline", "b\nfake line"), ("ESC sequence", "b\x1b[2J"), ("tab", "b\tc"),
                      ("bidi override", "b\u202ecod.exe")):
        s(Case(f"put_object: {name} in object_id", lambda g, _, o=oid: _put(g, object_id=o), "error"))
        s(Case(f"SQL put_object: {name} in object_id", _sql(
            "select groundkit.put_object(object_id => %s, version => 1, content_type => 'board_post',"
            " space_id => 'board', tier_visibility => 'T0', title => 't', body => 'b')", oid), "error"))
    s(Case("put_object: NUL in title", lambda g, _: _put(g, title="a\x00b"), "error"))
    s(Case("put_object: NUL in body", lambda g, _: _put(g, body="a\x00b"), "error"))
    s(Case("put_object: lone surrogate in body", lambda g, _: _put(g, body="a\ud800b"), "error"))
    s(Case("put_object: NUL in a metadata value", lambda g, _: _put(g, metadata={"a": "x\x00"}), "error"))
    s(Case("put_object: lone surrogate in a metadata key", lambda g, _: _put(g, metadata={"\ud800": 1}), "error"))
    s(Case("put_object: metadata value that is not JSON", lambda g, _: _put(g, metadata={"a": {1, 2}}), "error"))
    s(Case("put_object: metadata as a list", lambda g, _: _put(g, metadata=[1, 2]), "error"))
    s(Case("put_object: metadata as a string", lambda g, _: _put(g, metadata="{}"), "error"))
    s(Case("put_object: owner_only without owner", lambda g, _: _put(g, owner_only=True), "error"))
    for name, seg in (
        ("segments as an object", {"start_ms": 0, "end_ms": 1, "text": "x"}),
        ("segments as a list of strings", ["hello"]),
        ("a segment without end_ms", [{"start_ms": 0, "text": "x"}]),
        ("a segment with an extra key", [{"start_ms": 0, "end_ms": 1, "text": "x", "speaker": "a"}]),
        ("a segment ending before it starts", [{"start_ms": 5, "end_ms": 1, "text": "x"}]),
        ("a segment with negative start", [{"start_ms": -1, "end_ms": 1, "text": "x"}]),
        ("a segment with fractional ms", [{"start_ms": 0.5, "end_ms": 1, "text": "x"}]),
        ("a segment whose text is a number", [{"start_ms": 0, "end_ms": 1, "text": 7}]),
        ("empty segments", []),
        ("segments with a NUL in the text", [{"start_ms": 0, "end_ms": 1, "text": "a\x00"}]),
    ):
        s(Case(f"put_object: {name}", lambda g, _, seg=seg: _put(g, content_type="transcript", segments=seg),
               "error"))
    s(Case("put_object: segments on a board post", lambda g, _: _put(g, segments=[{"start_ms": 0, "end_ms": 1,
                                                                                   "text": "x"}]), "error"))
    s(Case("retier_object: unknown object", lambda g, _: g.retier_object("nope", 2, "T1"), "error"))
    s(Case("retier_object: unknown tier", lambda g, _: g.retier_object("p1", 2, "T9"), "error"))
    s(Case("retier_object: version 0", lambda g, _: g.retier_object("p1", 0, "T1"), "error"))
    s(Case("delete_object: version -1", lambda g, _: g.delete_object("p1", -1), "error"))
    s(Case("delete_object: version 2**63", lambda g, _: g.delete_object("p1", 2**63), "error"))
    s(Case("delete_object: empty object_id", lambda g, _: g.delete_object("", 1), "error"))
    s(Case("redact_object: NUL in object_id", lambda g, _: g.redact_object("p\x00", 1), "error"))
    s(Case("redact_object: 257-character object_id", lambda g, _: g.redact_object("p" * 257, 1), "error"))
    # -- straight through SQL (no Python validation in front) ---------------------------
    sql_search = "select * from groundkit.search(reader_sub => 'ana', query => %s, k => %s::integer)"
    for k_text in ("0", "-1", "201", "2147483648"):
        s(Case(f"SQL search: k => {k_text}", _sql(sql_search, "kiln", k_text), "error"))
    s(Case("SQL search: query of 32,769 characters", _sql(sql_search, "x" * 32769, "10"), "error"))
    s(Case("SQL search: NULL query", _sql(sql_search, None, "10"), "error"))
    s(Case("SQL search: 5,000 distinct terms", _sql(sql_search, " ".join(f"q{i}" for i in range(5000)), "10"),
           "answer"))
    s(Case("SQL search: a language nobody has", _sql("select groundkit.set_space_language('board', 'klingon')"),
           "error"))
    s(Case("SQL search: unknown content type",
           _sql("select * from groundkit.search('ana', 'kiln', 10, array['bogus'])"), "error"))
    s(Case("SQL search: tsquery metacharacters", _sql(sql_search, META, "10"), "answer"))
    for name, seg_text, meta in (
        ("segments as an object", '{"start_ms": 0}', "{}"),
        ("segments as an array of numbers", "[1, 2]", "{}"),
        ("a segment with an extra key", '[{"start_ms": 0, "end_ms": 1, "text": "x", "z": 1}]', "{}"),
        ("a segment ending before it starts", '[{"start_ms": 9, "end_ms": 1, "text": "x"}]', "{}"),
        ("a segment with fractional ms", '[{"start_ms": 0.5, "end_ms": 1, "text": "x"}]', "{}"),
        ("a segment with end_ms beyond bigint", '[{"start_ms": 0, "end_ms": 1e30, "text": "x"}]', "{}"),
        ("metadata as an array", _SEG_OK, "[1]"),
        ("metadata as a string", _SEG_OK, '"x"'),
        ("metadata as null JSON", _SEG_OK, "null"),
    ):
        s(Case(f"SQL put_object: {name}", _sql(_PUT_SQL, "1", seg_text, meta), "error"))
    s(Case("SQL put_object: version -5", _sql(_PUT_SQL, "-5", _SEG_OK, "{}"), "error"))
    s(Case("SQL put_object: version beyond bigint", _sql(_PUT_SQL, "9223372036854775808", _SEG_OK, "{}"), "error"))
    s(Case("SQL put_member: unknown status", _sql("select groundkit.put_member('zed', 'T1', %s)", "root"), "error"))
    s(Case("SQL put_member: NULL tier", _sql("select groundkit.put_member('zed', null)"), "error"))
    for ref in ("NaN", "infinity", "0", "-1"):
        s(Case(f"SQL reindex_impacts: avgdl_ref {ref}",
               _sql("select groundkit.reindex_impacts(%s::double precision)", ref), "error"))
    s(Case("reindex_impacts: avgdl_ref NaN", lambda g, _: g.reindex_impacts(avgdl_ref=float("nan")), "error"))
    s(Case("analyze_postings: reindex_at NaN", lambda g, _: g.analyze_postings(reindex_at=float("nan")), "error"))
    s(Case("SQL put_object: unknown content type", _sql(
        "select groundkit.put_object('b3', 1, %s, 'board', 'T0', 't', 'b')", "bogus"), "error"))
    return c


def _clear(exc: BaseException) -> bool:
    """A clear error: typed, with a message, and not one that blames the schema."""
    if isinstance(exc, GroundkitError):
        return bool(exc.message) and not isinstance(exc, MigrationError) and (
            isinstance(exc, InvalidArgument | VersionConflict))
    if isinstance(exc, psycopg.Error):
        state = exc.sqlstate or ""
        return state.startswith(("GK", "22"))
    return False


def _world(gk: Groundkit) -> None:
    gk.put_member("ana", "T1")
    gk.put_space("board", "T0")
    gk.put_object("p1", 1, "board_post", "board", "T0", "Kiln pricing", "kiln pricing notes")


def run_section(dbs: GateDatabases, tap: Tap, opts: Any) -> None:
    dsn = dbs.clone()
    try:
        _run(dsn, tap)
    finally:
        dbs.drop(dsn)


def _run(dsn: str, tap: Tap) -> None:
    with Groundkit.connect(dsn) as gk, connect_dict(dsn) as conn:
        _world(gk)
        for case in cases():
            tap.tally("bad_inputs_tried")
            before = _fingerprint(conn)
            problems: list[str] = []
            outcome = "answer"
            try:
                result = case.call(gk, conn)
            except Exception as exc:
                outcome = "error"
                state = getattr(exc, "sqlstate", None)
                label = f"{type(exc).__name__}{f' [{state}]' if state else ''}"
                if case.expect == "error" and not _clear(exc):
                    problems.append(f"unclear error {label}: {exc}")
                elif case.expect == "answer":
                    problems.append(f"expected an answer, got {label}: {exc}")
                detail = label
            else:
                detail = "answered"
                if case.expect == "error":
                    problems.append(f"accepted: {result!r}"[:300])
                elif case.check is not None and (p := case.check(result)):
                    problems.append(p)
            if _fingerprint(conn) != before:
                problems.append("the database changed")
            tap.check(not problems, f"bad input: {case.name} -> {detail}, nothing changed"
                      if outcome == "error" else f"hostile input: {case.name} -> answered, nothing changed",
                      problems, counts=Counts(bad_inputs_failed=1))
        _verbatim(gk, conn, tap)
    bad_dsns.run_checks(tap)


def _verbatim(gk: Groundkit, conn: psycopg.Connection[Any], tap: Tap) -> None:
    """SQL-injection strings in every free-text parameter are stored and returned verbatim."""
    problems = []
    tables = _fingerprint(conn)[3]
    for i, inj in enumerate(INJECTIONS):
        tap.tally("bad_inputs_tried")
        oid = f"inj{i} {inj}"
        try:
            gk.put_member(inj, "T1")
            gk.put_space(inj, "T0")
            gk.grant_space(inj, inj)
            r = gk.put_object(oid, 1, "member_note", inj, "T0", inj, f"needle{i} {inj}", owner_sub=inj,
                              owner_only=True, metadata={inj: inj})
            hits = gk.search(inj, f"needle{i}")
            row = conn.execute("select object_id, title, body, owner_sub, space_id, metadata from groundkit.content_log"
                               " where object_id = %s", (oid,)).fetchone()
            gk.revoke_space(inj, inj)
        except GroundkitError as exc:
            problems.append(f"{inj!r} was rejected: {exc}")
            continue
        if r.status.value != "applied" or [h.object_id for h in hits] != [oid] or hits[0].title != inj:
            problems.append(f"{inj!r}: not found verbatim by its owner ({r.status.value}, {hits})")
        if row is None or (row["title"], row["owner_sub"], row["space_id"], row["metadata"]) != (inj, inj, inj,
                                                                                                   {inj: inj}):
            problems.append(f"{inj!r}: the log row differs: {row}")
    if _fingerprint(conn)[3] != tables:
        problems.append("a table disappeared")
    tap.check(not problems, f"SQL-injection strings as member, space, object id, title, body, owner and metadata "
              f"are stored verbatim and every table is still there ({len(INJECTIONS)} strings)", problems,
              counts=Counts(bad_inputs_failed=len(problems)))

