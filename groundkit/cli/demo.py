"""``groundkit demo``: permission-correct retrieval on a small sample community.

The demo writes into its own database, ``groundkit_demo``, created afresh on the target server
(the embedded one by default), so it never touches your data and can be run again and again. It
stays for you to explore; while a session is connected to it, the next demo refuses (GK028)
rather than end that session.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any, Literal

from psycopg.conninfo import conninfo_to_dict, make_conninfo
from pydantic import BaseModel, ConfigDict
from rich.markup import escape
from rich.panel import Panel
from rich.rule import Rule
from rich.table import Table

import groundkit
from groundkit.cli import citations
from groundkit.cli._common import DsnOption, handle_errors, out
from groundkit.client import Groundkit, resolve_dsn
from groundkit.databases import fresh_database
from groundkit.models import ContentObject, SearchHit

DEMO_DATABASE = "groundkit_demo"


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DemoMember(_Strict):
    member_sub: str
    name: str
    tier: str
    status: Literal["active", "pending", "suspended", "revoked"]


class DemoSpace(_Strict):
    space_id: str
    name: str
    min_tier: str
    private: bool


class DemoGrant(_Strict):
    space_id: str
    member_sub: str


class Community(_Strict):
    members: tuple[DemoMember, ...]
    spaces: tuple[DemoSpace, ...]
    grants: tuple[DemoGrant, ...]
    objects: tuple[ContentObject, ...]
    demo: dict[str, Any]


def load_community() -> Community:
    text = resources.files("groundkit").joinpath("demo_data/community.json").read_text(encoding="utf-8")
    return Community.model_validate(json.loads(text))


def _matrix(results: dict[str, list[SearchHit]], community: Community, spaces: dict[str, str]) -> Table:
    """Rows: every object any reader found. Columns: readers, showing the rank they got it at."""
    table = Table(title_justify="left", show_lines=False, pad_edge=False)
    table.add_column("object", overflow="fold", max_width=34)
    table.add_column("tier", justify="center")
    table.add_column("where", overflow="fold", max_width=18)
    for m in community.members:
        table.add_column(f"{m.member_sub}\n{m.tier}", justify="center")
    found = {h.object_id for hits in results.values() for h in hits}
    for obj in community.objects:
        if obj.object_id not in found:
            continue
        cells = []
        for m in community.members:
            ranks = [i for i, h in enumerate(results[m.member_sub], start=1) if h.object_id == obj.object_id]
            cells.append(f"[green]#{ranks[0]}[/]" if ranks else "[dim]-[/]")
        where = spaces.get(obj.space_id, obj.space_id)
        if obj.owner_only:
            where = f"{obj.owner_sub}'s note"
        table.add_row(obj.title, obj.tier_visibility, where, *cells)
    table.add_row("[bold]results[/]", "", "", *(f"[bold]{len(results[m.member_sub])}[/]" for m in community.members))
    return table


def _ids(hits: list[SearchHit]) -> set[str]:
    return {h.object_id for h in hits}


def _citations(gk: Groundkit, community: Community) -> None:
    """Step 5: every hit cites where it lies (docs/sql-api.md, "Citations"), made so by each
    content type's chunker (docs/chunking.md): a moment of a recording, a reply found through its
    thread's subject, a section under its headings; each with its snippet, the matches bold."""
    cites = community.demo["citations"]
    reader = str(cites["reader"])
    out.print(Rule("5. Hits you can cite: a moment, a thread, a section"))
    hits: dict[str, SearchHit] = {}
    for kind in ("transcript", "thread", "section"):
        query, wanted = str(cites[kind]["query"]), str(cites[kind]["object_id"])
        hit = hits[kind] = next(h for h in gk.search(reader, query) if h.object_id == wanted)
        if kind == "transcript" and hit.start_ms is not None:
            where = f"at [bold]{citations.clock(hit.start_ms)}[/] of {escape(repr(hit.title))}"
        elif kind == "thread":
            where = f"{escape(repr(hit.title))}, a reply in the thread [bold]{escape(repr(hit.thread_title))}[/]"
        else:
            where = escape(" \u203a ".join(hit.heading_path or (hit.title,)))
        out.print(f"{escape(repr(query))} -> {where}", highlight=False)
        out.print(f"  {citations.snippet_markup(hit.snippet or '')}", highlight=False)
    if "<mark>" not in (hits["thread"].snippet or ""):
        out.print("The reply's own text has none of the query's words: its thread's subject is indexed with it.")
    section = hits["section"]
    cited = gk.fetch_citation(reader, section.object_id, section.object_version, section.chunk_seq)
    assert cited is not None, "the reader who found the section cannot cite it"
    out.print(f"groundkit.fetch_citation returns the cited chunk with its whole section ({len(cited.context)} "
              "characters), under the same permission check as search.\n")


def _hybrid(gk: Groundkit, community: Community) -> None:
    """Step 6, with the ``embed`` extra: the local model turned on as ``groundkit dense enable``
    does (groundkit.dense_enable; the demo's own database, so the switch is the bare cutover), then
    a paraphrase that shares no word with the post it means: BM25 finds nothing, hybrid finds the
    post. Without the extra (or pgvector), one line says how to get it."""
    from groundkit import embedding, model_swap
    from groundkit.dense_enable import enable
    from groundkit.errors import EmbeddingProviderError, PgvectorMissing

    para = community.demo["paraphrase"]
    reader, query, wanted = str(para["reader"]), str(para["query"]), str(para["object_id"])
    out.print(Rule("6. Hybrid search: a paraphrase BM25 cannot match"))
    try:
        embedding.require_dense(gk)
        report = enable(gk, lambda name, force: model_swap.cutover(gk, name, force=force))
    except (EmbeddingProviderError, PgvectorMissing) as exc:
        out.print(f"[dim]Skipped: {escape(str(exc))}. With it, `groundkit dense enable` turns on hybrid search.[/]\n",
                  highlight=False)
        return
    titles = {o.object_id: o.title for o in community.objects}
    bm25 = gk.search(reader, query, mode="bm25")
    hybrid = gk.search(reader, query, mode="hybrid", k=3)
    out.print(f"The local model embedded {report.chunks} chunks in {report.seconds:.1f} s and became the active "
              "model (what [cyan]groundkit dense enable[/] does), so search's default mode is now hybrid.")
    out.print(f"{escape(repr(query))} as {reader}: BM25 "
              + (f"finds {len(bm25)} result(s), not the post" if bm25 else "finds nothing (no chunk has these words)")
              + "; hybrid:", highlight=False)
    for n, h in enumerate(hybrid, start=1):
        legs = f"dense #{h.dense_rank}" + (f", BM25 #{h.bm25_rank}" if h.bm25_rank is not None else "")
        out.print(f"  #{n} {escape(titles.get(h.object_id, h.object_id))} ({legs})", highlight=False)
    assert wanted in _ids(hybrid) and wanted not in _ids(bm25), "the paraphrase no longer shows what it should"
    out.print("Both legs run inside one query under the same permission predicate: hybrid returns nothing the "
              "reader may not see.\n")


@handle_errors
def demo(dsn: DsnOption = None) -> None:
    """Load a sample community and watch permissions work: tiers, downgrades, private boards, deletes."""
    community = load_community()
    target = resolve_dsn(dsn)
    demo_dsn = fresh_database(target, DEMO_DATABASE)
    where = conninfo_to_dict(demo_dsn).get("host", "localhost")
    out.print(Rule("[bold]groundkit demo[/]"))
    out.print(f"Database [cyan]{DEMO_DATABASE}[/] on {where} (created afresh for this run).")
    # The demo's own database serves no one: migrated without the gate (docs/governance.md), so it
    # stays uncertified, and `groundkit serve` refuses it unless started with --allow-ungated.
    state = groundkit.migrate(demo_dsn, gate=False)
    out.print(f"Schema migrated to revision {state.head}.\n")

    q = str(community.demo["query"])
    space_names = {s.space_id: s.name for s in community.spaces}
    names = {m.member_sub: m.name for m in community.members}
    titles = {o.object_id: o.title for o in community.objects}

    with Groundkit.connect(demo_dsn) as gk:
        for m in community.members:
            gk.put_member(m.member_sub, m.tier, m.status)
        for s in community.spaces:
            gk.put_space(s.space_id, s.min_tier, s.private)
        for g in community.grants:
            gk.grant_space(g.space_id, g.member_sub)
        for obj in community.objects:
            gk.put(obj)

        members = Table(title="The Northwind Makers Guild", title_justify="left")
        members.add_column("member")
        members.add_column("tier", justify="center")
        members.add_column("can also read")
        granted = {g.member_sub: g.space_id for g in community.grants}
        for m in community.members:
            extra = space_names[granted[m.member_sub]] + " (private board)" if m.member_sub in granted else ""
            members.add_row(f"{m.name} ({m.member_sub})", m.tier, extra)
        out.print(members)
        out.print(f"{len(community.objects)} objects in {len(community.spaces)} spaces: course sections, board "
                  "posts, an event, talk transcripts, personal notes.\n")

        out.print(Rule(f"1. The same query, {len(community.members)} readers: [bold]{q!r}[/]"))
        results = {m.member_sub: gk.search(m.member_sub, q) for m in community.members}
        out.print(_matrix(results, community, space_names))
        out.print(Panel("Each column is one call to groundkit.search. The permission check is a predicate inside the "
                        "ranking query, joined against the reader's [bold]live[/] tier, the space policy and the "
                        "grants. Personal notes reach only their owner, the private board only the member with "
                        "a grant. Scores use statistics of the content each tier may see, so they differ "
                        "by reader.", expand=False))

        down = community.demo["downgrade"]
        who, obj_id = str(down["member_sub"]), str(down["object_id"])
        before = gk.search(who, q)
        out.print(Rule(f"2. {names[who]} is downgraded from {down['from']} to {down['to']}"))
        gk.put_member(who, str(down["to"]))
        after = gk.search(who, q)
        gone = sorted(_ids(before) - _ids(after))
        out.print(f"Before: {len(before)} results. The very next query: {len(after)} results.")
        out.print(f"[red]Gone:[/] {', '.join(titles[i] for i in gone)}")
        assert obj_id in gone, "the downgraded member still sees the T2 post"
        out.print("No re-index, no cache to expire: the tier is read when the query runs.\n")

        board = str(community.demo["make_private"]["space_id"])
        readers = [m.member_sub for m in community.members]
        before_by = {r: _ids(gk.search(r, q)) for r in readers}
        out.print(Rule(f"3. {space_names[board]} is made private"))
        min_tier = next(s.min_tier for s in community.spaces if s.space_id == board)
        gk.put_space(board, min_tier, private=True)
        for r in readers:
            lost = sorted(before_by[r] - _ids(gk.search(r, q)))
            if lost:
                out.print(f"{names[r]} no longer sees: {', '.join(titles[i] for i in lost)}")
        regained = next(r for r in readers if r != who and before_by[r] - _ids(gk.search(r, q)))
        gk.grant_space(board, regained)
        back = sorted(_ids(gk.search(regained, q)) & before_by[regained] - _ids(gk.search(who, q)))
        out.print(f"A grant gives {names[regained]} access again, and nobody else: "
                  f"{', '.join(titles[i] for i in back)}.\n")

        victim = str(community.demo["delete"]["object_id"])
        original = next(o for o in community.objects if o.object_id == victim)
        out.print(Rule("4. A post is deleted, then its old insert is retried"))
        out.print(f"Deleting {titles[victim]!r}.")
        deleted = gk.delete_object(victim, original.version + 1)
        out.print(f"delete_object(version {original.version + 1}) -> [bold]{deleted.status.value}[/]")
        for attempt in (original, original.model_copy(update={"version": original.version + 5})):
            retry = gk.put(attempt)
            out.print(f"put_object(version {attempt.version}) retried -> [bold]{retry.status.value}[/]")
        still = [r for r in readers if victim in _ids(gk.search(r, q))]
        out.print("Nobody sees it: the tombstone is durable, whatever version a late write carries.\n"
                  if not still else f"[red]still visible to {still}[/]")

        _citations(gk, community)
        _hybrid(gk, community)

        out.print(Rule("7. The log and its derived views"))
        marker = gk.snapshot_marker()
        checksum = gk.state_checksum()
        rebuilt = gk.rebuild()
        same = gk.state_checksum() == checksum
        out.print(f"Log snapshot marker: [bold]{marker}[/] (the high-water mark a retrieval set can pin).")
        out.print(f"Rebuilt {rebuilt} objects from the log; derived-state checksum "
                  f"{'[green]unchanged[/]' if same else '[red]CHANGED[/]'} ({checksum[:16]}...).")
    out.print(Rule())
    # the DSN without its password: a terminal's scrollback and a CI log are not for credentials
    params = conninfo_to_dict(demo_dsn)
    hidden = params.pop("password", None) is not None
    out.print("Try it yourself: [cyan]groundkit search --as tess 'pricing' --dsn "
              f"'{escape(make_conninfo('', **params))}'[/]"
              + (" (with the password from PGPASSWORD or ~/.pgpass)" if hidden else ""))
