"""The LangChain and LlamaIndex retrievers, with the real libraries, on a real PostgreSQL: their
documents/nodes carry the citation in the shape each framework's own helpers read, a call may set
k, mode, content_types and space_ids (each framework's way) but never the reader, async calls do
not block the event loop, and a downgrade between two calls of the same retriever object removes
the hit at the next call (what a vector store with permission metadata stamped at ingest keeps
returning). langchain-tests' own suite runs in tests/test_langchain_standard.py."""

from __future__ import annotations

import asyncio
import re
import threading
from pathlib import Path
from typing import Any

import pydantic
import pytest
from langchain_core.documents import Document
from langchain_core.prompts import PromptTemplate, format_document
from langchain_core.runnables import ConfigurableField
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import CitationQueryEngine, RetrieverQueryEngine
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode

from groundkit import Groundkit, InvalidArgument, UnknownContentType
from groundkit.integrations import langchain as gk_langchain
from groundkit.integrations import llamaindex as gk_llamaindex
from groundkit.integrations.llamaindex import GroundkitQuery
from tests.governance_helpers import certify

COURSE_CHUNK = "# Compost\n\ncompost turns waste into soil"
SECTION = "Start with the soil you have.\n\n" + COURSE_CHUNK
THREAD = {"thread_id": "t-9", "thread_title": "Compost questions"}
# a reader in the spellings a model, a request body or a careless caller might use
READER_SPELLINGS = ["reader_sub", "reader", "member_sub", "member", "user", "user_id", "sub", "readerSub",
                    "READER_SUB", "reader sub", "as_"]


@pytest.fixture
def world(community: Groundkit) -> Groundkit:
    gk = community
    gk.put_object("course", 1, "course_section", "members", "T2", "Soil basics", SECTION)
    gk.put_object("board", 1, "board_post", "open", "T0", "Compost day", "bring compost buckets on saturday",
                  metadata=THREAD)
    gk.put_object("talk", 1, "transcript", "open", "T0", "Compost talk", "",
                  segments=[{"start_ms": 0, "end_ms": 4000, "text": "welcome to the compost talk"}])
    return gk


def _ids(docs: list[Document]) -> set[str]:
    return {str(d.metadata["object_id"]) for d in docs}


def _node_ids(nodes: list[NodeWithScore]) -> set[str]:
    return {str(n.node.metadata["object_id"]) for n in nodes}


# -- LangChain: documents and their citation ---------------------------------------------------


def test_langchain_documents_carry_the_citation_fields(world: Groundkit) -> None:
    retriever = gk_langchain.GroundkitRetriever(client=world, reader_sub="t2", k=5)
    docs = retriever.invoke("compost")
    assert all(isinstance(d, Document) for d in docs)
    by_id = {d.metadata["object_id"]: d for d in docs}
    assert set(by_id) == {"course", "board", "talk"}
    course = by_id["course"]
    assert course.page_content == COURSE_CHUNK
    assert course.id == "course:1:1"
    assert {"object_id", "object_version", "chunk_seq", "space_id", "content_type", "title", "score",
            "start_ms", "end_ms", "char_start", "char_end", "heading_path", "thread_id", "thread_title",
            "source", "start_index"} <= set(course.metadata)
    assert (course.metadata["space_id"], course.metadata["content_type"], course.metadata["title"]) == (
        "members", "course_section", "Soil basics")
    assert course.metadata["heading_path"] == ["Soil basics", "Compost"]
    assert course.metadata["score"] > 0
    assert (by_id["talk"].metadata["start_ms"], by_id["talk"].metadata["end_ms"]) == (0, 4000)
    assert (by_id["board"].metadata["thread_id"], by_id["board"].metadata["thread_title"]) == (
        "t-9", "Compost questions")


def test_langchain_metadata_is_every_field_of_the_hit_plus_source_and_start_index(world: Groundkit) -> None:
    [hit] = world.search("t2", "soil", k=1)
    [doc] = gk_langchain.GroundkitRetriever(client=world, reader_sub="t2", k=1).invoke("soil")
    assert doc.metadata == {**hit.model_dump(mode="json", exclude={"content"}),
                            "source": hit.object_id, "start_index": hit.char_start}


def test_langchain_citation_is_in_langchains_own_shape(world: Groundkit) -> None:
    """`source` and `start_index` as LangChain's loaders and text splitters write them (the body
    at start_index is the chunk), readable by format_document's prompts, and to_citation makes
    a citation block with langchain_core's create_citation."""
    [doc] = gk_langchain.GroundkitRetriever(client=world, reader_sub="t2", k=1, content_types=("course_section",)
                                            ).invoke("compost")
    start = doc.metadata["start_index"]
    assert SECTION[start:start + len(doc.page_content)] == doc.page_content
    assert doc.metadata["char_end"] == start + len(doc.page_content)
    prompt = PromptTemplate.from_template("[{source}] {title}: {page_content}")
    assert format_document(doc, prompt) == f"[course] Soil basics: {COURSE_CHUNK}"
    block = gk_langchain.to_citation(doc, start_index=0, end_index=12)
    assert block["type"] == "citation" and block["title"] == "Soil basics"
    assert block["cited_text"] == doc.page_content and (block["start_index"], block["end_index"]) == (0, 12)
    assert start > 0 and block["extras"] == {
        "object_id": "course", "object_version": 1, "chunk_seq": 1, "char_start": start,
        "char_end": doc.metadata["char_end"], "heading_path": ["Soil basics", "Compost"]}
    [talk] = gk_langchain.GroundkitRetriever(client=world, reader_sub="t0", k=1, content_types=("transcript",)
                                             ).invoke("compost")
    assert {"start_ms": 0, "end_ms": 4000}.items() <= gk_langchain.to_citation(talk)["extras"].items()


def test_langchain_downgrade_between_two_calls_removes_the_hit(world: Groundkit) -> None:
    retriever = gk_langchain.GroundkitRetriever(client=world, reader_sub="t2", k=5)
    assert "course" in _ids(retriever.invoke("compost"))
    world.put_member("t2", "T1")
    assert _ids(retriever.invoke("compost")) == {"board", "talk"}
    world.put_member("t2", "T2", "suspended")
    assert retriever.invoke("compost") == []


# -- LangChain: per-call options -------------------------------------------------------------


def test_langchain_k_per_call(world: Groundkit) -> None:
    retriever = gk_langchain.GroundkitRetriever(client=world, reader_sub="t2", k=5)
    assert len(retriever.invoke("compost", k=1)) == 1
    assert len(retriever.invoke("compost", None, k=2)) == 2
    assert len(retriever.invoke("compost")) == 3  # the retriever's own k again


@pytest.mark.parametrize("k", [0, 201, -1, True, "3", 2.0])
def test_langchain_k_per_call_is_bounded_by_max_k(world: Groundkit, k: object) -> None:
    retriever = gk_langchain.GroundkitRetriever(client=world, reader_sub="t2", k=5)
    with pytest.raises(InvalidArgument, match="k must be between 1 and 200"):
        retriever.invoke("compost", k=k)


def test_langchain_filters_per_call(world: Groundkit) -> None:
    retriever = gk_langchain.GroundkitRetriever(client=world, reader_sub="t2", k=5)
    assert [d.metadata["object_id"] for d in retriever.invoke("compost", content_types=["transcript"])] == ["talk"]
    assert [d.metadata["object_id"] for d in retriever.invoke("compost", space_ids=("members",))] == ["course"]
    with pytest.raises(InvalidArgument, match="list of strings"):
        retriever.invoke("compost", space_ids="members")
    with pytest.raises(UnknownContentType):
        retriever.invoke("compost", content_types=["podcast"])


def test_langchain_mode_per_call(world: Groundkit) -> None:
    """bm25 per call ranks by BM25 alone; an unknown mode is refused; dense needs a model, which
    this database has none of (a dense call is GK015, so the mode did reach search)."""
    retriever = gk_langchain.GroundkitRetriever(client=world, reader_sub="t2", k=5, mode="hybrid")
    docs = retriever.invoke("compost", mode="bm25")
    assert _ids(docs) == {"course", "board", "talk"} and all(d.metadata["dense_rank"] is None for d in docs)
    with pytest.raises(InvalidArgument, match="mode must be one of"):
        retriever.invoke("compost", mode="semantic")
    with pytest.raises(Exception, match="no embedding model is active") as caught:
        retriever.invoke("compost")  # the retriever's own mode, hybrid
    assert getattr(caught.value, "sqlstate", None) == "GK015"


def test_langchain_filters_at_construction(world: Groundkit) -> None:
    retriever = gk_langchain.GroundkitRetriever(client=world, reader_sub="t2", k=5, content_types=("transcript",))
    assert [d.metadata["object_id"] for d in retriever.invoke("compost")] == ["talk"]
    retriever = gk_langchain.GroundkitRetriever(client=world, reader_sub="t2", k=5, space_ids=("members",))
    assert [d.metadata["object_id"] for d in retriever.invoke("compost")] == ["course"]


@pytest.mark.parametrize("spelling", READER_SPELLINGS)
def test_langchain_reader_per_call_is_refused_in_any_spelling(world: Groundkit, spelling: str) -> None:
    retriever = gk_langchain.GroundkitRetriever(client=world, reader_sub="t0", k=5)
    reader: dict[str, Any] = {spelling: "t3"}
    with pytest.raises(InvalidArgument, match="the reader is fixed when the retriever is made"):
        retriever.invoke("compost", **reader)
    with pytest.raises(InvalidArgument, match="the reader is fixed"):
        asyncio.run(retriever.ainvoke("compost", **reader))
    with pytest.raises(InvalidArgument, match="the reader is fixed"):  # refused beside allowed options too
        retriever.invoke("compost", k=3, **reader)


def test_langchain_reader_cannot_come_from_the_config(world: Groundkit) -> None:
    """Neither the run config's metadata nor its `configurable` changes the reader, and the reader
    and the client cannot be made configurable; the search options can."""
    retriever = gk_langchain.GroundkitRetriever(client=world, reader_sub="t0", k=5)
    assert "course" not in _ids(retriever.invoke("compost", config={"metadata": {"reader_sub": "t3"}}))
    assert "course" not in _ids(retriever.invoke("compost", config={"configurable": {"reader_sub": "t3"}}))
    for field in ("reader_sub", "client"):
        with pytest.raises(InvalidArgument, match="cannot be configurable"):
            retriever.configurable_fields(**{field: ConfigurableField(id="who")})
    sized = retriever.configurable_fields(k=ConfigurableField(id="top_k"))
    assert len(sized.invoke("compost", config={"configurable": {"top_k": 1}})) == 1


def test_langchain_reader_is_fixed_at_construction(world: Groundkit) -> None:
    retriever = gk_langchain.GroundkitRetriever(client=world, reader_sub="t0", k=5)
    with pytest.raises(pydantic.ValidationError):
        retriever.reader_sub = "t3"
    assert "course" not in _ids(retriever.invoke("compost", verbose=True))  # LangChain's own kwarg: taken


@pytest.mark.parametrize("kw", [{"k": 0}, {"k": 201}, {"reader_sub": ""}])
def test_langchain_bad_construction_is_refused(world: Groundkit, kw: dict[str, object]) -> None:
    args: dict[str, object] = {"client": world, "reader_sub": "t0", **kw}
    with pytest.raises(pydantic.ValidationError):
        gk_langchain.GroundkitRetriever(**args)  # type: ignore[arg-type]


# -- async: off the event loop ------------------------------------------------------------------


class _HeldSearch(Groundkit):
    """A client whose search waits until the event loop releases it: if an async retriever ran
    the search on the loop's thread, the loop could not release it, and the search would time
    out. Records the thread each search ran on."""

    def __init__(self, conn: Any) -> None:
        super().__init__(conn)
        self.release = threading.Event()
        self.threads: list[int] = []

    def search(self, *args: Any, **kwargs: Any) -> Any:
        self.threads.append(threading.get_ident())
        if not self.release.wait(10):
            raise AssertionError("the search blocked the event loop that was to release it")
        return super().search(*args, **kwargs)


async def _alongside(call: Any, client: _HeldSearch) -> Any:
    async def release() -> None:
        await asyncio.sleep(0)
        client.release.set()

    result, _ = await asyncio.gather(call, release())
    return result


def test_langchain_ainvoke_does_not_block_the_event_loop(world: Groundkit) -> None:
    client = _HeldSearch(world.conn)
    retriever = gk_langchain.GroundkitRetriever(client=client, reader_sub="t0", k=5)
    docs = asyncio.run(_alongside(retriever.ainvoke("compost", k=1), client))
    assert len(docs) == 1 and docs[0].metadata["object_id"] in {"board", "talk"}
    assert client.threads and client.threads[0] != threading.get_ident()


def test_llamaindex_aretrieve_does_not_block_the_event_loop(world: Groundkit) -> None:
    client = _HeldSearch(world.conn)
    retriever = gk_llamaindex.GroundkitRetriever(client, reader_sub="t0", k=5)
    nodes = asyncio.run(_alongside(retriever.aretrieve(GroundkitQuery("compost", k=1)), client))
    assert len(nodes) == 1 and _node_ids(nodes) <= {"board", "talk"}
    assert client.threads and client.threads[0] != threading.get_ident()


def test_langchain_async_invoke_sees_a_downgrade(world: Groundkit) -> None:
    retriever = gk_langchain.GroundkitRetriever(client=world, reader_sub="t2", k=5)
    assert _ids(asyncio.run(retriever.ainvoke("compost"))) == {"course", "board", "talk"}
    world.put_member("t2", "T0")
    assert _ids(asyncio.run(retriever.ainvoke("compost"))) == {"board", "talk"}


# -- LlamaIndex --------------------------------------------------------------------------------


def test_llamaindex_nodes_carry_the_citation_fields(world: Groundkit) -> None:
    retriever = gk_llamaindex.GroundkitRetriever(world, reader_sub="t2", k=5)
    nodes = retriever.retrieve("compost")
    assert all(isinstance(n, NodeWithScore) for n in nodes)
    by_id = {n.node.metadata["object_id"]: n for n in nodes}
    assert set(by_id) == {"course", "board", "talk"}
    course = by_id["course"]
    assert course.node.get_content() == COURSE_CHUNK
    assert course.node.node_id == "course:1:1"
    assert course.score == course.node.metadata["score"] > 0
    [hit] = [h for h in world.search("t2", "compost", k=5) if h.object_id == "course"]
    assert course.node.metadata == hit.model_dump(mode="json", exclude={"content"})
    scores = [n.score or 0.0 for n in nodes]
    assert scores == sorted(scores, reverse=True)


def test_llamaindex_citation_is_in_llamaindex_own_shape(world: Groundkit) -> None:
    """The node's own offset fields hold the chunk's place in the body, its SOURCE relationship is
    the object (ref_doc_id), and what the LLM reads of the metadata (MetadataMode.LLM) is the
    title, headings, thread and times, never ids, scores or offsets."""
    nodes = {n.node.metadata["object_id"]: n.node for n in
             gk_llamaindex.GroundkitRetriever(world, reader_sub="t2", k=5).retrieve("compost")}
    course = nodes["course"]
    assert isinstance(course, TextNode)
    assert course.ref_doc_id == "course"
    assert course.source_node is not None and course.source_node.metadata["object_version"] == 1
    assert (course.start_char_idx, course.end_char_idx) == (course.metadata["char_start"], course.metadata["char_end"])
    assert SECTION[course.start_char_idx:course.end_char_idx] == course.get_content()
    llm_text = course.get_content(metadata_mode=MetadataMode.LLM)
    assert "title: Soil basics" in llm_text and "heading_path: ['Soil basics', 'Compost']" in llm_text
    assert "score" not in llm_text and "object_id" not in llm_text and "char_start" not in llm_text
    assert "start_ms" not in llm_text  # a section has no times: a null is not shown either
    assert "thread_title: Compost questions" in nodes["board"].get_content(metadata_mode=MetadataMode.LLM)
    talk = nodes["talk"].get_content(metadata_mode=MetadataMode.LLM)
    assert "start_ms: 0" in talk and "end_ms: 4000" in talk
    assert nodes["talk"].get_content(metadata_mode=MetadataMode.EMBED) == talk


def test_llamaindex_citation_query_engine_cites_the_chunks(world: Groundkit) -> None:
    """LlamaIndex's CitationQueryEngine (a mock LLM, no network) numbers the retriever's nodes as
    sources and keeps each one's metadata and document: the app can map "[1]" back to groundkit."""
    engine = CitationQueryEngine(retriever=gk_llamaindex.GroundkitRetriever(world, "t2", k=5), llm=MockLLM(),
                                 metadata_mode=MetadataMode.LLM)
    response = engine.query(GroundkitQuery("compost", content_types=["course_section", "transcript"]))
    sources = response.source_nodes
    assert [n.node.get_content().split("\n", 1)[0] for n in sources] == ["Source 1:", "Source 2:"]
    texts = "\n".join(n.node.get_content() for n in sources)
    assert "title: Soil basics" in texts and "title: Compost talk" in texts and "object_id" not in texts
    assert {n.node.ref_doc_id for n in sources} == {"course", "talk"}
    assert {(n.node.ref_doc_id, n.node.metadata["chunk_seq"]) for n in sources} == {("course", 1), ("talk", 0)}


def test_llamaindex_options_per_call(world: Groundkit) -> None:
    """GroundkitQuery sets k, content types, spaces and mode for one call, through retrieve,
    aretrieve and a query engine that hands the bundle on; the retriever's own are used otherwise."""
    retriever = gk_llamaindex.GroundkitRetriever(world, reader_sub="t2", k=5)
    assert len(retriever.retrieve(GroundkitQuery("compost", k=2))) == 2
    assert _node_ids(retriever.retrieve(GroundkitQuery("compost", content_types=["transcript"]))) == {"talk"}
    assert _node_ids(retriever.retrieve(GroundkitQuery("compost", space_ids=["members"]))) == {"course"}
    nodes = retriever.retrieve(GroundkitQuery("compost", mode="bm25"))
    assert len(nodes) == 3 and all(n.node.metadata["dense_rank"] is None for n in nodes)
    assert len(asyncio.run(retriever.aretrieve(GroundkitQuery("compost", k=1)))) == 1
    assert len(retriever.retrieve(QueryBundle("compost"))) == 3
    engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM())
    assert len(engine.query(GroundkitQuery("compost", k=1)).source_nodes) == 1
    with pytest.raises(Exception, match="no embedding model is active"):
        retriever.retrieve(GroundkitQuery("compost", mode="dense"))


@pytest.mark.parametrize("bad", [{"k": 0}, {"k": 201}, {"mode": "semantic"}, {"space_ids": "members"}])
def test_llamaindex_bad_options_per_call_are_refused(world: Groundkit, bad: dict[str, Any]) -> None:
    retriever = gk_llamaindex.GroundkitRetriever(world, reader_sub="t2", k=5)
    with pytest.raises(InvalidArgument):
        retriever.retrieve(GroundkitQuery("compost", **bad))


def test_llamaindex_downgrade_between_two_calls_removes_the_hit(world: Groundkit) -> None:
    retriever = gk_llamaindex.GroundkitRetriever(world, reader_sub="t2", k=5)
    assert "course" in _node_ids(retriever.retrieve("compost"))
    world.put_member("t2", "T1")
    assert _node_ids(retriever.retrieve(QueryBundle("compost"))) == {"board", "talk"}
    world.delete_object("board", 2)
    assert _node_ids(retriever.retrieve("compost")) == {"talk"}
    assert _node_ids(asyncio.run(retriever.aretrieve("compost"))) == {"talk"}


@pytest.mark.parametrize("spelling", READER_SPELLINGS)
def test_llamaindex_reader_per_call_is_refused_in_any_spelling(world: Groundkit, spelling: str) -> None:
    retriever = gk_llamaindex.GroundkitRetriever(world, reader_sub="t0", k=5)
    reader: dict[str, Any] = {spelling: "t3"}
    with pytest.raises(TypeError):
        retriever.retrieve("compost", **reader)
    with pytest.raises(TypeError):
        GroundkitQuery("compost", **reader)


def test_llamaindex_reader_is_fixed_at_construction(world: Groundkit) -> None:
    retriever = gk_llamaindex.GroundkitRetriever(world, reader_sub="t0", k=5)
    with pytest.raises(AttributeError):
        retriever.reader_sub = "t3"  # type: ignore[misc]
    with pytest.raises(InvalidArgument):
        gk_llamaindex.GroundkitRetriever(world, reader_sub="t0", k=0)


def test_the_docs_example_runs_as_written(dsn: str, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """docs/integrations.md's example, executed: it prints what its comments say."""
    text = (Path(__file__).parent.parent / "docs" / "integrations.md").read_text(encoding="utf-8")
    code = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    monkeypatch.setenv("GROUNDKIT_DSN", dsn)
    # The example's migrate() is the gated one: on a configuration no gate run has certified it
    # runs the gate first (about a minute; tests/test_governance.py's subject). Certified here,
    # it reuses the certificate, as a deployment's second migrate does.
    certify(dsn)
    exec(compile(code, "docs/integrations.md", "exec"), {})  # our own documentation's example
    printed = capsys.readouterr().out.splitlines()
    promised = [line.split("# ", 1)[1] for line in code.splitlines() if "print(" in line]
    assert printed == promised


# -- the async client, natively ------------------------------------------------------------------

def _with_async_client(dsn: str, body: Any) -> Any:
    """``body(client)`` with an AsyncGroundkit, on one event loop."""
    from groundkit import AsyncGroundkit

    async def main() -> Any:
        async with await AsyncGroundkit.connect(dsn) as client:
            return await body(client)

    return asyncio.run(main())


def test_langchain_ainvoke_awaits_an_async_client_on_the_loop(world: Groundkit, dsn: str) -> None:
    """Given an AsyncGroundkit, ainvoke awaits its search on the caller's loop (no worker thread):
    the same documents, per-call options and permission rule as the sync client's."""
    sync_docs = gk_langchain.GroundkitRetriever(client=world, reader_sub="t2").invoke("compost", k=2)

    async def body(client: Any) -> Any:
        loop_thread = threading.get_ident()
        seen: list[int] = []
        real = client.search

        async def spy(*args: Any, **kwargs: Any) -> Any:
            seen.append(threading.get_ident())
            return await real(*args, **kwargs)

        client.search = spy
        retriever = gk_langchain.GroundkitRetriever(client=client, reader_sub="t2")
        docs = await retriever.ainvoke("compost", k=2)
        t0 = await gk_langchain.GroundkitRetriever(client=client, reader_sub="t0").ainvoke("compost")
        with pytest.raises(InvalidArgument, match="reader"):
            await retriever.ainvoke("compost", reader_sub="t3")
        with pytest.raises(InvalidArgument, match="async entry point"):
            retriever.invoke("compost")
        return docs, t0, seen, loop_thread

    docs, t0, seen, loop_thread = _with_async_client(dsn, body)
    assert [d.id for d in docs] == [d.id for d in sync_docs] and len(docs) == 2
    assert "course" not in _ids(t0)  # a T2 section: never a T0 reader's
    assert seen and set(seen) == {loop_thread}


def test_llamaindex_aretrieve_awaits_an_async_client_on_the_loop(world: Groundkit, dsn: str) -> None:
    sync_nodes = gk_llamaindex.GroundkitRetriever(world, "t2").retrieve(GroundkitQuery("compost", k=2))

    async def body(client: Any) -> Any:
        retriever = gk_llamaindex.GroundkitRetriever(client, "t2")
        nodes = await retriever.aretrieve(GroundkitQuery("compost", k=2))
        t0 = await gk_llamaindex.GroundkitRetriever(client, "t0").aretrieve("compost")
        return nodes, t0

    nodes, t0 = _with_async_client(dsn, body)
    assert [n.node.node_id for n in nodes] == [n.node.node_id for n in sync_nodes] and len(nodes) == 2
    assert "course" not in _node_ids(t0)

