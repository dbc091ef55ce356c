"""Search modes per content type (config.search_modes): what `auto` runs over each content type,
set by the owner, read by every search, never an error where it cannot run."""

from __future__ import annotations

import json
import subprocess
import sys

import psycopg
import pytest

from groundkit import Groundkit, embedding, model_swap
from groundkit.errors import InvalidArgument, UnknownContentType
from groundkit.models import SearchModeSetting
from tests.dense_fakes import FakeEmbeddings, add_fake_model

CLI = [sys.executable, "-c", "from groundkit.cli import app; app()"]


def _world(gk: Groundkit) -> None:
    gk.put_member("t0", "T0")
    gk.put_space("open", "T0")
    for i, text in enumerate(["kiln firing schedule for stoneware", "glaze recipes with iron oxide",
                              "throwing tall cylinders on the wheel", "pricing commissions for clients"]):
        gk.put_object(f"post-{i}", 1, "board_post", "open", "T0", f"post {i}", text)
        gk.put_object(f"talk-{i}", 1, "transcript", "open", "T0", f"talk {i}", f"we talked about {text}")


def _activate(gk: Groundkit, fake: FakeEmbeddings) -> None:
    from groundkit.embedders import embedder_for

    add_fake_model(gk, "fake", fake)
    m = embedding.get_model(gk, "fake")
    embedding.embed_pending(gk, m, embedder_for(m))
    model_swap.cutover(gk, "fake")


def test_set_search_mode_checks_its_arguments(gk: Groundkit) -> None:
    with pytest.raises(UnknownContentType):
        gk.set_search_mode("podcast", "bm25")
    with pytest.raises(InvalidArgument, match="mode must be auto, bm25, dense or hybrid"):
        gk.set_search_mode("board_post", "semantic")
    with pytest.raises(InvalidArgument, match="go with mode hybrid"):
        gk.set_search_mode("board_post", "bm25", dense_weight=2.0)
    for bad in ({"rrf_k": -1}, {"depth": 201}, {"depth": 0}, {"bm25_weight": -0.5}, {"fusion": "max"},
                {"dense_weight": float("inf")}):
        with pytest.raises(InvalidArgument):
            gk.set_search_mode("board_post", "hybrid", **bad)
    assert gk.search_modes() == {}  # nothing refused was stored
    with pytest.raises(psycopg.Error) as raised, gk.conn.cursor() as cur:
        cur.execute("select groundkit.set_search_mode('board_post', 'hybrid', depth => 500)")
    assert raised.value.sqlstate == "GK005"
    # the owner's own update is checked as well (trigger config_search_modes_guard)
    for bad_json in ('{"podcast": {"mode": "bm25"}}', '{"event": {"mode": "semantic"}}', '{"event": {}}',
                     '{"event": {"mode": "bm25", "rrf_k": 5}}', '{"event": {"mode": "hybrid", "depth": 0}}',
                     '{"event": {"mode": "hybrid", "rrf_k": 2.5}}', '{"event": {"mode": "hybrid", "colour": 1}}',
                     '{"event": {"mode": "hybrid", "dense_weight": -1}}', '[]'):
        with pytest.raises(psycopg.Error) as raised, gk.conn.cursor() as cur:
            cur.execute("update groundkit.config set search_modes = %s::jsonb", (bad_json,))
        assert raised.value.sqlstate == "GK005", bad_json
    with gk.conn.cursor() as cur:
        cur.execute("""update groundkit.config set search_modes = '{"event": {"mode": "hybrid", "rrf_k": 60}}'""")
    assert gk.search_modes() == {"event": SearchModeSetting(mode="hybrid", rrf_k=60)}


def test_settings_per_content_type_and_what_auto_runs(gk: Groundkit, fake: FakeEmbeddings) -> None:
    _world(gk)
    assert gk.auto_search_settings() == SearchModeSetting(mode="bm25", source="default")
    entry = gk.set_search_mode("transcript", "hybrid", dense_weight=2.0, rrf_k=60)
    assert entry == SearchModeSetting(mode="hybrid", rrf_k=60, dense_weight=2.0)
    assert gk.set_search_mode("board_post", "bm25") == SearchModeSetting(mode="bm25")
    assert gk.search_modes() == {"transcript": entry, "board_post": SearchModeSetting(mode="bm25")}
    # no active model: a hybrid setting cannot run here, and says so
    assert gk.auto_search_settings(["transcript"]) == SearchModeSetting(mode="bm25", source="fallback")
    _activate(gk, fake)
    assert gk.auto_search_settings(["transcript"]) == SearchModeSetting(
        mode="hybrid", rrf_k=60, dense_weight=2.0, source="content_type")
    assert gk.auto_search_settings(["board_post"]) == SearchModeSetting(mode="bm25", source="content_type")
    # types whose settings differ, or a search over every type: auto's built-in rule
    assert gk.auto_search_settings(["board_post", "transcript"]) == SearchModeSetting(mode="hybrid", source="mixed")
    assert gk.auto_search_settings(["event"]) == SearchModeSetting(mode="hybrid", source="default")
    assert gk._scalar("select groundkit.auto_search_mode() as m", {}) == "hybrid"
    # every type set alike: a search without content types runs that too
    for content_type in ("course_section", "board_post", "transcript", "event", "member_note", "document"):
        gk.set_search_mode(content_type, "bm25")
    assert gk.auto_search_settings() == SearchModeSetting(mode="bm25", source="content_type")
    assert gk._scalar("select groundkit.auto_search_mode() as m", {}) == "bm25"
    assert gk.set_search_mode("transcript", "auto") is None  # cleared: the built-in rule again
    assert "transcript" not in gk.search_modes()
    assert gk.auto_search_settings(["transcript"]).source == "default"


def test_auto_search_runs_the_content_types_setting(gk: Groundkit, fake: FakeEmbeddings) -> None:
    """A search in mode auto over transcripts runs hybrid with the transcript's weights; over
    board posts, BM25; the same hits as asking for those settings explicitly."""
    _world(gk)
    _activate(gk, fake)
    query = "glaze iron oxide kiln"
    gk.set_search_mode("transcript", "hybrid", dense_weight=4.0, rrf_k=5)
    gk.set_search_mode("board_post", "bm25")
    talks = gk.search("t0", query, k=8, content_types=["transcript"])
    assert talks == gk.search("t0", query, k=8, content_types=["transcript"], mode="hybrid", dense_weight=4.0,
                              rrf_k=5)
    assert talks != gk.search("t0", query, k=8, content_types=["transcript"], mode="hybrid")
    assert all(h.content_type == "transcript" and h.dense_rank is not None for h in talks)
    posts = gk.search("t0", query, k=8, content_types=["board_post"])
    assert posts == gk.search("t0", query, k=8, content_types=["board_post"], mode="bm25")
    assert all(h.bm25_rank is None and h.dense_rank is None for h in posts)
    # both types: their settings differ, so the built-in rule (hybrid with search_hybrid's defaults)
    both = gk.search("t0", query, k=8, content_types=["board_post", "transcript"])
    assert both == gk.search("t0", query, k=8, content_types=["board_post", "transcript"], mode="hybrid")


def test_a_reader_login_reads_the_setting_and_cannot_change_it(dsn: str, gk: Groundkit) -> None:
    gk.set_search_mode("transcript", "bm25")
    with psycopg.connect(dsn, autocommit=True) as owner:
        owner.execute("create role gk_modes_reader login password 'x' in role groundkit_reader")
    try:
        reader = psycopg.conninfo.make_conninfo(dsn, user="gk_modes_reader", password="x")
        with psycopg.connect(reader, autocommit=True) as conn:
            row = conn.execute("select mode, source from groundkit.auto_search_settings(array['transcript'])"
                               ).fetchone()
            assert row == ("bm25", "content_type")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("select groundkit.set_search_mode('transcript', 'dense')")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("select search_modes from groundkit.config")
    finally:
        with psycopg.connect(dsn, autocommit=True) as owner:
            owner.execute("drop role gk_modes_reader")


def test_cli_sets_and_lists_search_modes(dsn: str, gk: Groundkit) -> None:
    done = subprocess.run([*CLI, "config", "set-search-mode", "transcript", "hybrid", "--dense-weight", "1.5",
                           "--dsn", dsn], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "transcript: auto runs hybrid (dense_weight 1.5)" in " ".join(done.stdout.split())
    assert gk.search_modes() == {"transcript": SearchModeSetting(mode="hybrid", dense_weight=1.5)}
    shown = subprocess.run([*CLI, "config", "search-modes", "--json", "--dsn", dsn], capture_output=True, text=True,
                           timeout=120)
    assert shown.returncode == 0, shown.stderr
    rows = {r["content_type"]: r for r in map(json.loads, shown.stdout.splitlines())}
    assert rows["transcript"]["mode"] == "hybrid" and rows["transcript"]["dense_weight"] == 1.5
    assert rows["transcript"]["runs"] == "bm25" and rows["transcript"]["source"] == "fallback"  # no model here
    assert rows["event"]["mode"] is None and rows["event"]["runs"] == "bm25"
    bad = subprocess.run([*CLI, "config", "set-search-mode", "transcript", "bm25", "--rrf-k", "5", "--dsn", dsn],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "GK005" in bad.stderr + bad.stdout


def test_a_search_mode_change_carries_the_gates_certificate_over(dsn: str, gk: Groundkit) -> None:
    """The search modes are a component of the configuration the gate certifies
    (docs/governance.md), one no gate section tests: set through the CLI on a certified
    database, the change records a certified row of kind 'policy' resting on the certificate;
    set around the CLI (the Python API here) the configuration is uncertified until one is."""
    from psycopg.rows import dict_row

    from groundkit import deployment
    from tests.governance_helpers import certify

    def status() -> deployment.DeploymentStatus:
        with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
            return deployment.status(conn)

    assert status().config["search_modes"] is None
    basis = certify(dsn)
    done = subprocess.run([*CLI, "config", "set-search-mode", "transcript", "bm25", "--dsn", dsn],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"carries the certificate of ledger row {basis}" in " ".join(done.stdout.split())
    now = status()
    assert now.certified and now.kind == "policy" and now.ledger_id is not None and now.ledger_id > basis
    assert json.loads(now.config["search_modes"] or "null") == {"transcript": {"mode": "bm25"}}
    gk.set_search_mode("board_post", "hybrid", dense_weight=2.0)
    assert not status().certified
    assert deployment.carry_certificate(dsn, "test") is not None and status().certified


def test_a_component_the_database_does_not_list_yet_is_the_templates_default(
        server_dsn: str, template_db: str, dsn: str) -> None:
    """A database migrated by a groundkit from before the search modes joined the configuration
    lists no `search_modes`: what a gated migrate tests for it is the template's default (what the
    migration leaves there), so that the configuration it certifies is the one serving afterwards."""
    from psycopg.conninfo import make_conninfo
    from psycopg.rows import dict_row

    from groundkit import deployment
    from tests.conftest import drop_database, fresh_database

    older = fresh_database(server_dsn, template_db)
    try:
        with psycopg.connect(make_conninfo(server_dsn, dbname=older), autocommit=True, row_factory=dict_row) as real, \
                psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as template:
            real.execute("""create or replace function groundkit._configuration_data() returns jsonb
                            language sql stable set search_path = pg_catalog, pg_temp
                            as $$ select jsonb_build_object('embedding_model', null::text,
                                                            'outbound_policy', 'older') $$""")
            data = deployment._data_components(real, template)
    finally:
        drop_database(server_dsn, older)
    assert data["outbound_policy"] == "older" and "search_modes" in data and data["search_modes"] is None
