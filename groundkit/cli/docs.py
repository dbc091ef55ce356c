"""docs/cli.md and the pages under docs/cli/, generated from each command's ``--help``:
``python -m groundkit.cli.docs`` writes them into docs/ (or the directory given).
tests/test_cli.py fails when a page differs from what this writes, so the pages cannot drift
from the commands. Help is rendered by click's plain formatter (no rich boxes or colours) at a
fixed width, so the output does not depend on the terminal.

docs/cli.md is the index; the commands are split by who runs them (PAGES), one page each."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
import typer.core

WIDTH = 100

INTRO = """\
# The `groundkit` command line

A thin layer over the Python API. Results go to stdout; progress and errors go to stderr, errors
as one line with their SQLSTATE, and exit status 1. Every command that talks to a database takes
`--dsn`; without it `GROUNDKIT_DSN` is used, and without that the embedded PostgreSQL (started on
first use; `GROUNDKIT_HOME` sets where its data lives). An unknown `GROUNDKIT_*` environment
variable is an error at startup. No error shows a password: a DSN the driver cannot read is
reported as malformed without being shown, and other connection errors show `***` in its place.
Operating a deployment (the worker, status, upgrades, roles): [operations.md](operations.md).

These pages are generated from each command's `--help` (`python -m groundkit.cli.docs`); a test
fails when they differ.
"""

# Who runs a command, by its first word: (page, title, the page's one-line purpose).
PAGES: dict[str, tuple[str, str]] = {
    "cli/content.md": ("Content and reading", "load members, spaces and content; search, cite and browse as a member"),
    "cli/operations.md": ("Operations", "the schema, the index and its worker, configuration and the embedded "
                                        "server"),
    "cli/serving.md": ("Serving", "the MCP and HTTP servers and the console, their tokens, and the outbound "
                                  "policy for what may leave for a provider"),
    "cli/embeddings.md": ("Embeddings", "dense retrieval: embedding models, embedding the chunks, building "
                                        "another model beside the active one and cutting over to it"),
    "cli/audit.md": ("Audit and evaluation", "runs and their replay, the spend, the permission gate and the "
                                             "quality evals"),
}
PAGE_OF: dict[str, str] = {
    "demo": "cli/content.md", "put-member": "cli/content.md", "put-space": "cli/content.md",
    "ingest": "cli/content.md", "search": "cli/content.md", "cite": "cli/content.md", "home": "cli/content.md",
    "migrate": "cli/operations.md", "rebuild": "cli/operations.md", "analyze": "cli/operations.md",
    "status": "cli/operations.md", "merge": "cli/operations.md", "worker": "cli/operations.md",
    "config": "cli/operations.md", "db": "cli/operations.md",
    "serve": "cli/serving.md", "tokens": "cli/serving.md", "outbound": "cli/serving.md",
    "dense": "cli/embeddings.md", "embed": "cli/embeddings.md", "models": "cli/embeddings.md",
    "reindex": "cli/embeddings.md", "cutover": "cli/embeddings.md",
    "shadow-compare": "cli/embeddings.md", "explain": "cli/audit.md",
    "runs": "cli/audit.md", "replay": "cli/audit.md", "costs": "cli/audit.md", "eval": "cli/audit.md",
    "audit": "cli/audit.md",
}

# One example per command; a command without one gets none.
EXAMPLES: dict[str, str] = {
    "migrate": "$ groundkit migrate --list   # applied and pending revisions\n"
               "$ groundkit migrate          # the gate's migrate sections first, then the migration\n"
               "$ groundkit migrate --skip-gate --reason 'hotfix 4711; full gate ran in CI'   # a recorded bypass",
    "put-member": "$ groundkit put-member ana T2\nmember ana: T2, active",
    "put-space": "$ groundkit put-space studio --min-tier T1 --private\nspace studio: min tier T1, private",
    "ingest": "$ groundkit ingest posts.jsonl --batch 500\n"
              '# one put_object payload per line, e.g.\n'
              '# {"object_id": "p1", "version": 1, "content_type": "board_post", "space_id": "commons",\n'
              '#  "tier_visibility": "T0", "title": "Pricing", "body": "How to price a commission"}',
    "rebuild": "$ groundkit rebuild\nrebuilt 20000 object(s) from the log",
    "analyze": "$ groundkit analyze --if-grown 0.1",
    "status": "$ groundkit status --json | jq .due",
    "merge": "$ groundkit merge\nmerged 4096 pending posting(s)",
    "worker": "$ groundkit worker --every 60\n$ groundkit worker --once --json",
    "embed": '$ groundkit embed --json\n{"model": "minilm", "chunks": 5183, "seconds": 61.2, "chunks_per_s": 84.7}',
    "dense enable": "$ pip install 'groundkit[embed]'\n$ groundkit dense enable\n"
                    "minilm: registered, embedded 5,183 chunk(s) in 61.2 s (84.7/s); active now that every chunk "
                    "is embedded. ...",
    "cutover": "$ groundkit cutover --model bge\nactive embedding model: bge (was minilm)\n"
               "cutover: certified (ledger row 12; the gate passed (137/137 checks, 24.0 s); configuration 3f2a…)",
    "search": '$ groundkit search --as ana "price a commission" -k 5',
    "explain": '$ groundkit explain --reader ana --object post-kiln --query "kiln schedule"',
    "demo": "$ groundkit demo",
    "home": "$ groundkit home --reader ana --mode top -k 10",
    "db url": "$ export GROUNDKIT_DSN=$(groundkit db url)",
    "db status": "$ groundkit db status",
    "db stop": "$ groundkit db stop",
    "config set-bm25": "$ groundkit config set-bm25 1.2 0.75",
    "config set-chunk-sizes": "$ groundkit config set-chunk-sizes transcript --chars 1000 --overlap 150",
    "config set-search-mode": "$ groundkit config set-search-mode transcript hybrid --dense-weight 2\n"
                              "transcript: auto runs hybrid (dense_weight 2)",
    "config search-modes": "$ groundkit config search-modes",
    "eval quality": "$ groundkit eval quality --dataset data/scifact --arm bm25 --arm dense --arm hybrid\n"
                    "$ groundkit eval quality --dataset ../shared/datasets/qmsum-transcripts --view turns "
                    "--scope meeting",
    "eval propose": "$ groundkit eval export-samples --out labels.jsonl   # then fill in each relevance\n"
                    "$ groundkit eval propose --labels labels.jsonl\n"
                    "$ groundkit eval propose --labels labels.jsonl --apply",
    "eval gate": "$ groundkit eval gate --embedded\n"
                 "$ groundkit eval gate --dsn $PROD_LIKE --bundle gate.json --key-env GATE_SIGNING_KEY",
    "audit keygen": "$ groundkit audit keygen --private-key ops.pem --public-key ops.pub",
    "audit checkpoint": "$ groundkit audit checkpoint --key ops.pem --out checkpoints/$(date +%F).json",
    "audit verify": "$ groundkit audit verify --checkpoint cp/2026-12-01.json --checkpoint cp/2026-12-05.json "
                    "--public-key ops.pub",
    "audit verify-bundle": "$ groundkit audit verify-bundle run.json --public-key ops.pub",
    "runs export": "$ groundkit runs export 3f0c7c2e-8d5b-4c61-9a4e-0d6f5b1e2a11 --bundle run.json --key ops.pem",
    "serve mcp": "$ groundkit serve mcp --reader ana                 # stdio, for a local agent\n"
                 "$ groundkit serve mcp --transport http --port 8001  # streamable HTTP at /mcp, bearer tokens",
    "serve http": "$ groundkit serve http --port 8000\n"
                  "$ curl -H \"Authorization: Bearer $TOKEN\" -d '{\"query\": \"pricing\"}' localhost:8000/v1/search",
    "serve console": "$ groundkit tokens create --console ops --expires 12h | tail -n 1   # the login\n"
                     "$ groundkit serve console   # http://127.0.0.1:8002/, on loopback",
    "tokens create": "$ TOKEN=$(groundkit tokens create ana --expires 30d | tail -n 1)",
    "tokens revoke": "$ groundkit tokens revoke ana\nrevoked 1 token(s) of ana",
    "outbound allow": "$ groundkit outbound private-origin add http://10.0.0.5:11434 --reason 'the GPU box'\n"
                      "$ groundkit outbound allow private --max-tier T2 --queries --reason 'the GPU box'",
    "outbound scrub": "$ groundkit outbound scrub cloud email phone url_credentials secrets member_names "
                      "--reason 'names too'",
    "outbound decisions": "$ groundkit outbound decisions --since 7d",
}


# (contexts are typed Any: they are click's, which typer vendors in some versions and not others)
def _commands(group: typer.core.TyperGroup, ctx: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is None or cmd.hidden:
            continue
        sub = cmd.make_context(name, [], parent=ctx, resilient_parsing=True)
        if isinstance(cmd, typer.core.TyperGroup):
            yield from _commands(cmd, sub, f"{prefix}{name} ")
        else:
            yield f"{prefix}{name}", sub


def _plain_help(ctx: Any) -> str:
    cmd = ctx.command
    mode = getattr(cmd, "rich_markup_mode", None)
    cmd.rich_markup_mode = None  # (typer then renders with click's plain formatter)
    try:
        return str(cmd.get_help(ctx)).rstrip()
    finally:
        cmd.rich_markup_mode = mode


def _anchor(name: str) -> str:
    return "groundkit-" + name.replace(" ", "-")


def render() -> dict[str, str]:
    """Every page, by its path under docs/: the index (cli.md) and one page per PAGES entry."""
    from groundkit.cli import app

    root = typer.main.get_command(app)
    assert isinstance(root, typer.core.TyperGroup)
    top = root.make_context("groundkit", [], resilient_parsing=True, terminal_width=WIDTH, max_content_width=WIDTH)
    commands = list(_commands(root, top))
    unplaced = sorted({name.split()[0] for name, _ctx in commands} - set(PAGE_OF))
    if unplaced:
        raise SystemExit(f"no page in groundkit/cli/docs.py PAGE_OF for: {', '.join(unplaced)}")
    index = [INTRO]
    pages: dict[str, str] = {}
    for path, (title, purpose) in PAGES.items():
        mine = [(name, ctx) for name, ctx in commands if PAGE_OF[name.split()[0]] == path]
        # (the docstring's first paragraph, whole)
        summaries = [f"- [`groundkit {name}`]({path}#{_anchor(name)}): "
                     + " ".join((ctx.command.help or "").split("\n\n")[0].split()).rstrip(".")
                     for name, ctx in mine]
        index += [f"## {title}\n", f"[{path}]({path}): {purpose}.\n", *summaries, ""]
        parts = [f"# The command line: {title.lower()}\n",
                 f"{purpose[0].upper()}{purpose[1:]}. The other commands, and what every command shares: "
                 "[cli.md](../cli.md).\n"]
        for name, ctx in mine:
            parts.append(f"## groundkit {name}\n")
            parts.append("```text\n" + _plain_help(ctx) + "\n```\n")
            if name in EXAMPLES:
                parts.append("Example:\n\n```console\n" + EXAMPLES[name] + "\n```\n")
        pages[path] = "\n".join(parts).rstrip() + "\n"
    return {"cli.md": "\n".join(index).rstrip() + "\n", **pages}


def write(docs_dir: Path) -> None:
    for path, text in render().items():
        (docs_dir / path).parent.mkdir(parents=True, exist_ok=True)
        (docs_dir / path).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    write(Path(sys.argv[1] if len(sys.argv) > 1 else "docs"))
