"""Issue 2, the redaction scrub: after redact_object the object's text is gone from search, from
every earlier log payload (the log keeps the events, their metadata and content hashes) and from
every derived row. Other objects are untouched."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from groundkit import Groundkit, WriteStatus

Raw = psycopg.Connection[tuple[Any, ...]]

SECRET_WORDS = ("xylophonist", "quetzalcoatl", "marzipanned", "zyzzyva")
SECRET_TITLE = "Xylophonist confession"
SECRET_BODY = "The quetzalcoatl marzipanned plan, shared with the garden club."
SHARED = "garden club"


def lexemes(raw: Raw, text: str) -> list[str]:
    return [r[0] for r in raw.execute("select lexeme from unnest(to_tsvector('groundkit.english', %s))",
                                      (text,)).fetchall()]


def secret_lexemes(raw: Raw) -> list[str]:
    return lexemes(raw, " ".join(SECRET_WORDS))


def rows_mentioning(raw: Raw, table: str, needles: list[str]) -> int:
    """How many rows of ``table``, rendered as text, contain any of ``needles``."""
    row = raw.execute(
        f"select count(*) from groundkit.{table} x"  # noqa: S608 - fixed table names
        " where exists (select 1 from unnest(%s::text[]) n where lower(x::text) like '%%' || lower(n) || '%%')",
        (needles,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def log_rows(raw: Raw, oid: str) -> list[dict[str, Any]]:
    cur = raw.cursor(row_factory=psycopg.rows.dict_row)
    return cur.execute("select * from groundkit.content_log where object_id = %s order by seq", (oid,)).fetchall()


@pytest.fixture(params=["merged", "pending"])
def written(community: Groundkit, request: pytest.FixtureRequest) -> Groundkit:
    """The objects below, with their postings merged into postings and term_stats, or still in
    the pending part (docs/bm25.md, "The pending part"): redaction scrubs either."""
    gk = community
    meta = {"source": "forum", "thread": 42}
    assert gk.put_object("secret", 1, "board_post", "open", "T0", SECRET_TITLE, SECRET_BODY,
                         metadata=meta).status is WriteStatus.APPLIED
    gk.retier_object("secret", 2, "T1")
    gk.put_object("secret", 3, "board_post", "open", "T1", SECRET_TITLE, SECRET_BODY + " Zyzzyva!",
                  metadata=meta)
    gk.put_object("talk", 1, "transcript", "open", "T0", "Talk", "",
                  segments=[{"start_ms": 0, "end_ms": 900, "text": "zyzzyva in the garden club"},
                            {"start_ms": 900, "end_ms": 1500, "text": "xylophonist tunes"}])
    gk.put_object("other", 1, "board_post", "open", "T0", "Garden club minutes",
                  "The garden club met on Tuesday.", metadata={"source": "forum"})
    if request.param == "merged":
        gk.merge_pending()
    return gk


def test_redaction_removes_text_from_search(written: Groundkit) -> None:
    gk = written
    assert {h.object_id for h in gk.search("t3", "xylophonist zyzzyva quetzalcoatl")} == {"secret", "talk"}
    assert gk.redact_object("secret", 4).status is WriteStatus.APPLIED
    assert gk.redact_object("talk", 2).status is WriteStatus.APPLIED
    for reader in ("t0", "t1", "t2", "t3"):
        assert gk.search(reader, " ".join(SECRET_WORDS)) == []
        assert [h.object_id for h in gk.search(reader, SHARED)] == ["other"]


def test_redaction_scrubs_every_log_payload(written: Groundkit, raw: Raw) -> None:
    gk = written
    before = {oid: log_rows(raw, oid) for oid in ("secret", "talk", "other")}
    assert rows_mentioning(raw, "content_log", list(SECRET_WORDS)) == 4
    gk.redact_object("secret", 4)
    gk.redact_object("talk", 2)
    for oid, payload_rows in (("secret", 3), ("talk", 1)):
        after = log_rows(raw, oid)
        assert len(after) == payload_rows + 1 and after[-1]["op"] == "redact"
        assert after[:-1] != before[oid]
        for old, new in zip(before[oid], after[:-1], strict=True):
            assert new["title"] is None and new["body"] is None and new["segments"] is None
            assert new["scrubbed"] is True
            # the event, its metadata and its content hash are kept
            for col in ("seq", "object_id", "version", "op", "content_type", "space_id", "tier_visibility",
                        "owner_sub", "owner_only", "metadata", "content_hash", "xact_id", "logged_at"):
                assert new[col] == old[col], col
        assert after[0]["metadata"] == ({"source": "forum", "thread": 42} if oid == "secret" else {})
        assert all(r["content_hash"] for r in after[:-1])
    assert rows_mentioning(raw, "content_log", list(SECRET_WORDS)) == 0
    assert rows_mentioning(raw, "content_log", ["quetzalcoatl", "confession"]) == 0
    assert log_rows(raw, "other") == before["other"]


DERIVED = ("objects", "chunks", "postings", "pending_postings", "term_stats", "scope_stats")


def derived_mentions(raw: Raw) -> dict[str, int]:
    needles = [*SECRET_WORDS, "confession", *secret_lexemes(raw)]
    return {table: rows_mentioning(raw, table, needles) for table in DERIVED}


def test_redaction_scrubs_every_derived_row(written: Groundkit, raw: Raw) -> None:
    gk = written
    mentions = derived_mentions(raw)
    pending = raw.execute("select exists (select 1 from groundkit.pending_postings)").fetchone()
    # the statistics of the text: in term_stats once merged, in the pending part's rows before
    assert mentions["chunks"] > 0 and mentions["pending_postings" if pending == (True,) else "term_stats"] > 0
    gk.redact_object("secret", 4)
    gk.redact_object("talk", 2)
    assert derived_mentions(raw) == dict.fromkeys(DERIVED, 0)
    for oid in ("secret", "talk"):
        row = raw.execute(
            "select state, title, content_type, space_id, metadata, content_hash from groundkit.objects"
            " where object_id = %s", (oid,)
        ).fetchone()
        assert row == ("redacted", None, None, None, None, None)
        chunks = raw.execute("select count(*) from groundkit.chunks where object_id = %s", (oid,)).fetchone()
        assert chunks == (0,)
    # a rebuild from the scrubbed log reproduces the same scrubbed state
    checksum = gk.state_checksum()
    gk.rebuild()
    assert gk.state_checksum() == checksum
    assert derived_mentions(raw) == dict.fromkeys(DERIVED, 0)


def test_redaction_by_another_connection_scrubs_statistics(written: Groundkit, dsn: str, raw: Raw) -> None:
    """The BM25 counters are sharded by backend; a redaction from a different connection than the
    one that wrote the object must still leave no counter row carrying the object's terms."""
    for attempt in range(4):  # different backends, so different shards, with high probability
        with Groundkit.connect(dsn) as other:
            oid = f"late-{attempt}"
            other.put_object(oid, 1, "board_post", "members", "T1", "Zyzzyva", "quetzalcoatl marzipanned")
        with Groundkit.connect(dsn) as redactor:
            redactor.redact_object(oid, 2)
    written.redact_object("secret", 4)
    written.redact_object("talk", 2)
    assert derived_mentions(raw) == dict.fromkeys(DERIVED, 0)
    # the statistics are still exactly those of a rebuild from the log
    checksum = written.state_checksum()
    written.rebuild()
    assert written.state_checksum() == checksum


def test_redaction_leaves_other_objects_untouched(written: Groundkit, raw: Raw) -> None:
    gk = written

    def other_state() -> tuple[Any, ...]:
        log = log_rows(raw, "other")
        obj = raw.execute("select * from groundkit.objects where object_id = 'other'").fetchall()
        chunks = raw.execute(
            "select chunk_seq, object_version, content, tsv::text, doc_len, stat_scope from groundkit.chunks"
            " where object_id = 'other' order by chunk_seq"
        ).fetchall()
        postings = raw.execute(
            "select p.term, p.tf from groundkit.postings p join groundkit.chunks c using (chunk_id)"
            " where c.object_id = 'other' order by 1"
        ).fetchall()
        return log, obj, chunks, postings

    before = other_state()
    gk.redact_object("secret", 4)
    gk.redact_object("talk", 2)
    assert other_state() == before
    hits = gk.search("t0", "garden club Tuesday")
    assert [(h.object_id, h.content) for h in hits] == [("other", "The garden club met on Tuesday.")]
