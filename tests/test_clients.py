"""The same behaviour through both clients: :class:`Groundkit` and :class:`AsyncGroundkit` run
the same operations (groundkit/ops.py) with their own driver, against the real embedded
Postgres; every test here runs once per client."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest

from groundkit import AsyncGroundkit, Groundkit, embedding, model_swap
from groundkit.errors import (
    InvalidArgument,
    UnknownContentType,
    UnknownModel,
    UnknownSpace,
    UnknownTier,
    VersionConflict,
)
from groundkit.models import WriteStatus
from tests.dense_fakes import FakeEmbeddings, add_fake_model


class Client:
    """One client, sync or async, called the same way: ``client.search(...)`` answers, whichever
    it is (the async one's coroutine run to its end on this test's event loop)."""

    def __init__(self, kind: str, dsn: str, runner: asyncio.Runner, flow: str | None = None) -> None:
        self.kind = kind
        self.runner = runner
        self.gk: Any = (Groundkit.connect(dsn, flow=flow) if kind == "sync"
                        else runner.run(AsyncGroundkit.connect(dsn, flow=flow)))

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.gk, name)
        if self.kind == "sync":
            return method  # type: ignore[no-any-return]
        return lambda *args, **kwargs: self.runner.run(method(*args, **kwargs))

    def in_run(self, body: Callable[[Any], Any], **run_args: Any) -> Any:
        """``body(run)`` inside ``gk.run(**run_args)``: ``with`` for the sync client, ``async with``
        for the async one (``body`` then returns a coroutine)."""
        if self.kind == "sync":
            with self.gk.run(**run_args) as run:
                return body(run)

        async def main() -> Any:
            async with self.gk.run(**run_args) as run:
                return await body(run)

        return self.runner.run(main())

    def close(self) -> None:
        if self.kind == "sync":
            self.gk.close()
        else:
            self.runner.run(self.gk.close())


@pytest.fixture
def runner() -> Iterator[asyncio.Runner]:
    with asyncio.Runner() as r:
        yield r


@pytest.fixture(params=["sync", "async"])
def client(request: pytest.FixtureRequest, community: Groundkit, dsn: str, runner: asyncio.Runner) -> Iterator[Client]:
    c = Client(request.param, dsn, runner)
    yield c
    c.close()


def _ids(hits: list[Any]) -> set[str]:
    return {h.object_id for h in hits}


def test_a_t0_reader_never_sees_t3_content(client: Client) -> None:
    """The permission rule, the same through both: tier stamps, a space's minimum, a private space."""
    client.put_object("open-t0", 1, "board_post", "open", "T0", "Pricing", "how to price a commission")
    client.put_object("open-t3", 1, "board_post", "open", "T3", "Pricing, premium", "price a commission higher")
    client.put_object("vault-1", 1, "board_post", "vault", "T0", "Pricing, vault", "vault price commission")
    assert _ids(client.search("t0", "price commission")) == {"open-t0"}
    assert _ids(client.search("t3", "price commission")) == {"open-t0", "open-t3"}
    assert _ids(client.search("t2", "price commission")) == {"open-t0", "vault-1"}
    assert _ids(client.search("suspended3", "price commission")) == set()  # fails closed
    assert client.fetch_citation("t0", "open-t3", 1, 0) is None  # as for a missing one
    assert client.fetch_citation("t3", "open-t3", 1, 0) is not None
    assert {i.object_id for i in client.home("t0")} == {"open-t0"}


def test_a_downgrade_counts_from_the_next_call(client: Client, community: Groundkit) -> None:
    client.put_object("m-1", 1, "board_post", "members", "T1", "Tiers", "members price tiers")
    assert _ids(client.search("t1", "tiers")) == {"m-1"}
    community.put_member("t1", "T0")  # another connection
    assert client.search("t1", "tiers") == []


@pytest.mark.parametrize(("call", "error"), [
    (lambda c: c.put_member("x", "T9"), UnknownTier),                                   # GK002, from SQL
    (lambda c: c.put_object("o", 1, "board_post", "nowhere", "T0", "t", "b"), UnknownSpace),  # GK003
    (lambda c: c.put_object("o", 1, "recipe", "open", "T0", "t", "b"), UnknownContentType),
    (lambda c: c.search("t0", "x", k=0), InvalidArgument),                              # checked before SQL
    (lambda c: c.search("t0", "x", content_types=["recipe"]), UnknownContentType),
    (lambda c: c.search("t0", "x\x00"), InvalidArgument),
    (lambda c: c.search("t0", "x", mode="dense"), UnknownModel),                        # GK015: no active model
    (lambda c: c.home("t0", "oldest"), InvalidArgument),
], ids=["tier", "space", "content-type", "k", "filter", "nul", "no-model", "home-mode"])
def test_errors_are_the_same_classes(client: Client, call: Callable[[Client], Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        call(client)


def test_a_gk_code_from_the_database_is_the_same_error(client: Client) -> None:
    client.put_object("v", 2, "board_post", "open", "T0", "t", "body")
    with pytest.raises(VersionConflict) as raised:
        client.retier_object("v", 2, "T1")  # not above the current version
    assert raised.value.sqlstate == "GK001"


def test_writes_and_their_statuses(client: Client) -> None:
    first = client.put_object("w", 1, "board_post", "open", "T0", "Glazes", "celadon glaze notes")
    again = client.put_object("w", 1, "board_post", "open", "T0", "Glazes", "celadon glaze notes")
    assert (first.status, again.status) == (WriteStatus.APPLIED, WriteStatus.DUPLICATE)
    assert _ids(client.search("t0", "celadon")) == {"w"}
    assert client.delete_object("w", 2).status == WriteStatus.APPLIED
    assert client.search("t0", "celadon") == []
    marker = client.snapshot_marker()
    assert isinstance(marker, int) and len(client.state_checksum()) > 0


def test_the_sampler_records_in_a_savepoint(client: Client, community: Groundkit) -> None:
    community.set_sample_rate(1.0)
    client.put_object("s", 1, "board_post", "open", "T0", "Kilns", "kiln firing schedule")
    hits = client.search("t0", "kiln")
    assert hits and client.gk.last_sample_id is not None
    client.record_sample_engagement(client.gk.last_sample_id, "s", "click")
    with pytest.raises(InvalidArgument):
        client.record_sample_engagement(client.gk.last_sample_id, "not-a-hit", "click")


def test_a_run_pins_its_hits_and_replays(client: Client) -> None:
    client.put_object("r", 1, "board_post", "open", "T0", "Clay", "stoneware clay bodies")

    def body(run: Any) -> Any:
        if client.kind == "sync":
            return run.id, run.search("stoneware"), run.record_llm("m-1", 10, 2, cost=Decimal("0.1"), meter=False)

        async def main() -> Any:
            hits = await run.search("stoneware")
            await run.search("clay")  # a later search: in a savepoint
            await run.record_llm("m-1", 10, 2, cost=Decimal("0.1"), meter=False)
            return run.id, hits, None

        return main()

    run_id, hits, _ = client.in_run(body, flow="tutor", reader="t0", model="m-1")
    assert _ids(hits) == {"r"}
    replay = client.replay(run_id, reader="t0")
    assert {h.object_id for h in replay.hits} == {"r"}
    assert replay.run.flow == "tutor" and replay.run.cost == pytest.approx(0.1)
    assert run_id in {uuid.UUID(r.run_id) for r in client.runs(flow="tutor")}


def test_a_run_that_raises_is_recorded_with_its_error(client: Client) -> None:
    def body(run: Any) -> Any:
        if client.kind == "sync":
            run.search("anything")
            raise KeyError("boom")

        async def main() -> Any:
            await run.search("anything")
            raise KeyError("boom")

        return main()

    run_id = uuid.uuid4()
    with pytest.raises(KeyError):
        client.in_run(body, flow="tutor", reader="t0", run_id=run_id)
    assert client.replay(run_id).run.error_class == "KeyError"


@pytest.mark.parametrize("mode", ["dense", "hybrid", "auto"])
def test_dense_and_hybrid_search_through_the_outbound_gate(client: Client, community: Groundkit,
                                                          fake: FakeEmbeddings, mode: str) -> None:
    """The query goes through the same seam (the gate, the embedder) from both clients; the
    permission predicate holds in every mode."""
    client.put_object("d-open", 1, "board_post", "open", "T0", "Firing", "bisque firing temperature")
    client.put_object("d-vault", 1, "board_post", "vault", "T0", "Firing, vault", "vault bisque firing")
    add_fake_model(community, "fake", fake)
    m = embedding.get_model(community, "fake")
    from groundkit.embedders import embedder_for

    embedding.embed_pending(community, m, embedder_for(m))
    model_swap.cutover(community, "fake")
    before = len(fake.texts)
    assert _ids(client.search("t0", "bisque firing", mode=mode)) == {"d-open"}
    assert _ids(client.search("t2", "bisque firing", mode=mode)) == {"d-open", "d-vault"}
    assert fake.texts[before:] == ["bisque firing", "bisque firing"]  # the query, embedded once per search


def test_the_query_syntax_a_long_questions_notice_and_languages(client: Client) -> None:
    """Both clients: the query syntax is read in SQL, search's notice of a long question is on
    every hit and in last_query_notice (and cleared by the next search), and a space names its
    language (docs/bm25/analysis.md)."""
    client.put_member("lexi", "T0")
    client.put_space("words", "T0")
    client.put_object("w1", 1, "board_post", "words", "T0", "", "the kiln fired the glaze overnight")
    client.put_object("w2", 1, "board_post", "words", "T0", "", "glaze fired in the kiln")
    assert _ids(client.search("lexi", '"kiln fired"', space_ids=["words"])) == {"w1"}
    assert _ids(client.search("lexi", "kiln -overnight", space_ids=["words"])) == {"w2"}
    long = "kiln " + " ".join("q" + chr(97 + i // 26) + chr(97 + i % 26) + "x" for i in range(80))
    hits = client.search("lexi", long, space_ids=["words"])
    assert _ids(hits) == {"w1", "w2"}
    assert all(h.query_notice is not None and "81 distinct terms in english" in h.query_notice for h in hits)
    assert client.gk.last_query_notice == hits[0].query_notice
    (hit, _) = client.search("lexi", "kiln", space_ids=["words"])
    assert hit.query_notice is None and client.gk.last_query_notice is None
    assert "french" in client.languages()
    assert client.set_space_language("words", "french") == 2


def test_the_async_client_is_exported_and_mirrors_the_sync_one() -> None:
    import inspect

    from groundkit.client import Groundkit as Sync

    shared = ["put_member", "put_space", "grant_space", "revoke_space", "put", "put_object", "put_objects",
              "retier_object", "delete_object", "redact_object", "search", "record_sample_engagement",
              "fetch_citation", "home", "record_engagement", "snapshot_marker", "state_checksum", "run", "replay",
              "set_sample_limit", "set_sample_rate", "stored_objects", "sourced_objects", "chunk_count",
              "runs", "diff_runs", "prune_runs", "set_space_language", "languages"]
    for name in shared:
        sync_sig = inspect.signature(getattr(Sync, name))
        async_sig = inspect.signature(getattr(AsyncGroundkit, name))
        assert list(sync_sig.parameters) == list(async_sig.parameters), name
        if name != "run":
            assert inspect.iscoroutinefunction(getattr(AsyncGroundkit, name)), name


