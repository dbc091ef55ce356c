"""The dense arm's SQL (docs/dense.md) on real pgvector: embeddings by content hash, the worker's
claim and store, the lag, cutover, and the dense leg's permission predicate and completeness.

Vectors come from the gate's test double (groundkit.gate.dense_double: word hashing, no model)
and are written through embed_claim / embed_store, as the worker writes them.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import psycopg
import pytest
from psycopg import sql

from groundkit import Groundkit
from groundkit.dense import build_hnsw_indexes
from groundkit.errors import from_psycopg
from groundkit.gate.dense_double import DIMENSION, embed, embed_pending, vector_literal

MODEL = "double"


def run(gk: Groundkit, query: Any, params: Any = None) -> list[dict[str, Any]]:
    """A statement on gk's connection, its errors mapped to groundkit's classes (as the client maps them)."""
    try:
        cur = gk.conn.execute(query, params)
        return cur.fetchall() if cur.description else []
    except psycopg.Error as exc:
        raise from_psycopg(exc) from None


def add_model(gk: Groundkit, name: str = MODEL, recipe: str = "titled", dimension: int = DIMENSION) -> None:
    gk.conn.execute("select groundkit.add_embedding_model(%s, 'local', %s, 'cosine', %s, '{}')",
                    (name, dimension, recipe))


@pytest.fixture
def dense(community: Groundkit) -> Groundkit:
    add_model(community)
    community.conn.execute("select * from groundkit.cutover(%s)", (MODEL,))
    return community


def lag(gk: Groundkit, model: str = MODEL) -> int:
    row = gk.conn.execute("select missing from groundkit.embedding_lag(%s)", (model,)).fetchone()
    assert row is not None
    return int(row["missing"])


def n_embeddings(gk: Groundkit, model: str = MODEL) -> int:
    row = gk.conn.execute("select count(*) as n from groundkit.embeddings where model = %s", (model,)).fetchone()
    assert row is not None
    return int(row["n"])


def search_dense(gk: Groundkit, reader: str, text: str, k: int = 10, exact: bool = False,
                 **kw: Any) -> list[dict[str, Any]]:
    return run(gk, "select * from groundkit.search_dense(%s, %s::vector, %s, %s, %s, %s)",
               (reader, vector_literal(embed(text)), k, kw.get("content_types"), kw.get("space_ids"), exact))


def hits(rows: list[dict[str, Any]]) -> list[tuple[str, int, int]]:
    return [(r["object_id"], r["object_version"], r["chunk_seq"]) for r in rows]


def put(gk: Groundkit, oid: str, version: int, space: str, tier: str, title: str, body: str, **kw: Any) -> None:
    gk.put_object(oid, version, "board_post", space, tier, title, body, **kw)


# -- embeddings by content hash ---------------------------------------------------------------


def test_hash_reuse_across_retier_move_and_unchanged_new_version(dense: Groundkit) -> None:
    put(dense, "a", 1, "open", "T0", "Kilns", "How to fire a kiln slowly")
    assert embed_pending(dense.conn, MODEL) == 1
    before = dense.conn.execute("select content_hash, created_at from groundkit.embeddings").fetchall()
    dense.retier_object("a", 2, "T1")
    assert lag(dense) == 0
    put(dense, "a", 3, "members", "T1", "Kilns", "How to fire a kiln slowly")  # moved, same text
    assert lag(dense) == 0
    put(dense, "a", 4, "members", "T1", "Kilns", "How to fire a kiln slowly")  # unchanged new version
    assert lag(dense) == 0
    assert embed_pending(dense.conn, MODEL) == 0
    assert dense.conn.execute("select content_hash, created_at from groundkit.embeddings").fetchall() == before
    assert hits(search_dense(dense, "t1", "kiln")) == [("a", 4, 0)]
    # the hash is of the exact text the recipe embeds
    row = dense.conn.execute("select c.embed_hash_titled = sha256(convert_to(%s, 'UTF8')) as same,"
                             " c.embed_hash_text = sha256(convert_to(%s, 'UTF8')) as same_text"
                             " from groundkit.chunks c where c.object_id = 'a'",
                             ("Kilns\nHow to fire a kiln slowly", "How to fire a kiln slowly")).fetchone()
    assert row == {"same": True, "same_text": True}


def test_old_versions_embedding_is_never_served(dense: Groundkit) -> None:
    put(dense, "a", 1, "open", "T0", "Glazes", "celadon glaze recipe with iron")
    embed_pending(dense.conn, MODEL)
    put(dense, "a", 2, "open", "T0", "Glazes", "shino glaze with feldspar")
    # v1's embedding is still stored, but no current chunk has its hash: not served
    assert n_embeddings(dense) == 1 and lag(dense) == 1
    assert search_dense(dense, "t0", "celadon glaze recipe with iron", exact=True) == []
    assert search_dense(dense, "t0", "celadon glaze recipe with iron") == []
    embed_pending(dense.conn, MODEL)
    assert hits(search_dense(dense, "t0", "celadon glaze")) == [("a", 2, 0)]


def test_rebuild_recomputes_the_hashes_and_the_checksum_covers_them(dense: Groundkit) -> None:
    put(dense, "a", 1, "open", "T0", "Clay", "stoneware clay bodies")
    put(dense, "b", 1, "open", "T0", "Clay", "porcelain clay bodies")
    embed_pending(dense.conn, MODEL)
    before = dense.state_checksum()
    dense.rebuild()
    assert dense.state_checksum() == before
    assert lag(dense) == 0
    dense.conn.execute("update groundkit.chunks set embed_hash_text = sha256('x') where object_id = 'a'")
    assert dense.state_checksum() != before


# -- the worker ---------------------------------------------------------------------------------


def test_lag_counts_exactly_and_an_unembedded_chunk_is_never_returned(dense: Groundkit) -> None:
    for i in range(30):
        put(dense, f"o{i}", 1, "open", "T0", f"Post {i}", f"pottery wheel note number {i}")
    assert lag(dense) == 30
    dense.conn.execute("select groundkit.embed_store(%s, %s::bytea[], %s::real[])", (
        MODEL, [r["content_hash"] for r in dense.conn.execute(
            "select content_hash, text from groundkit.embed_claim(%s, 7)", (MODEL,)).fetchall()],
        [[1.0] + [0.0] * (DIMENSION - 1) for _ in range(7)]))
    assert lag(dense) == 23
    row = dense.conn.execute("select * from groundkit.embedding_lag()").fetchone()
    assert row is not None and row["name"] == MODEL and row["chunks"] == 30 and row["missing"] == 23
    assert row["oldest"] is not None and row["age"] is not None
    got = search_dense(dense, "t0", "pottery wheel", k=200, exact=True)
    assert len(got) == 7  # only the embedded ones
    embedded = {r["object_id"] for r in got}
    assert embedded == {r["object_id"] for r in search_dense(dense, "t0", "pottery wheel", k=200)}
    embed_pending(dense.conn, MODEL)
    assert lag(dense) == 0
    assert dense.conn.execute("select * from groundkit.embedding_lag()").fetchone()["oldest"] is None  # type: ignore[index]
    assert len(search_dense(dense, "t0", "pottery wheel", k=200)) == 30


def test_concurrent_claims_by_two_connections_never_overlap(dense: Groundkit, dsn: str) -> None:
    for i in range(20):
        put(dense, f"o{i}", 1, "open", "T0", f"Post {i}", f"distinct text {i}")
    put(dense, "dup", 1, "open", "T0", "Post 0", "distinct text 0")  # same text as o0: one hash
    with psycopg.connect(dsn) as a, psycopg.connect(dsn) as b:
        ha = [r[0] for r in a.execute("select content_hash from groundkit.embed_claim(%s, 8)", (MODEL,))]
        hb = [r[0] for r in b.execute("select content_hash from groundkit.embed_claim(%s, 100)", (MODEL,))]
        assert len(ha) == 8 and len(hb) == 12 and not set(ha) & set(hb)
        assert len(set(ha)) == 8 and len(set(hb)) == 12
        # a crash (rollback) of one worker loses its claims and nothing else
        a.rollback()
        ha2 = [r[0] for r in a.execute("select content_hash from groundkit.embed_claim(%s, 100)", (MODEL,))]
        assert set(ha2) == set(ha)
        a.execute("select groundkit.embed_store(%s, %s::bytea[], %s::real[])",
                  (MODEL, ha2, [embed("x") for _ in ha2]))
        a.commit()
        b.rollback()
    # what committed is not claimed again
    assert lag(dense) == run(dense, "select count(*) as n from groundkit.chunks"
                                    " where embed_hash_titled = any (%s::bytea[])", (hb,))[0]["n"]
    with psycopg.connect(dsn) as c:
        rest = [r[0] for r in c.execute("select content_hash from groundkit.embed_claim(%s, 100)", (MODEL,))]
    assert set(rest) == set(hb)


def test_a_claim_never_blocks_a_writer(dense: Groundkit, dsn: str) -> None:
    put(dense, "a", 1, "open", "T0", "T", "some text")
    with psycopg.connect(dsn) as worker:
        assert worker.execute("select * from groundkit.embed_claim(%s, 10)", (MODEL,)).fetchall()
        with psycopg.connect(dsn, autocommit=True) as writer:
            writer.execute("set lock_timeout = '2s'")
            writer.execute("select groundkit.put_object('a', 2, 'board_post', 'open', 'T0', 'T', 'new text',"
                           " null, false, null, '{}')")
        # the claimed hash's chunk went meanwhile: the store skips it
        h = worker.execute("select sha256(convert_to(%s, 'UTF8'))", ("T\nsome text",)).fetchone()
        assert h is not None
        n = worker.execute("select groundkit.embed_store(%s, %s::bytea[], %s::real[])",
                           (MODEL, [h[0]], [embed("x")])).fetchone()
        assert n == (0,)


def test_embed_store_checks_the_dimension_and_shape(dense: Groundkit) -> None:
    put(dense, "a", 1, "open", "T0", "T", "text")
    h = dense.conn.execute("select content_hash from groundkit.embed_claim(%s, 1)", (MODEL,)).fetchone()
    assert h is not None
    hashes = [h["content_hash"]]
    bad: list[Any] = [
        [[0.1] * (DIMENSION - 1)],                 # too narrow
        [[0.1] * (DIMENSION + 1)],                 # too wide
        [0.1] * DIMENSION,                         # 1-D
        [[0.1] * DIMENSION, [0.2] * DIMENSION],    # two rows for one hash
        [[float("nan")] * DIMENSION],
        [[float("inf")] * DIMENSION],
    ]
    for emb in bad:
        with pytest.raises(groundkit_errors().InvalidArgument):
            run(dense, "select groundkit.embed_store(%s, %s::bytea[], %s::real[])", (MODEL, hashes, emb))
    with pytest.raises(groundkit_errors().InvalidArgument):
        run(dense, "select groundkit.embed_store(%s, %s::bytea[], %s::real[])",
                           (MODEL, [b"short"], [embed("x")]))
    with pytest.raises(groundkit_errors().UnknownModel):
        run(dense, "select groundkit.embed_store('nope', %s::bytea[], %s::real[])", (hashes, [embed("x")]))
    assert n_embeddings(dense) == 0
    args = (MODEL, hashes, [embed("x")])
    assert dense.conn.execute("select groundkit.embed_store(%s, %s::bytea[], %s::real[]) as n", args).fetchone() \
        == {"n": 1}
    # idempotent
    assert dense.conn.execute("select groundkit.embed_store(%s, %s::bytea[], %s::real[]) as n", args).fetchone() \
        == {"n": 0}


def groundkit_errors() -> Any:
    import groundkit.errors

    return groundkit.errors


# -- models and cutover -------------------------------------------------------------------------


def test_add_embedding_model_checks_its_input(gk: Groundkit) -> None:
    errors = groundkit_errors()
    bad = [
        ("m", "test", 3, "cosine", "text", "{}"),            # no test provider is selectable
        ("m", "local", 0, "cosine", "text", "{}"),
        ("m", "local", 2001, "cosine", "text", "{}"),
        ("m", "local", 3, "dot", "text", "{}"),
        ("m", "local", 3, "cosine", "body", "{}"),
        ("bad name!", "local", 3, "cosine", "text", "{}"),
        ("m", "openai", 3, "cosine", "text", '{"api_key": "sk-123"}'),
        ("m", "openai", 3, "cosine", "text", '{"api_key_env": "not a name"}'),
        ("m", "openai", 3, "cosine", "text", "[]"),
    ]
    for args in bad:
        with pytest.raises(errors.InvalidArgument):
            run(gk, "select groundkit.add_embedding_model(%s, %s, %s, %s, %s, %s::jsonb)", args)
    ok = ("m", "openai", 3, "cosine", "text", '{"url": "http://127.0.0.1:9/v1", "api_key_env": "OPENAI_API_KEY"}')
    gk.conn.execute("select groundkit.add_embedding_model(%s, %s, %s, %s, %s, %s::jsonb)", ok)
    gk.conn.execute("select groundkit.add_embedding_model(%s, %s, %s, %s, %s, %s::jsonb)", ok)  # same: no-op
    with pytest.raises(errors.InvalidArgument):
        run(gk, "select groundkit.add_embedding_model(%s, %s, %s, %s, %s, %s::jsonb)",
                        ("m", "openai", 4, "cosine", "text", "{}"))
    rows = gk.conn.execute("select name, active, embeddings from groundkit.list_embedding_models()").fetchall()
    assert rows == [{"name": "m", "active": False, "embeddings": 0}]
    assert gk.conn.execute("select * from groundkit.active_embedding_model()").fetchall() == []


def test_cutover_refused_with_lag_forced_and_rolled_back(community: Groundkit) -> None:
    errors = groundkit_errors()
    gk = community
    add_model(gk, "old")
    add_model(gk, "new", recipe="text")
    put(gk, "a", 1, "open", "T0", "Wheel", "centering clay on the wheel")
    with pytest.raises(errors.UnknownModel):
        run(gk, "select * from groundkit.cutover('missing')")
    with pytest.raises(errors.UnknownModel):  # no model is active yet
        search_dense(gk, "t0", "wheel")
    with pytest.raises(errors.CutoverRefused):
        run(gk, "select * from groundkit.cutover('old')")
    row = gk.conn.execute("select * from groundkit.cutover('old', force => true)").fetchone()
    assert row == {"previous_model": None, "active_model": "old", "missing": 1}
    assert search_dense(gk, "t0", "wheel") == []  # lag: nothing embedded yet
    embed_pending(gk.conn, "old")
    assert hits(search_dense(gk, "t0", "wheel")) == [("a", 1, 0)]
    # the new model is embedded beside the active one; search keeps serving the old
    with pytest.raises(errors.CutoverRefused):
        run(gk, "select * from groundkit.cutover('new')")
    embed_pending(gk.conn, "new")
    assert gk.conn.execute("select * from groundkit.cutover('new')").fetchone() == \
        {"previous_model": "old", "active_model": "new", "missing": 0}
    assert [r["name"] for r in gk.conn.execute("select name from groundkit.active_embedding_model()")] == ["new"]
    assert hits(search_dense(gk, "t0", "wheel")) == [("a", 1, 0)]
    # roll back
    assert gk.conn.execute("select * from groundkit.cutover('old')").fetchone() == \
        {"previous_model": "new", "active_model": "old", "missing": 0}
    assert gk.conn.execute("select count(*) as n from groundkit.embedding_models where active").fetchone() == {"n": 1}


def test_query_embedding_of_another_dimension_is_refused(dense: Groundkit) -> None:
    for world in (False, True):  # (an empty world too: no plan may skip the check)
        if world:
            _world(dense)
        with pytest.raises(groundkit_errors().InvalidArgument):
            run(dense, "select * from groundkit.search_dense('t0', %s::vector)", (vector_literal([1.0, 0.0]),))
        with pytest.raises(groundkit_errors().InvalidArgument):
            run(dense, "select * from groundkit.search_hybrid('t0', 'kiln', %s::vector)",
                (vector_literal([1.0, 0.0]),))


# -- permission inside the dense leg --------------------------------------------------------------


def _world(gk: Groundkit) -> None:
    put(gk, "pub", 1, "open", "T0", "Open kiln", "kiln firing schedule")
    put(gk, "mem", 1, "members", "T1", "Members kiln", "kiln firing schedule for members")
    put(gk, "t2post", 1, "open", "T2", "Tier two kiln", "kiln firing schedule, tier two")
    put(gk, "vault", 1, "vault", "T2", "Vault kiln", "kiln firing schedule in the vault")
    put(gk, "note", 1, "notes", "T0", "My kiln note", "kiln firing schedule, my note", owner_sub="t1",
        owner_only=True)
    embed_pending(gk.conn, MODEL)


VISIBLE = {
    "t0": {"pub"},
    "t1": {"pub", "mem", "note"},
    "t2": {"pub", "mem", "t2post", "vault"},
    "t3": {"pub", "mem", "t2post"},
    "pending2": set(), "suspended3": set(), "revoked3": set(), "nobody": set(),
}


def test_permission_is_inside_the_dense_leg_for_every_reader(dense: Groundkit) -> None:
    _world(dense)
    for reader, want in VISIBLE.items():
        for exact in (True, False):
            got = {r["object_id"] for r in search_dense(dense, reader, "kiln firing", k=200, exact=exact)}
            assert got == want, (reader, exact)
            # k=1: the reader's own best, never an invisible one in its place
            top = search_dense(dense, reader, "kiln firing schedule in the vault", k=1, exact=exact)
            assert {r["object_id"] for r in top} <= want and len(top) == min(1, len(want))
    got = {r["object_id"] for r in search_dense(dense, "t2", "kiln", k=200, space_ids=["vault"])}
    assert got == {"vault"}


def test_a_downgrade_is_seen_at_once(dense: Groundkit) -> None:
    _world(dense)
    assert "vault" in {r["object_id"] for r in search_dense(dense, "t2", "kiln", k=200)}
    dense.put_member("t2", "T1")
    assert {r["object_id"] for r in search_dense(dense, "t2", "kiln", k=200)} == {"pub", "mem"}
    dense.put_member("t2", "T2", "suspended")
    assert search_dense(dense, "t2", "kiln", k=200) == []


def test_deleted_and_redacted_objects_are_never_returned(dense: Groundkit) -> None:
    _world(dense)
    put(dense, "twin", 1, "open", "T0", "Open kiln", "kiln firing schedule")  # the same text as pub
    put(dense, "secret", 1, "open", "T0", "Secret glaze", "uranium orange glaze notes")
    embed_pending(dense.conn, MODEL)
    n = n_embeddings(dense)
    dense.delete_object("mem", 1)
    assert "mem" not in {r["object_id"] for r in search_dense(dense, "t3", "kiln", k=200)}
    dense.redact_object("secret", 1)
    dense.redact_object("pub", 1)
    for exact in (True, False):
        got = {r["object_id"] for r in search_dense(dense, "t3", "uranium orange glaze", k=200, exact=exact)}
        assert not got & {"secret", "pub", "mem"}
    # the redacted text's embedding is gone; pub's text lives on in twin, and so does its embedding
    secret_hash = dense.conn.execute("select sha256(convert_to(%s, 'UTF8')) as h",
                                     ("Secret glaze\nuranium orange glaze notes",)).fetchone()
    assert secret_hash is not None
    assert dense.conn.execute("select count(*) as n from groundkit.embeddings where content_hash = %s",
                              (secret_hash["h"],)).fetchone() == {"n": 0}
    assert n_embeddings(dense) == n - 2  # secret's, and mem's (deleted: no current chunk uses it)
    assert lag(dense) == 0
    assert "twin" in {r["object_id"] for r in search_dense(dense, "t0", "kiln", k=200)}


def test_login_binding_applies_to_dense_search(dense: Groundkit, raw: psycopg.Connection[Any]) -> None:
    _world(dense)
    raw.execute("insert into groundkit.login_members (login, member_sub) values (session_user, 't0')")
    with pytest.raises(groundkit_errors().ReaderNotAllowed):
        search_dense(dense, "t2", "kiln")
    assert {r["object_id"] for r in search_dense(dense, "t0", "kiln")} == {"pub"}


# -- HNSW: completeness and agreement with the exact scan -----------------------------------------


def _many(gk: Groundkit, n: int, visible_every: int) -> None:
    """n objects in the open space; one in `visible_every` at T0, the rest at T3."""
    import json

    words = ["glaze", "kiln", "wheel", "clay", "slip", "bisque", "raku", "celadon", "tenmoku", "shino"]
    objs = [{"object_id": f"o{i}", "version": 1, "content_type": "board_post", "space_id": "open",
             "tier_visibility": "T0" if i % visible_every == 0 else "T3", "title": f"post {i}",
             "body": " ".join(words[(i * j) % len(words)] for j in range(1, 6)) + f" n{i % 97}"}
            for i in range(n)]
    gk.conn.execute("select * from groundkit.put_objects(%s::jsonb)", (json.dumps(objs),))
    embed_pending(gk.conn, MODEL, batch=1000)


def paths(gk: Groundkit, call: Any) -> list[str]:
    """The dense leg's scans while ``call()`` runs (its debug lines, which the owner's session sees)."""
    seen: list[str] = []

    def keep(d: psycopg.errors.Diagnostic) -> None:
        if d.message_primary and d.message_primary.startswith("groundkit dense: "):
            seen.append(d.message_primary.removeprefix("groundkit dense: "))

    gk.conn.add_notice_handler(keep)
    gk.conn.execute("set client_min_messages = debug")
    try:
        call()
    finally:
        gk.conn.execute("reset client_min_messages")
        gk.conn.remove_notice_handler(keep)
    return seen


def _force_index_path(gk: Groundkit) -> None:
    """Let the index answer however small the visible set (this session only)."""
    gk.conn.execute("set groundkit.dense_exact_max = 0")


def test_never_fewer_than_k_with_hnsw_and_a_1_percent_visible_fraction(dense: Groundkit, dsn: str) -> None:
    _many(dense, 3000, 100)  # 30 visible to t0
    with psycopg.connect(dsn, autocommit=True) as owner:
        build_hnsw_indexes(owner, MODEL)
    status = {r["bucket"]: r for r in dense.conn.execute("select * from groundkit.hnsw_status()").fetchall()}
    assert set(status) == {0, 3}
    assert status[3]["index_valid"] and status[3]["entries"] == 2970 and not status[3]["due"]
    assert not status[0]["index_valid"] and status[0]["entries"] == 30 and not status[0]["due"]  # read whole
    # a small visible set (its buckets say 30 chunks): the exact scan, index or not
    assert paths(dense, lambda: search_dense(dense, "t0", "glaze", k=10)) == ["exact scan"]
    _force_index_path(dense)
    for text in ("glaze kiln", "raku shino n5", "wheel"):
        for k in (10, 30):
            got: list[dict[str, Any]] = []
            scans = paths(dense, lambda got=got, text=text, k=k: got.extend(search_dense(dense, "t0", text, k=k)))
            assert scans[0] == f"index scan, {k} of {k} rows", scans
            assert len(got) == k
            assert hits(got) == hits(search_dense(dense, "t0", text, k=k, exact=True))
    # fewer visible than k: all of them, from the exact finish
    got = []
    assert paths(dense, lambda: got.extend(search_dense(dense, "t0", "glaze", k=50))) == \
        ["index scan, 30 of 50 rows", "exact scan"]
    assert len(got) == 30
    assert paths(dense, lambda: search_dense(dense, "t0", "glaze", k=5, exact=True)) == ["exact scan"]
    dense.conn.execute("select groundkit.put_member('t0', 'T0', 'active')")
    dense.retier_object("o1", 2, "T0")
    assert "o1" in {r["object_id"] for r in search_dense(dense, "t0", "glaze", k=50)}


def test_exact_and_index_scans_agree(dense: Groundkit, dsn: str) -> None:
    _many(dense, 3000, 1)
    with psycopg.connect(dsn, autocommit=True) as owner:
        # built with a wider search than the default (ef_construction 64): this world's 32-d test
        # vectors, ~1,000 texts each repeated about three times, are hard on HNSW's graph; at 64,
        # two runs of four kept 0 of 10 for one query and 6 of 10 for another. The real model's
        # recall is the dense benchmark's (docs/dense.md); duplicates are a known HNSW weakness.
        assert build_hnsw_indexes(owner, MODEL, ef_construction=200) == [owner.execute(
            "select groundkit._hnsw_index_name(%s, 0)", (MODEL,)).fetchone()[0]]  # type: ignore[index]
        plan = owner.execute("explain select 1 from groundkit.dense_entries e where e.model = %s"
                             " and e.vis_key = '0'::bigint and not e.pending"
                             " order by (e.embedding::vector(32)) <=> %s::vector limit 5",
                             (MODEL, vector_literal(embed("glaze")))).fetchall()
        assert any("dense_hnsw_" in r[0] for r in plan), plan
    _force_index_path(dense)
    overlap = []
    for text in ("glaze kiln", "raku shino", "wheel clay slip", "tenmoku n7", "bisque"):
        index = search_dense(dense, "t3", text, k=10)
        exact = search_dense(dense, "t3", text, k=10, exact=True)
        assert len(index) == len(exact) == 10
        # by distance, not by id: the bodies repeat, so many chunks tie at the 10th distance and
        # either scan may return any of them (which one is the HNSW build's random levels' choice)
        found = Counter(round(r["score"], 6) for r in index)
        overlap.append(sum((found & Counter(round(r["score"], 6) for r in exact)).values()) / 10)
    assert sum(overlap) / len(overlap) >= 0.9, overlap


# -- hybrid ---------------------------------------------------------------------------------------


def search_hybrid(gk: Groundkit, reader: str, text: str, k: int = 10, **kw: Any) -> list[dict[str, Any]]:
    args = [sql.SQL("{} => {}").format(sql.Identifier(name), sql.Placeholder(name)) for name in kw]
    query = sql.SQL("select * from groundkit.search_hybrid({})").format(sql.SQL(", ").join(
        [sql.SQL("%(r)s, %(q)s, %(e)s::vector, %(k)s"), *args]))
    return run(gk, query, {"r": reader, "q": text, "e": vector_literal(embed(text)), "k": k, **kw})


def test_hybrid_fuses_both_legs_with_their_ranks(dense: Groundkit) -> None:
    _world(dense)
    put(dense, "lex", 1, "open", "T0", "Unrelated", "zirconium opacifier")
    put(dense, "sem", 1, "open", "T0", "Firing", "kiln firing kiln firing")
    embed_pending(dense.conn, MODEL)
    rows = search_hybrid(dense, "t0", "kiln firing", k=10)
    by = {r["object_id"]: r for r in rows}
    assert set(by) == {"pub", "lex", "sem"}  # t0's visible set, all embedded
    assert by["lex"]["bm25_rank"] is None and by["lex"]["dense_rank"] is not None
    assert by["pub"]["bm25_rank"] is not None and by["pub"]["dense_rank"] is not None
    scores = [r["score"] for r in rows]
    assert scores == sorted(scores, reverse=True)
    rrf = 1 / (20 + by["pub"]["bm25_rank"]) + 1 / (20 + by["pub"]["dense_rank"])  # the default rrf_k
    assert by["pub"]["score"] == pytest.approx(rrf)
    assert "<mark>" in by["pub"]["snippet"]
    # the match gate drops the dense-only hit without a query term
    gated = {r["object_id"] for r in search_hybrid(dense, "t0", "kiln firing", match_gate=True)}
    assert gated == {"pub", "sem"}
    # score fusion: each leg scaled to [0, 1]; weights apply
    rows = search_hybrid(dense, "t0", "kiln firing", fusion="score", bm25_weight=0.0)
    assert max(r["score"] for r in rows) == pytest.approx(1.0)
    for reader, want in VISIBLE.items():
        got = {r["object_id"] for r in search_hybrid(dense, reader, "kiln firing", k=50)} - {"lex", "sem"}
        assert got == want, reader
    with pytest.raises(groundkit_errors().InvalidArgument):
        search_hybrid(dense, "t0", "kiln", fusion="max")
    with pytest.raises(groundkit_errors().InvalidArgument):
        search_hybrid(dense, "t0", "kiln", depth=0)


# -- roles and side channels --------------------------------------------------------------------


def test_reader_and_writer_logins_get_the_dense_functions_the_grid_gives(dense: Groundkit, server_dsn: str,
                                                                         dsn: str) -> None:
    """A reader login searches (dense and hybrid) and reads the active model, nothing else of the
    dense arm; it is told nothing about how the leg ran (no DEBUG line). A writer login runs the
    worker and the cutover."""
    from groundkit.gate import roles

    _world(dense)
    vec = vector_literal(embed("kiln"))
    with roles.login_roles(server_dsn, dsn) as who:
        with psycopg.connect(who.reader, autocommit=True) as reader:
            notices: list[str] = []
            reader.add_notice_handler(lambda d: notices.append(str(d.message_primary)))
            reader.execute("set client_min_messages = debug1")
            rows = reader.execute("select object_id from groundkit.search_dense('t1', %s::vector, 10)",
                                  (vec,)).fetchall()
            assert {r[0] for r in rows} == VISIBLE["t1"]
            assert reader.execute("select count(*) from groundkit.search_hybrid('t1', 'kiln', %s::vector)",
                                  (vec,)).fetchone() == (3,)
            assert reader.execute("select name from groundkit.active_embedding_model()").fetchone() == (MODEL,)
            assert not [n for n in notices if n.startswith("groundkit")], notices
            for call in ("select * from groundkit.embed_claim('double', 1)",
                         "select * from groundkit.embedding_lag()",
                         "select * from groundkit.cutover('double')",
                         "select * from groundkit.embeddings"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    reader.execute(call)
        with psycopg.connect(who.writer, autocommit=True) as writer:
            assert writer.execute("select missing from groundkit.embedding_lag()").fetchone() == (0,)
            assert writer.execute("select * from groundkit.embed_claim('double', 1)").fetchall() == []
            writer.execute("select * from groundkit.cutover('double')")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                writer.execute("select groundkit._hnsw_built('double')")


def test_dense_rows_and_scores_do_not_depend_on_invisible_content(dense: Groundkit, dsn: str) -> None:
    """A dense score is the distance between the query and the chunk's own text: no statistics of
    other content. Invisible content near the query changes neither the exact scan's rows nor any
    score. (The index scan is approximate: its rows stay visible ones, each with the same score.
    It reads the reader's buckets only, test_dense_index_work_does_not_depend_on_invisible_neighbours.)"""
    _many(dense, 2500, 1)
    with psycopg.connect(dsn, autocommit=True) as owner:
        build_hnsw_indexes(owner, MODEL)
    _force_index_path(dense)
    texts = ["glaze kiln", "raku n3", "vault secret glaze kiln"]

    def view(exact: bool) -> list[list[tuple[str, float]]]:
        return [[(r["object_id"], r["score"]) for r in search_dense(dense, "t1", t, k=10, exact=exact)]
                for t in texts]

    exact_before, index_before = view(True), view(False)
    for i in range(300):  # above t1's tier, and in the vault: the same words
        put(dense, f"hidden{i}", 1, "open" if i % 2 else "vault", "T3" if i % 2 else "T2", "vault secret",
            "glaze kiln raku n3 secret")
    embed_pending(dense.conn, MODEL)
    assert view(True) == exact_before
    for rows, exact_rows, index_rows in zip(view(False), exact_before, index_before, strict=True):
        scores = dict(exact_rows + index_rows)  # this query's
        assert len(rows) == 10 and all(not oid.startswith("hidden") for oid, _ in rows), rows
        assert all(score == scores.get(oid, score) for oid, score in rows), (rows, scores)


@pytest.mark.parametrize(("distance", "expected"), [
    ("cosine", [1.0, 0.5, 0.0]),                           # 1 - distance / 2: same, orthogonal, opposite
    ("l2", [1.0, 1 / (1 + 2 ** 0.5), 1 / 3]),               # 1 / (1 + distance)
    ("inner_product", [1 / (1 + 2.718281828459045 ** -1), 0.5, 1 / (1 + 2.718281828459045)]),  # sigmoid
])
def test_dense_scores_are_never_negative_and_follow_the_distance(community: Groundkit, distance: str,
                                                                 expected: list[float]) -> None:
    """Every distance's score fits SearchHit's score >= 0, nearest highest: an opposite vector (a
    cosine of -1, an inner product of -1) scores 0 or just above, never below; and the rows make
    SearchHits (a negative score failed their validation)."""
    from groundkit.models import SearchHit

    community.conn.execute("select groundkit.add_embedding_model('two', 'local', 2, %s, 'text', '{}')", (distance,))
    community.conn.execute("select * from groundkit.cutover('two')")
    vectors = {"same": [1.0, 0.0], "orthogonal": [0.0, 1.0], "opposite": [-1.0, 0.0]}
    for name in vectors:
        put(community, name, 1, "open", "T0", "", f"text {name}")
    with community.conn.transaction():
        claimed = community.conn.execute("select content_hash, text from groundkit.embed_claim('two', 10)").fetchall()
        community.conn.execute("select groundkit.embed_store('two', %s::bytea[], %s::real[])",
                               ([r["content_hash"] for r in claimed],
                                [vectors[r["text"].split()[-1]] for r in claimed]))
    for exact in (True, False):
        rows = run(community, "select * from groundkit.search_dense('t0', '[1,0]'::vector, 10, null, null, %s)",
                   (exact,))
        assert [r["object_id"] for r in rows] == ["same", "orthogonal", "opposite"]
        assert [r["score"] for r in rows] == pytest.approx(expected, abs=1e-6)
        assert all(SearchHit.model_validate(r).score >= 0 for r in rows)


def test_revision_0022_hashes_existing_chunks_as_writes_do(gk: Groundkit) -> None:
    """The revision's backfill and _materialize_many give every chunk the same two hashes
    (titles, heading paths and thread headers included)."""
    import re
    from pathlib import Path

    src = (Path(__file__).parents[1] / "migrations/versions/0022_dense.py").read_text(encoding="utf-8")
    body = re.search(r'op.execute\(\s*"""(.*?)"""', src, re.S)
    assert body is not None
    ddl = body.group(1).encode().decode("unicode_escape")  # the string as Python passes it
    backfill = ddl[ddl.index("update groundkit.chunks c"):]
    backfill = backfill[:backfill.index(";")]
    gk.put_member("t0", "T0")
    gk.put_space("open", "T0")
    gk.put_object("doc", 1, "document", "open", "T0", "Guide",
                  "# Kilns\n\n## Firing\n\nSlowly.\n\n## Cooling\n\nSlower.")
    gk.put_object("post", 1, "board_post", "open", "T0", "Re: glaze", "Try celadon.",
                  metadata={"thread_title": "Glazes", "board": "studio"})
    gk.put_object("plain", 1, "member_note", "open", "T0", "", "x " * 2000)
    hashes = "select chunk_id, embed_hash_text, embed_hash_titled from groundkit.chunks order by chunk_id"
    written = gk.conn.execute(hashes).fetchall()
    assert len(written) > 4 and all(r["embed_hash_titled"] for r in written)
    prefixed = gk.conn.execute("select count(*) as n from groundkit.chunks where search_prefix is not null").fetchone()
    assert prefixed is not None and prefixed["n"] >= 2
    with gk.conn.transaction(force_rollback=True):
        gk.conn.execute("update groundkit.chunks set embed_hash_text = null, embed_hash_titled = null")
        gk.conn.execute(backfill)
        assert gk.conn.execute(hashes).fetchall() == written
