"""The postings' impact reference length: impact_drift(), index_status(), analyze recomputing
impacts that no longer fit the chunks, and ingest fixing the reference early in a first load
(docs/bm25.md, "The impact reference")."""

from __future__ import annotations

import json
import math
import random
import re
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from groundkit import Groundkit
from groundkit.cli import ingest as cli_ingest
from groundkit.cli.main import app
from groundkit.errors import GroundkitError, InvalidArgument

runner = CliRunner()

WORDS = ("kiln", "glaze", "clay", "wheel", "slip", "bisque", "stoneware", "porcelain", "celadon", "raku",
         "trimming", "wedging", "throwing", "firing", "cone", "reduction", "oxidation", "crackle", "shino",
         "tenmoku", "ash", "salt", "soda", "wood", "gas", "electric", "pyrometer", "kilnwash", "stilts")
QUERIES = ("kiln glaze", "raku firing reduction", "celadon porcelain wheel", "ash salt soda wood", "shino")


def _body(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def _write_long(gk: Groundkit, ids: range, n_words: int = 160) -> None:
    rng = random.Random(ids.start)
    for i in ids:
        gk.put_object(f"p{i}", 1, "board_post", "commons", ("T0", "T1", "T2")[i % 3], f"pots {i}",
                      _body(rng, n_words))


def _answers(gk: Groundkit) -> list[tuple[list[float], set[tuple[str, int]]]]:
    """Per query, the top 10's scores and, up to score ties, its chunks: those scored above the
    last one (strategies add the terms in different orders, so tied scores differ in the last
    bits and the tie order with them)."""
    got = []
    for q in QUERIES:
        hits = gk.search("reader", q, k=10)
        scores = [round(h.score, 6) for h in hits]
        got.append((scores, {(h.object_id, h.chunk_seq) for h in hits if round(h.score, 6) > scores[-1]}))
    return got


def _stored_imps_fit(gk: Groundkit) -> bool:
    row = gk.conn.execute(
        "select count(*) filter (where p.imp <>"
        "                        (p.tf / (p.tf + i.k1 * (1 - i.b + i.b * p.doc_len / i.avgdl_ref)))::real) as wrong,"
        "       count(*) as n from groundkit.postings p cross join groundkit.bm25_impact i").fetchone()
    assert row is not None and row["n"] > 0
    return bool(row["wrong"] == 0)


def _wait_gone(gk: Groundkit, pid: int) -> None:
    """Wait for a backend to exit: it lets go of its session locks a moment after its client left."""
    deadline = time.monotonic() + 30
    while gk.conn.execute("select 1 from pg_stat_activity where pid = %s", (pid,)).fetchone():
        assert time.monotonic() < deadline, "the recompute's backend did not exit"
        time.sleep(0.05)


def _cursor(gk: Groundkit) -> tuple[str | None, int | None, bool]:
    row = gk.conn.execute("select reindex_term, reindex_chunk, reindex_done from groundkit.bm25_impact").fetchone()
    assert row is not None
    return row["reindex_term"], row["reindex_chunk"], row["reindex_done"]


def _ref(gk: Groundkit) -> float:
    row = gk.conn.execute("select avgdl_ref from groundkit.bm25_impact").fetchone()
    assert row is not None
    return float(row["avgdl_ref"])


def test_analyze_recomputes_impacts_that_drifted(dsn: str) -> None:
    """Chunks of about 160 tokens against the new database's reference of 64: impact_drift() is
    their ratio and index_status() says so; analyze_postings() recomputes every impact at the
    chunks' length (not with reindex_at=None), after which the drift is 1; answers are the same
    throughout."""
    with Groundkit.connect(dsn) as gk:
        gk.put_space("commons")
        gk.put_member("reader", "T2")
        _write_long(gk, range(40))
        gk.merge_pending()
        st = gk.index_status()
        assert st.chunks == 40 and st.pending_postings == 0 and st.analyzed_at is None
        assert st.avgdl_ref == 64 and st.avgdl is not None and st.avgdl > 1.5 * 64
        assert st.impact_drift == pytest.approx(st.avgdl / 64) == gk.impact_drift()
        assert st.impacts_current
        before = _answers(gk)
        assert all(before)

        gk.analyze_postings(min_postings=1, reindex_at=None)
        assert _ref(gk) == 64 and gk.impact_drift() > 1.5
        gk.analyze_postings(min_postings=1)
        st = gk.index_status()
        assert st.avgdl is not None and st.avgdl_ref == pytest.approx(st.avgdl)
        assert st.impact_drift == pytest.approx(1.0)
        assert st.analyzed_at is not None and st.sketched_lists > 0 and st.bitted_terms > 0
        assert _stored_imps_fit(gk)
        assert _answers(gk) == before

        # a reference above the chunks' length drifts too, the other way; on an autocommit
        # connection the rewrite is vacuumed right away (searches right after it were slow)
        started = gk.conn.execute("select clock_timestamp() as t").fetchone()
        gk.reindex_impacts(avgdl_ref=3 * st.avgdl)
        assert gk.impact_drift() == pytest.approx(3.0)
        vacuumed = gk.conn.execute("select last_vacuum from pg_stat_user_tables"
                                   " where relid = 'groundkit.postings'::regclass").fetchone()
        assert started is not None and vacuumed is not None and vacuumed["last_vacuum"] is not None
        assert vacuumed["last_vacuum"] >= started["t"]
        assert _answers(gk) == before
        _write_long(gk, range(40, 45))  # pending: merged after the reindex, at the new reference
        assert gk.index_status().pending_postings > 0
        gk.analyze_postings()
        assert gk.impact_drift() == pytest.approx(1.0) and _stored_imps_fit(gk)
        assert gk.index_status().pending_postings == 0
        # within the threshold nothing is rewritten
        gk.reindex_impacts(avgdl_ref=1.4 * _ref(gk))
        ref = _ref(gk)
        gk.analyze_postings()
        assert _ref(gk) == ref


def test_status_and_analyze_after_k1_changes(dsn: str) -> None:
    """With config's k1 changed, search is exhaustive until the impacts are recomputed:
    impact_drift() is infinite, `groundkit status` says what is due (its JSON gives a null drift),
    `groundkit analyze --reindex-at 0` leaves the impacts alone and `groundkit analyze` recomputes
    them, after which search answers as the exhaustive scorer does."""
    with Groundkit.connect(dsn) as gk:
        gk.put_space("commons")
        gk.put_member("reader", "T2")
        _write_long(gk, range(30), n_words=60)
        gk.merge_pending()
    fresh = runner.invoke(app, ["status", "--dsn", dsn])
    assert fresh.exit_code == 0 and "due: the postings were never analyzed: the worker's next pass" in fresh.output
    with Groundkit.connect(dsn) as gk:
        gk.analyze_postings()
        assert gk.impact_drift() < 1.25
        # (a database whose k1 was updated directly before revision 0012, whose trigger now
        # refuses that: set_bm25() recomputes the impacts in the same transaction)
        with gk.conn.transaction():
            gk.conn.execute("alter table groundkit.config disable trigger config_bm25_guard")
            gk.conn.execute("update groundkit.config set bm25_k1 = 1.2")
            gk.conn.execute("alter table groundkit.config enable trigger config_bm25_guard")
        assert math.isinf(gk.impact_drift()) and not gk.index_status().impacts_current
        # postings at another k1 have no bound from a smaller reference: no recompute in steps,
        # and the refused one keeps no lock
        with pytest.raises(psycopg.Error, match="k1 or b changed") as refused:
            gk.conn.execute("select groundkit._reindex_begin()")
        assert refused.value.sqlstate == "GK005"
        assert gk.index_status().reindex_pid is None

    shown = runner.invoke(app, ["status", "--dsn", dsn])
    assert shown.exit_code == 0, shown.output
    assert "due: the postings were never analyzed" not in shown.output
    assert "chunks            30" in shown.output and "impacts at k1 0.9, b 0.4" in shown.output
    assert "due: search is exhaustive until the impacts are recomputed" in shown.output
    as_json = runner.invoke(app, ["status", "--json", "--dsn", dsn])
    assert as_json.exit_code == 0, as_json.output
    got: dict[str, Any] = json.loads(as_json.output)
    assert got["k1"] == 1.2 and got["impact_k1"] == 0.9 and got["impact_drift"] is None and got["chunks"] == 30

    kept = runner.invoke(app, ["analyze", "--reindex-at", "0", "--dsn", dsn])
    assert kept.exit_code == 0 and "recomputing" not in kept.output, kept.output
    with Groundkit.connect(dsn) as gk:
        assert not gk.index_status().impacts_current
    done = runner.invoke(app, ["analyze", "--dsn", dsn])
    assert done.exit_code == 0, done.output
    assert "recomputing the postings' impacts: the impacts were computed with k1 0.9, b 0.4, the configuration " \
           "says k1 1.2, b 0.4 (search is exhaustive until then); in one transaction" \
           in " ".join(done.output.split())  # (rich wraps long lines)
    with Groundkit.connect(dsn) as gk:
        st = gk.index_status()
        assert st.impacts_current and st.impact_k1 == 1.2 and st.impact_drift == pytest.approx(1.0)
        assert _stored_imps_fit(gk)
        _exhaustive_agrees(gk)
    shown = runner.invoke(app, ["status", "--dsn", dsn])
    assert shown.exit_code == 0 and "due:" not in shown.output, shown.output


def _jsonl(path: Path, ids: range, n_words: int = 160) -> Path:
    rng = random.Random(ids.start)
    with path.open("w") as f:
        for i in ids:
            f.write(json.dumps({"object_id": f"f{i}", "version": 1, "content_type": "board_post",
                                "space_id": "commons", "tier_visibility": "T0", "title": f"pots {i}",
                                "body": _body(rng, n_words)}) + "\n")
    return path


def test_ingest_fixes_the_reference_early(dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A load that wrote at least half the database's chunks recomputes the impacts after its
    first EARLY_REINDEX_OBJECTS objects if the reference is off, so the rest of it is written at
    the chunks' length; a small load into a larger database leaves that to analyze."""
    monkeypatch.setattr(cli_ingest, "EARLY_REINDEX_OBJECTS", 10)
    with Groundkit.connect(dsn) as gk:
        gk.put_space("commons")
    first = runner.invoke(app, ["ingest", str(_jsonl(tmp_path / "a.jsonl", range(30))), "--batch", "5",
                                "--no-analyze", "--dsn", dsn])
    assert first.exit_code == 0, first.output
    assert "recomputing the postings' impacts: the chunks average" in " ".join(first.output.split())
    with Groundkit.connect(dsn) as gk:
        assert _ref(gk) != 64 and gk.impact_drift() < 1.25  # set from the first 10 objects
        assert _stored_imps_fit(gk)
        gk.reindex_impacts(avgdl_ref=20.0)
    # 12 objects into 30: past EARLY_REINDEX_OBJECTS, but not half the database
    second = runner.invoke(app, ["ingest", str(_jsonl(tmp_path / "b.jsonl", range(30, 42))), "--batch", "5",
                                 "--no-analyze", "--dsn", dsn])
    assert second.exit_code == 0 and "recomputing" not in second.output, second.output
    with Groundkit.connect(dsn) as gk:
        assert _ref(gk) == 20.0


def test_imp_bounds_hold(raw: Any) -> None:
    """_imp_ub bounds a reader's tf-part from the stored impact at any reference length, never
    looser than the factor avgdl / avgdl_ref it replaced, and _imp_cut is its inverse: over a
    grid of tf, chunk lengths, k1, b, reference and reader lengths (both sides of the reference).
    """
    row = raw.execute("""
        with g as (
            select tf, dl, k1, b, r, a, least(1.0, r / a) as rho,
                   groundkit._impact(tf, dl, k1, b, r)::double precision as s,
                   tf / (tf + k1 * (1 - b + b * dl / a)) as t
              from generate_series(1, 40, 3) tf,
                   generate_series(1, 600, 7) dl,
                   unnest(array[0.5, 0.9, 1.2, 2.0]) k1,
                   unnest(array[0.0, 0.4, 0.75, 1.0]) b,
                   unnest(array[16.0, 64.0]) r,
                   unnest(array[0.5, 1.0, 1.25, 2.0, 4.0]) m,
                   lateral (select r * m as a) x
             where dl >= tf)
        select count(*) as n,
               count(*) filter (where t > groundkit._imp_ub(s, rho)) as unbounded,
               count(*) filter (where groundkit._imp_ub(s, rho) > s / rho * (1 + 1e-6) * (1 + 1e-12)) as looser,
               count(*) filter (where abs(groundkit._imp_cut(groundkit._imp_ub(s, rho), rho) - s) > 1e-9)
                   as not_inverse,
               count(*) filter (where rho < 1 and groundkit._imp_ub(s, rho) < s / rho * 0.95) as tighter
          from g""").fetchone()
    assert row is not None
    assert row[0] > 100_000 and row[1] == 0 and row[2] == 0 and row[3] == 0, row
    assert row[4] > row[0] / 4, row  # most bounds below the old factor by 5 % or more where it applied
    assert raw.execute("select groundkit._imp_cut(3.0, 0.5) = 'infinity', groundkit._imp_cut(-0.5, 0.5) < 0,"
                       " groundkit._imp_ub(0.5, 1.0) = 0.5 * (1 + 1e-6)").fetchone() == (True, True, True)


def _exhaustive_agrees(gk: Groundkit) -> None:
    """search answers every query as the exhaustive scorer does (scores, and chunks up to ties)."""
    for q, (scores, above) in zip(QUERIES, _answers(gk), strict=True):
        exhaustive = gk.conn.execute(
            "select c.object_id, c.chunk_seq, e.score"
            "  from groundkit._search_exhaustive('reader', %s, 10) e join groundkit.chunks c using (chunk_id)"
            " order by e.score desc", (q,)).fetchall()
        assert scores == [round(r["score"], 6) for r in exhaustive]
        assert above == {(r["object_id"], r["chunk_seq"]) for r in exhaustive if round(r["score"], 6) > scores[-1]}


def _mixed(gk: Groundkit) -> tuple[int, int]:
    """(postings at avgdl_ref, postings at another reference)."""
    row = gk.conn.execute(
        "select count(*) filter (where p.imp = groundkit._impact(p.tf, p.doc_len, i.k1, i.b, i.avgdl_ref)) as at,"
        "       count(*) filter (where p.imp <> groundkit._impact(p.tf, p.doc_len, i.k1, i.b, i.avgdl_ref)) as off"
        "  from groundkit.postings p cross join groundkit.bm25_impact i").fetchone()
    assert row is not None
    return int(row["at"]), int(row["off"])


def test_reindex_in_steps_matches_one_transaction(dsn: str) -> None:
    """On an autocommit connection reindex_impacts() works in steps of whole terms, reports its
    progress after each, and ends where the one-transaction reindex_impacts() would: the same
    derived state, every impact at the new reference, none at an older one, search unchanged."""
    with Groundkit.connect(dsn) as gk:
        gk.put_space("commons")
        gk.put_member("reader", "T2")
        _write_long(gk, range(40))
        gk.conn.execute("update groundkit.config set sketch_min_postings = 1")  # (the recompute sketches)
        gk.analyze_postings(reindex_at=None)
        before = _answers(gk)
        n_postings = gk.conn.execute("select count(*) as n from groundkit.postings").fetchone()
        assert n_postings is not None
        seen: list[tuple[int, int]] = []
        rewritten = gk.reindex_impacts(progress=lambda done, total: seen.append((done, total)), step_postings=7)
        assert len(seen) > 3 and seen == sorted(seen) and seen[-1][0] == n_postings["n"] == rewritten
        assert all(done <= total for done, total in seen)
        st = gk.index_status()
        assert st.avgdl is not None and st.avgdl_ref == pytest.approx(st.avgdl)
        assert st.avgdl_ref_min is None and st.reindex_pid is None and not st.reindex_unfinished
        assert st.impact_drift == pytest.approx(1.0) and _stored_imps_fit(gk)
        assert _answers(gk) == before
        in_steps = gk.state_checksum()
        sketches = gk.conn.execute("select count(*) as n from groundkit.postings_sketch").fetchone()
        assert sketches is not None and sketches["n"] > 0
        gk.conn.execute("select groundkit.reindex_impacts(%s)", (st.avgdl_ref,))
        assert gk.state_checksum() == in_steps
        # at the reference they are at, the steps rewrite nothing
        assert gk.reindex_impacts(avgdl_ref=st.avgdl_ref, step_postings=7) == 0
        with pytest.raises(InvalidArgument, match="step_postings"):
            gk.reindex_impacts(step_postings=0)


def test_writers_do_not_wait_for_a_recompute_in_steps(dsn: str) -> None:
    """Between two steps a recompute holds no lock on the postings: a merge and the replacement
    of merged chunks go through at once (lock_timeout 2 s), with impacts at the new reference;
    a second recompute is refused while the first runs; search stays exact with postings at
    both references; the last step leaves every posting at the new one."""
    with Groundkit.connect(dsn) as gk:
        gk.put_space("commons")
        gk.put_member("reader", "T2")
        _write_long(gk, range(40))
        gk.merge_pending()
        old_ref = _ref(gk)
        with psycopg.connect(dsn, autocommit=True) as steps:
            ref = steps.execute("select groundkit._reindex_begin()").fetchone()
            assert ref is not None and ref[0] > 1.5 * old_ref
            row = steps.execute("select * from groundkit._reindex_step(200)").fetchone()
            assert row is not None and row[0] is not None and row[2] == 200 and row[3] > 0
            at, off = _mixed(gk)
            assert at > 0 and off > 0
            st = gk.index_status()
            assert st.avgdl_ref == ref[0] and st.avgdl_ref_min == old_ref
            assert st.reindex_pid is not None and not st.reindex_unfinished
            _exhaustive_agrees(gk)

            with psycopg.connect(dsn, autocommit=True) as writer:
                writer.execute("set lock_timeout = '2s'")
                _write_long(gk, range(40, 45))
                assert writer.execute("select groundkit.merge_pending()").fetchone() != (0,)
                writer.execute("select groundkit.put_object(object_id => 'p3', version => 2,"
                               " content_type => 'board_post', space_id => 'commons', tier_visibility => 'T0',"
                               " title => 'pots again', body => 'kiln kiln glaze celadon raku')")
            written = gk.conn.execute(
                "select count(*) filter (where p.imp <> groundkit._impact(p.tf, p.doc_len, i.k1, i.b, %s)) as off,"
                "       count(*) as n"
                "  from groundkit.postings p join groundkit.chunks c on c.chunk_id = p.chunk_id"
                "  cross join groundkit.bm25_impact i"
                " where c.object_id in ('p3', 'p40', 'p41', 'p42', 'p43', 'p44')", (ref[0],)).fetchone()
            assert written is not None and written["n"] > 0 and written["off"] == 0
            _exhaustive_agrees(gk)

            with pytest.raises(GroundkitError, match="another session is recomputing") as refused:
                gk.reindex_impacts()
            assert refused.value.sqlstate == "55P03"
            # the one-transaction form too: both would hold SHARE on the postings and wait for
            # each other to update them
            with pytest.raises(psycopg.Error, match="another session is recomputing") as one_tx:
                gk.conn.execute("select groundkit.reindex_impacts()")
            assert one_tx.value.sqlstate == "55P03"
            for call in ("select groundkit._reindex_end()", "select * from groundkit._reindex_step(200)"):
                with pytest.raises(psycopg.Error, match="not recomputing") as not_begun:
                    gk.conn.execute(call)
                assert not_begun.value.sqlstate == "GK005"
            # the session that began may not end before the last step: postings after the
            # steps' position are still at the older reference
            with pytest.raises(psycopg.Error, match="steps left") as early:
                steps.execute("select groundkit._reindex_end()")
            assert early.value.sqlstate == "GK005"
            st = gk.index_status()
            assert st.avgdl_ref_min == old_ref and st.reindex_pid == steps.info.backend_pid

            after = row[:2]
            while after[0] is not None:
                nxt = steps.execute("select * from groundkit._reindex_step(200)").fetchone()
                assert nxt is not None
                after = nxt[:2]
            steps.execute("select groundkit._reindex_end()")
        st = gk.index_status()
        assert st.avgdl_ref_min is None and st.reindex_pid is None
        assert _stored_imps_fit(gk) and _mixed(gk)[1] == 0
        _exhaustive_agrees(gk)


def test_an_interrupted_recompute_is_resumed_by_analyze(dsn: str) -> None:
    """A recompute whose session died leaves postings at two references: search stays exact
    (bounding them with the smaller), `groundkit status` says it is due, and analyze resumes
    it, at its own reference, even where the drift alone would not call for it."""
    with Groundkit.connect(dsn) as gk:
        gk.put_space("commons")
        gk.put_member("reader", "T2")
        _write_long(gk, range(40))
        gk.analyze_postings(min_postings=1)  # the reference fits: drift 1
        fitted = _ref(gk)
        before = _answers(gk)
        with psycopg.connect(dsn, autocommit=True) as steps:
            steps.execute("select groundkit._reindex_begin(%s)", (1.3 * fitted,))
            steps.execute("select * from groundkit._reindex_step(300)")
            pid = steps.info.backend_pid
        _wait_gone(gk, pid)
        st = gk.index_status()
        assert st.reindex_unfinished and st.avgdl_ref_min == pytest.approx(fitted)
        assert st.impact_drift < 1.5  # the drift alone would leave it
        assert _mixed(gk)[1] > 0
        assert _answers(gk) == before
        _exhaustive_agrees(gk)
    shown = runner.invoke(app, ["status", "--dsn", dsn])
    assert shown.exit_code == 0, shown.output
    assert "recompute         interrupted" in shown.output
    assert "due: the impacts' recompute was interrupted: the worker's next pass" in shown.output
    done = runner.invoke(app, ["analyze", "--dsn", dsn])
    assert done.exit_code == 0, done.output
    assert "resuming an interrupted recompute where its steps stopped" in " ".join(done.output.split())
    with Groundkit.connect(dsn) as gk:
        st = gk.index_status()
        assert st.avgdl_ref_min is None and not st.reindex_unfinished
        # (the interrupted recompute's reference, which analyze resumed; its drift is below 1.5)
        assert st.avgdl_ref == pytest.approx(1.3 * fitted) and _stored_imps_fit(gk)
        assert _answers(gk) == before


def test_a_recompute_resumes_where_its_steps_stopped(dsn: str) -> None:
    """The steps keep their position in bm25_impact (revision 0010). A recompute whose session
    died resumes after the last range it finished, at its own reference, and counts that range
    as done in its progress; begun at another reference, it starts over from the first posting.
    The position exists only while a recompute is unfinished (a check constraint), and a
    reference that is not a positive finite number is refused before anything changes."""
    with Groundkit.connect(dsn) as gk:
        gk.put_space("commons")
        gk.put_member("reader", "T2")
        _write_long(gk, range(40))
        gk.analyze_postings(min_postings=1)
        fitted = _ref(gk)
        count = gk.conn.execute("select count(*) as n from groundkit.postings").fetchone()
        assert count is not None and count["n"] > 1000
        n = int(count["n"])
        before = _answers(gk)
        assert _cursor(gk) == (None, None, False)

        with psycopg.connect(dsn, autocommit=True) as steps:
            steps.execute("select groundkit._reindex_begin(%s)", (1.3 * fitted,))
            first = steps.execute("select * from groundkit._reindex_step(300)").fetchone()
            assert first is not None and first[2] == 300 and _cursor(gk) == (first[0], first[1], False)
            # begun again with no reference (or its own): the same recompute, the same position
            again = steps.execute("select groundkit._reindex_begin()").fetchone()
            assert again is not None and again[0] == pytest.approx(1.3 * fitted)
            assert _cursor(gk) == (first[0], first[1], False)
            pid = steps.info.backend_pid
        _wait_gone(gk, pid)
        st = gk.index_status()
        assert st.reindex_unfinished and st.reindex_share is None  # (the postings were never analyzed)
        gk.conn.execute("analyze groundkit.postings")
        st = gk.index_status()
        assert st.reindex_share is not None and 0 < st.reindex_share < 1  # (300 of n)
        shown = runner.invoke(app, ["status", "--dsn", dsn])
        assert shown.exit_code == 0, shown.output
        assert re.search(r"recompute\s+interrupted \(about \d+% of the postings done\)", shown.output), shown.output

        seen: list[int] = []
        rewritten = gk.reindex_impacts(progress=lambda done, total: seen.append(done), step_postings=100)
        assert seen[0] == 400 and seen[-1] == n  # the first 300 were not read again
        assert 0 < rewritten <= n - 300
        st = gk.index_status()
        assert st.avgdl_ref == pytest.approx(1.3 * fitted) and st.avgdl_ref_min is None
        assert _stored_imps_fit(gk) and _cursor(gk) == (None, None, False) and st.reindex_share is None
        assert _answers(gk) == before

        with psycopg.connect(dsn, autocommit=True) as steps:
            steps.execute("select groundkit._reindex_begin(%s)", (fitted,))
            steps.execute("select * from groundkit._reindex_step(300)")
            assert _cursor(gk)[0] is not None
            # another reference: from the first posting, bounded by the smallest of all three
            steps.execute("select groundkit._reindex_begin(%s)", (2 * fitted,))
            assert _cursor(gk) == (None, None, False)
            st = gk.index_status()
            assert st.avgdl_ref == pytest.approx(2 * fitted) and st.avgdl_ref_min == pytest.approx(fitted)
            _exhaustive_agrees(gk)
            for bad in (0.0, -1.0, float("nan"), float("inf")):
                for call in ("select groundkit._reindex_begin(%s)", "select groundkit.reindex_impacts(%s)"):
                    with pytest.raises(psycopg.Error, match="positive and finite") as refused:
                        steps.execute(call, (bad,))
                    assert refused.value.sqlstate == "GK005"
            assert _cursor(gk) == (None, None, False)
            assert gk.index_status().avgdl_ref == pytest.approx(2 * fitted)
            pid = steps.info.backend_pid
        _wait_gone(gk, pid)
        assert gk.reindex_impacts() == n  # every posting was at fitted or 1.3 fitted
        assert _stored_imps_fit(gk) and gk.index_status().avgdl_ref == pytest.approx(2 * fitted)

        # no position without a recompute, and no reference that is not a finite number, whoever
        # writes the row
        for change in ("reindex_done = true", "reindex_term = 'kiln', reindex_chunk = 1", "reindex_term = 'kiln'",
                       "avgdl_ref = 'NaN'", "avgdl_ref = 'infinity'"):
            with pytest.raises(psycopg.errors.CheckViolation):
                gk.conn.execute("update groundkit.bm25_impact set " + change)  # noqa: S608 (constants)
        with pytest.raises(InvalidArgument, match="positive and finite"):
            gk.reindex_impacts(avgdl_ref=float("nan"))
        assert _cursor(gk) == (None, None, False) and gk.index_status().reindex_pid is None


def test_search_bounds_postings_at_the_older_reference(dsn: str) -> None:
    """Right after a recompute in steps began, every posting is still at the old reference (here
    far below the chunks' length: stored impacts well under the reader's tf-parts) while
    avgdl_ref names the new one. Every pruned strategy must bound them with avgdl_ref_min, or it
    stops before chunks that belong in the top k."""
    from tests.test_search_exact import STRATEGIES

    with Groundkit.connect(dsn) as gk:
        gk.put_space("commons")
        gk.put_member("reader", "T2")
        rng = random.Random(5)
        for i in range(60):
            # lengths from 5 to 400 words, and a few terms repeated in some: tf-parts that a
            # bound at the wrong reference puts in the wrong order
            words = [rng.choice(WORDS[:8]) for _ in range(rng.choice((5, 20, 80, 400)))]
            words += [WORDS[i % 12]] * rng.randint(0, 6)
            gk.put_object(f"v{i}", 1, "board_post", "commons", "T0", "", " ".join(words))
        gk.merge_pending()
        gk.conn.execute("select groundkit.reindex_impacts(2.0)")
        gk.conn.execute("select groundkit._reindex_begin(1000.0)")
        assert _mixed(gk)[0] == 0
        for q in ("kiln", "kiln glaze", "clay wheel slip", "bisque stoneware porcelain kiln", "glaze slip"):
            want = gk.conn.execute(
                "select e.chunk_id, e.score from groundkit._search_exhaustive('reader', %s, 5) e"
                " order by e.score desc, e.chunk_id", (q,)).fetchall()
            for extra in STRATEGIES:
                got = gk.conn.execute(
                    "select r.chunk_id, r.score from groundkit._search_pruned('reader', %s, 5"  # noqa: S608
                    + extra + ") r order by r.score desc, r.chunk_id", (q,)).fetchall()
                assert [round(r["score"], 9) for r in got] == [round(r["score"], 9) for r in want], (q, extra)
        gk.conn.execute("select groundkit._reindex_release()")


def test_a_step_waits_for_a_writer_instead_of_deadlocking(dsn: str) -> None:
    """A writer that replaces merged chunks deletes their postings across many terms in no
    particular order; a step rewrites a range of the postings in key order. With row locks
    alone the two deadlocked (seen at 1M chunks): the writer holds a later object's rows, the
    step takes the earlier rows of the range and waits on the writer's, and the writer's next
    replacement wants one of the step's. A step takes SHARE on the postings, so it waits for the
    writer's transaction, and both go through."""
    import threading

    with Groundkit.connect(dsn) as gk:
        gk.put_space("commons")
        gk.put_member("reader", "T2")
        _write_long(gk, range(40))
        gk.merge_pending()
    done: dict[str, Any] = {}
    with psycopg.connect(dsn, autocommit=True) as steps, psycopg.connect(dsn) as writer:
        steps.execute("select groundkit._reindex_begin(500.0)")
        writer.execute("select groundkit.retier_object('p30', 2, 'T1')")  # holds p30's postings

        def step() -> None:
            try:
                done["row"] = steps.execute("select * from groundkit._reindex_step(1000000)").fetchone()
            except psycopg.Error as exc:
                done["error"] = exc
            done["at"] = time.monotonic()

        t = threading.Thread(target=step)
        t.start()
        time.sleep(0.5)
        assert t.is_alive(), "the step did not wait for the writer"
        writer.execute("select groundkit.retier_object('p3', 2, 'T1')")  # p3's postings come first
        committed = time.monotonic()
        writer.commit()
        t.join(30)
        assert not t.is_alive() and "error" not in done, done
        assert done["at"] >= committed and done["row"][3] > 0
        steps.execute("select groundkit._reindex_end()")
    with Groundkit.connect(dsn) as gk:
        assert _stored_imps_fit(gk) and gk.index_status().avgdl_ref_min is None
        _exhaustive_agrees(gk)
