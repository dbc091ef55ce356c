"""The LangChain and LlamaIndex retrievers, with the real libraries, on a real PostgreSQL: their
documents/nodes carry the citation fields, the reader is fixed at construction, and a downgrade
between two calls of the same retriever object removes the hit at the next call (what a vector
store with permission metadata stamped at ingest keeps returning)."""

from __future__ import annotations

import re
from pathlib import Path

import pydantic
import pytest
from langchain_core.documents import Document
from llama_index.core.schema import NodeWithScore, QueryBundle

from groundkit import Groundkit, InvalidArgument
from groundkit.integrations import langchain as gk_langchain
from groundkit.integrations import llamaindex as gk_llamaindex


@pytest.fixture
def world(community: Groundkit) -> Groundkit:
    gk = community
    gk.put_object("course", 1, "course_section", "members", "T2", "Soil basics", "compost turns waste into soil")
    gk.put_object("board", 1, "board_post", "open", "T0", "Compost day", "bring compost buckets on saturday")
    gk.put_object("talk", 1, "transcript", "open", "T0", "Compost talk", "",
                  segments=[{"start_ms": 0, "end_ms": 4000, "text": "welcome to the compost talk"}])
    return gk


def test_langchain_documents_carry_the_citation_fields(world: Groundkit) -> None:
    retriever = gk_langchain.GroundkitRetriever(client=world, reader_sub="t2", k=5)
    docs = retriever.invoke("compost")
    assert all(isinstance(d, Document) for d in docs)
    by_id = {d.metadata["object_id"]: d for d in docs}
    assert set(by_id) == {"course", "board", "talk"}
    course = by_id["course"]
    assert course.page_content == "compost turns waste into soil"
    assert course.id == "course:1:0"
    assert {"object_id", "object_version", "chunk_seq", "space_id", "content_type", "title", "score",
            "start_ms", "end_ms"} <= set(course.metadata)
    assert (course.metadata["space_id"], course.metadata["content_type"], course.metadata["title"]) == (
        "members", "course_section", "Soil basics")
    assert course.metadata["score"] > 0
    assert (by_id["talk"].metadata["start_ms"], by_id["talk"].metadata["end_ms"]) == (0, 4000)


def test_langchain_metadata_is_every_field_of_the_hit_but_its_text(world: Groundkit) -> None:
    [hit] = world.search("t2", "soil", k=1)
    [doc] = gk_langchain.GroundkitRetriever(client=world, reader_sub="t2", k=1).invoke("soil")
    assert doc.metadata == hit.model_dump(exclude={"content"})


def test_langchain_downgrade_between_two_calls_removes_the_hit(world: Groundkit) -> None:
    retriever = gk_langchain.GroundkitRetriever(client=world, reader_sub="t2", k=5)
    assert "course" in {d.metadata["object_id"] for d in retriever.invoke("compost")}
    world.put_member("t2", "T1")
    assert {d.metadata["object_id"] for d in retriever.invoke("compost")} == {"board", "talk"}
    world.put_member("t2", "T2", "suspended")
    assert retriever.invoke("compost") == []


def test_langchain_reader_is_fixed_at_construction(world: Groundkit) -> None:
    retriever = gk_langchain.GroundkitRetriever(client=world, reader_sub="t0", k=5)
    with pytest.raises(InvalidArgument, match="takes the query only"):
        retriever.invoke("compost", reader_sub="t3")
    with pytest.raises(pydantic.ValidationError):
        retriever.reader_sub = "t3"
    assert "course" not in {d.metadata["object_id"] for d in retriever.invoke("compost", config={"metadata": {
        "reader_sub": "t3"}})}


@pytest.mark.parametrize("kw", [{"k": 0}, {"k": 201}, {"reader_sub": ""}])
def test_langchain_bad_construction_is_refused(world: Groundkit, kw: dict[str, object]) -> None:
    args: dict[str, object] = {"client": world, "reader_sub": "t0", **kw}
    with pytest.raises(pydantic.ValidationError):
        gk_langchain.GroundkitRetriever(**args)  # type: ignore[arg-type]


def test_langchain_filters(world: Groundkit) -> None:
    retriever = gk_langchain.GroundkitRetriever(client=world, reader_sub="t2", k=5, content_types=("transcript",))
    assert [d.metadata["object_id"] for d in retriever.invoke("compost")] == ["talk"]
    retriever = gk_langchain.GroundkitRetriever(client=world, reader_sub="t2", k=5, space_ids=("members",))
    assert [d.metadata["object_id"] for d in retriever.invoke("compost")] == ["course"]


async def _ainvoke(retriever: gk_langchain.GroundkitRetriever, query: str) -> list[Document]:
    return await retriever.ainvoke(query)


def test_langchain_async_invoke(world: Groundkit) -> None:
    import asyncio

    retriever = gk_langchain.GroundkitRetriever(client=world, reader_sub="t0", k=5)
    assert {d.metadata["object_id"] for d in asyncio.run(_ainvoke(retriever, "compost"))} == {"board", "talk"}


def test_llamaindex_nodes_carry_the_citation_fields(world: Groundkit) -> None:
    retriever = gk_llamaindex.GroundkitRetriever(world, reader_sub="t2", k=5)
    nodes = retriever.retrieve("compost")
    assert all(isinstance(n, NodeWithScore) for n in nodes)
    by_id = {n.node.metadata["object_id"]: n for n in nodes}
    assert set(by_id) == {"course", "board", "talk"}
    course = by_id["course"]
    assert course.node.get_content() == "compost turns waste into soil"
    assert course.node.node_id == "course:1:0"
    assert course.score == course.node.metadata["score"] > 0
    [hit] = [h for h in world.search("t2", "compost", k=5) if h.object_id == "course"]
    assert course.node.metadata == hit.model_dump(exclude={"content"})
    scores = [n.score or 0.0 for n in nodes]
    assert scores == sorted(scores, reverse=True)


def test_llamaindex_downgrade_between_two_calls_removes_the_hit(world: Groundkit) -> None:
    retriever = gk_llamaindex.GroundkitRetriever(world, reader_sub="t2", k=5)
    assert "course" in {n.node.metadata["object_id"] for n in retriever.retrieve("compost")}
    world.put_member("t2", "T1")
    assert {n.node.metadata["object_id"] for n in retriever.retrieve(QueryBundle("compost"))} == {"board", "talk"}
    world.delete_object("board", 2)
    assert {n.node.metadata["object_id"] for n in retriever.retrieve("compost")} == {"talk"}


def test_llamaindex_reader_is_fixed_at_construction(world: Groundkit) -> None:
    retriever = gk_llamaindex.GroundkitRetriever(world, reader_sub="t0", k=5)
    with pytest.raises(AttributeError):
        retriever.reader_sub = "t3"  # type: ignore[misc]
    with pytest.raises(TypeError):
        retriever.retrieve("compost", reader_sub="t3")
    with pytest.raises(InvalidArgument):
        gk_llamaindex.GroundkitRetriever(world, reader_sub="t0", k=0)


def test_the_docs_example_runs_as_written(dsn: str, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """docs/integrations.md's example, executed: it prints what its comments say."""
    text = (Path(__file__).parent.parent / "docs" / "integrations.md").read_text(encoding="utf-8")
    code = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    monkeypatch.setenv("GROUNDKIT_DSN", dsn)
    exec(compile(code, "docs/integrations.md", "exec"), {})  # our own documentation's example
    printed = capsys.readouterr().out.splitlines()
    promised = [line.split("# ", 1)[1] for line in code.splitlines() if "print(" in line]
    assert printed == promised
