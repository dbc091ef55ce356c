"""groundkit on a PostgreSQL without pgvector: Debian's PostgreSQL 15, where installed.

Checks the two promises about older servers: every non-dense feature works on PostgreSQL 15,
and nothing needs the `vector` extension. Skipped only where no PostgreSQL 15 server binaries
are installed (they are on groundkit's development and CI machines).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import groundkit
from groundkit import Groundkit, PgvectorMissing
from groundkit.dense import build_hnsw_indexes
from groundkit.errors import from_psycopg
from tests.governance_helpers import certify
from tests.test_search_hit import assert_every_search_returns_search_hit

PG15_BIN = Path("/usr/lib/postgresql/15/bin")


def _as_user(cmd: list[str]) -> list[str]:
    if os.geteuid() == 0:  # initdb refuses to run as root
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


@pytest.fixture(scope="module")
def pg15_dsn() -> Iterator[str]:
    if not (PG15_BIN / "initdb").exists() or (os.geteuid() == 0 and shutil.which("runuser") is None):
        pytest.skip("PostgreSQL 15 server binaries are not installed here")
    tmp = Path(tempfile.mkdtemp(prefix="gk-pg15-"))
    data = tmp / "data"
    if os.geteuid() == 0:
        shutil.chown(tmp, "postgres", "postgres")
    subprocess.run(_as_user([str(PG15_BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                             "-E", "UTF8", "--no-sync"]), check=True, capture_output=True)
    subprocess.run(_as_user([str(PG15_BIN / "pg_ctl"), "-D", str(data), "-w", "-l", str(tmp / "log"),
                             "-o", f"-h '' -k {tmp} -F", "start"]), check=True, capture_output=True)
    try:
        yield f"host={tmp} user=postgres dbname=postgres"
    finally:
        subprocess.run(_as_user([str(PG15_BIN / "pg_ctl"), "-D", str(data), "-w", "-m", "immediate", "stop"]),
                       capture_output=True)
        time.sleep(0.2)
        shutil.rmtree(tmp, ignore_errors=True)


def test_everything_but_dense_works_on_postgres_15_without_pgvector(pg15_dsn: str) -> None:
    state = groundkit.migrate(pg15_dsn, gate=False)
    assert state.up_to_date
    with Groundkit.connect(pg15_dsn) as gk:
        version = gk.conn.execute("select current_setting('server_version_num')::int as v").fetchone()
        assert version is not None and 150000 <= version["v"] < 160000
        assert gk.conn.execute("select groundkit.pgvector_available() as ok").fetchone() == {"ok": False}
        gk.put_member("ana", "T1")
        gk.put_member("bo", "T0")
        gk.put_space("commons")
        gk.put_object("p1", 1, "board_post", "commons", "T0", "Pricing", "How to price a commission")
        gk.put_object("p2", 1, "board_post", "commons", "T1", "Pricing, T1", "Price lists for commissions")
        assert {h.object_id for h in gk.search("ana", "price commission")} == {"p1", "p2"}
        assert {h.object_id for h in gk.search("bo", "price commission")} == {"p1"}
        assert gk.delete_object("p1", 1).status.value == "applied"
        assert gk.put_object("p1", 1, "board_post", "commons", "T0", "P", "x").status.value == "tombstoned"
        before = gk.state_checksum()
        gk.rebuild()
        assert gk.state_checksum() == before


def test_dense_commands_fail_with_gk008_and_status_says_unavailable(pg15_dsn: str) -> None:
    """Without pgvector: `groundkit embed`, dense and hybrid search fail with PgvectorMissing
    (GK008) and say what to do; `groundkit status` says dense search is unavailable, and is not
    an error (nor a --check breach); the worker's pass has no embedding step and no error."""
    import json
    import sys

    from groundkit.errors import PgvectorMissing

    cli = [sys.executable, "-c", "from groundkit.cli import app; app()"]
    groundkit.migrate(pg15_dsn, gate=False)
    with Groundkit.connect(pg15_dsn) as gk:
        gk.put_member("cy", "T0")
        gk.put_space("dense-commons")
        gk.put_object("d1", 1, "board_post", "dense-commons", "T0", "Kilns", "firing a kiln")
        for mode in ("dense", "hybrid"):
            with pytest.raises(PgvectorMissing, match="pgvector"):
                gk.search("cy", "kiln", mode=mode)
        assert [h.object_id for h in gk.search("cy", "kiln")] == ["d1"]
    for args in (["embed"], ["embed", "--model", "m"], ["dense", "enable"],
                 ["search", "kiln", "--as", "cy", "--mode", "dense"], ["models", "list"], ["cutover", "--model", "m"]):
        done = subprocess.run([*cli, *args, "--dsn", pg15_dsn], capture_output=True, text=True, timeout=120)
        assert done.returncode == 1, (args, done.stderr)
        assert "error [GK008]" in done.stderr and "pgvector" in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr
    certify(pg15_dsn)  # (status --check also alerts on an uncertified configuration)
    status = subprocess.run([*cli, "status", "--check", "--dsn", pg15_dsn], capture_output=True, text=True,
                            timeout=120)
    assert status.returncode == 0, status.stderr
    assert "dense search unavailable: this server has no pgvector" in status.stdout
    as_json = subprocess.run([*cli, "status", "--json", "--dsn", pg15_dsn], capture_output=True, text=True,
                             timeout=120)
    assert json.loads(as_json.stdout)["dense"] == {"available": False, "lag": [], "alerts": []}
    worker = subprocess.run([*cli, "worker", "--once", "--json", "--dsn", pg15_dsn], capture_output=True, text=True,
                            timeout=120)
    assert worker.returncode == 0, worker.stderr
    assert json.loads(worker.stdout)["error"] is None


def test_every_dense_function_raises_pgvector_missing_on_postgres_15(pg15_dsn: str) -> None:
    """GK008 from each dense function, named by the contract; the searches are stubs taking the
    query embedding as text (an untyped literal, as a client without pgvector's types sends it)."""
    groundkit.migrate(pg15_dsn, gate=False)
    calls = [
        "select groundkit.add_embedding_model('m', 'local', 3)",
        "select * from groundkit.list_embedding_models()",
        "select * from groundkit.active_embedding_model()",
        "select * from groundkit.embedding_lag()",
        "select * from groundkit.embedding_lag('m')",
        "select * from groundkit.embed_claim('m', 10)",
        "select groundkit.embed_store('m', array[]::bytea[], array[]::real[])",
        "select * from groundkit.cutover('m')",
        "select * from groundkit.hnsw_status('m')",
        "select * from groundkit.search_dense('ana', '[1, 0, 0]')",
        "select * from groundkit.search_hybrid('ana', 'price', '[1, 0, 0]')",
    ]
    with Groundkit.connect(pg15_dsn) as gk:
        for call in calls:
            with pytest.raises(PgvectorMissing):
                try:
                    gk.conn.execute(call)
                except psycopg.Error as exc:
                    raise from_psycopg(exc) from None
        # and the tables are there all the same: a later pgvector finds them
        row = gk.conn.execute("select count(*) as n from groundkit.embeddings").fetchone()
        assert row == {"n": 0}
    with pytest.raises(PgvectorMissing):
        with psycopg.connect(pg15_dsn, autocommit=True) as conn:
            build_hnsw_indexes(conn, "m")


def test_the_stubs_return_the_search_hit_type_too(pg15_dsn: str) -> None:
    """The GK008 stubs of search_dense and search_hybrid return `setof groundkit.search_hit`, as
    the pgvector functions do (revision 0032): one shape of a hit on every server."""
    groundkit.migrate(pg15_dsn, gate=False)
    with psycopg.connect(pg15_dsn) as conn:
        assert conn.execute("select groundkit.pgvector_available()").fetchone() == (False,)
        assert_every_search_returns_search_hit(conn)
        stub = conn.execute("select oid::regprocedure::text from pg_proc"
                            " where proname = 'search_dense' and pronamespace = 'groundkit'::regnamespace").fetchone()
    assert stub == ("groundkit.search_dense(text,text,integer,text[],text[],boolean,text)",)


def test_eval_quality_skips_the_dense_arms_without_pgvector(pg15_dsn: str, tmp_path: Path) -> None:
    """`groundkit eval quality` on PostgreSQL 15: the bm25 arm runs, dense and hybrid are skipped
    with the reason (GK008's message), nothing raised."""
    import json

    from groundkit.quality.harness import run_quality

    root = tmp_path / "tiny"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "title": "Kilns", "text": "Firing a kiln."}) + "\n"
                                       + json.dumps({"_id": "d2", "title": "Glazes", "text": "Mixing glaze."}) + "\n")
    (root / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "kiln firing"}) + "\n")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    skipped: list[tuple[str, str]] = []
    rows = run_quality(root, pg15_dsn, arms=("bm25", "dense", "hybrid"),
                       skipped=lambda arm, why: skipped.append((arm, why)), embedding_cache=tmp_path / "cache")
    assert [r.arm for r in rows] == ["bm25"] and rows[0].ndcg_10 == 1.0
    assert [a for a, _ in skipped] == ["dense", "hybrid"]
    assert all("pgvector" in why for _, why in skipped)
