"""Dense retrieval in one step: `groundkit dense enable` registers the local model (the real
all-MiniLM-L6-v2, exported once per session), embeds every chunk and makes it active when the lag
is zero (or first, with --now: hybrid then covers what is not embedded yet by BM25); and
`groundkit models add NAME --provider local` needs no dimension."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from groundkit import Groundkit, deployment, embedding, model_swap
from groundkit.cli import app
from groundkit.dense_enable import enable, register_local
from groundkit.errors import CutoverRefused, InvalidArgument

runner = CliRunner()
# The activation is a gated cutover; its gate is tests/test_governance.py's subject, so these
# databases bypass it, and the bypass is what the ledger shows.
SKIP_GATE = ["--skip-gate", "--reason", "tests: the gated cutover is test_governance's subject"]


@pytest.fixture
def home(embed_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The session's data directory for the model, so its export is made there, once."""
    monkeypatch.setenv("GROUNDKIT_HOME", str(embed_home))
    return embed_home


@pytest.fixture
def world(community: Groundkit) -> Groundkit:
    gk = community
    gk.put_object("kiln", 1, "board_post", "open", "T0", "Firing schedule", "The kiln fires on Saturday at nine.")
    gk.put_object("glaze", 1, "course_section", "open", "T0", "Glazes", "Mix the glaze thin and dip twice.")
    gk.put_object("vault", 1, "board_post", "vault", "T2", "Studio rent", "The rent for the studio goes up in May.")
    return gk


def _chunks(gk: Groundkit) -> int:
    return int(gk._scalar("select count(*) from groundkit.chunks", {}))


def _missing(gk: Groundkit, model: str) -> int:
    return sum(lag.missing for lag in embedding.lag(gk, model))


def test_models_add_local_needs_no_dimension(dsn: str) -> None:
    done = runner.invoke(app, ["models", "add", "mini", "--provider", "local", "--dsn", dsn])
    assert done.exit_code == 0, done.output
    assert "mini: local, 384 dimensions, cosine, recipe titled" in done.stdout
    with Groundkit.connect(dsn) as gk:
        assert embedding.get_model(gk, "mini").dimension == 384


@pytest.mark.parametrize(("args", "message"), [
    (["--provider", "openai", "--url", "http://127.0.0.1:1", "--remote-model", "x"], "needs the model's dimension"),
    (["--provider", "local", "--dimension", "512"], "have 384 dimensions"),
])
def test_models_add_refuses_a_missing_or_wrong_dimension(dsn: str, args: list[str], message: str) -> None:
    done = runner.invoke(app, ["models", "add", "m", *args, "--dsn", dsn])
    assert done.exit_code == 1 and "GK005" in done.stderr and message in done.stderr, done.output
    with Groundkit.connect(dsn) as gk:
        assert embedding.list_models(gk) == []


def test_dense_enable_registers_embeds_and_activates(world: Groundkit, dsn: str, home: Path) -> None:
    assert world._scalar("select groundkit.auto_search_mode() as mode", {}) == "bm25"
    done = runner.invoke(app, ["dense", "enable", "--json", *SKIP_GATE, "--dsn", dsn])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["model"] == "minilm" and report["registered"] is True
    assert report["chunks"] == _chunks(world) and report["activated"] == "caught up"
    assert _missing(world, "minilm") == 0
    assert embedding.active_model(world).name == "minilm"
    assert world._scalar("select groundkit.auto_search_mode() as mode", {}) == "hybrid"
    hits = world.search("t0", "when does the oven heat up")  # auto: hybrid now
    assert hits and all(h.dense_rank is not None or h.bm25_rank is not None for h in hits)
    assert "vault" not in {h.object_id for h in world.search("t0", "studio rent", k=50)}
    assert "cutover: the gate was bypassed" in done.stderr  # the gated cutover's own line
    assert [r.kind for r in deployment.ledger(world.conn)][:1] == ["cutover"]


def test_dense_enable_again_embeds_what_the_model_lacks(world: Groundkit, dsn: str, home: Path) -> None:
    assert runner.invoke(app, ["dense", "enable", *SKIP_GATE, "--dsn", dsn]).exit_code == 0
    world.put_object("new", 1, "event", "open", "T0", "Open day", "Come and see the workshop.")
    done = runner.invoke(app, ["dense", "enable", "--json", *SKIP_GATE, "--dsn", dsn])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert (report["registered"], report["chunks"], report["activated"]) == (False, 1, "already")


def test_dense_enable_now_activates_first_and_hybrid_covers_the_rest_by_bm25(
        world: Groundkit, home: Path) -> None:
    """--now: the model is made active (forced) while nothing is embedded; a hybrid search then
    finds chunks by their BM25 leg alone; the run still embeds everything."""
    seen: list[tuple[bool, int, list[tuple[str, int | None, int | None]]]] = []

    def activate(name: str, force: bool) -> str | None:
        previous = model_swap.cutover(world, name, force=force)
        hits = world.search("t0", "kiln saturday", mode="hybrid")
        seen.append((force, _missing(world, name), [(h.object_id, h.bm25_rank, h.dense_rank) for h in hits]))
        return previous

    report = enable(world, activate, now=True)
    [(force, missing, hits)] = seen
    assert force and missing == _chunks(world)
    assert ("kiln", 1, None) in hits  # found by BM25 alone: no chunk had an embedding yet
    assert report.activated == "now" and report.chunks == _chunks(world) and _missing(world, "minilm") == 0


def test_dense_enable_catches_up_with_content_written_meanwhile(world: Groundkit, home: Path) -> None:
    """Content written between the last batch and the switch: the cutover is refused (lag), the
    new chunk is embedded, and the switch is made on the next round."""
    calls: list[bool] = []

    def activate(name: str, force: bool) -> str | None:
        calls.append(force)
        if len(calls) == 1:
            world.put_object(f"late-{len(calls)}", 1, "event", "open", "T0", "Late", "written during the switch")
        return model_swap.cutover(world, name, force=force)

    report = enable(world, activate)
    assert calls == [False, False]
    assert report.activated == "caught up" and report.chunks == _chunks(world)
    assert embedding.active_model(world).name == "minilm" and _missing(world, "minilm") == 0


def test_dense_enable_gives_up_when_content_never_stops(world: Groundkit, home: Path) -> None:
    def activate(name: str, force: bool) -> str | None:
        n = _chunks(world)  # (a new text each time: embeddings are kept per text)
        world.put_object(f"late-{n}", 1, "event", "open", "T0", "Late", f"one more, number {n}")
        return model_swap.cutover(world, name, force=force)

    with pytest.raises(CutoverRefused, match="run groundkit dense enable again, or with --now"):
        enable(world, activate)
    assert [m.name for m, state in embedding.list_models(world) if state == "building"] == ["minilm"]


def test_dense_enable_is_refused_while_another_model_is_active(world: Groundkit, dsn: str, home: Path) -> None:
    model_swap.add_model(world, name="other", provider="local")
    model_swap.cutover(world, "other", force=True)
    done = runner.invoke(app, ["dense", "enable", "--dsn", dsn])
    assert done.exit_code == 1 and "'other' is the active embedding model" in done.stderr, done.output
    assert [m.name for m, _ in embedding.list_models(world)] == ["other"]


def test_register_local_refuses_a_name_taken_by_another_definition(world: Groundkit) -> None:
    model_swap.add_model(world, name="minilm", provider="openai", dimension=8,
                         options={"url": "http://127.0.0.1:1", "model": "x"})
    with pytest.raises(InvalidArgument, match="already registered as openai"):
        register_local(world, "minilm")
