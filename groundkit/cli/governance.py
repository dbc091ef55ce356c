"""Governance on the command line (docs/governance.md): the options every gated change takes,
how a gate run is shown, and ``groundkit audit`` (keys, checkpoints, chain and bundle checks,
the gate ledger)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from groundkit import audit, deployment
from groundkit.cli._common import DsnOption, err, handle_errors, out
from groundkit.client import Groundkit
from groundkit.errors import AuditFailure, GateRefused, InvalidArgument

# -- the options of a gated change (groundkit migrate, groundkit cutover) ---------------------

SkipGateOption = Annotated[bool, typer.Option(
    "--skip-gate", help="Apply without the permission gate. Needs --reason; recorded in the gate ledger as a "
                        "bypass, and the configuration stays uncertified (status --check fails, serve refuses it).")]
ReasonOption = Annotated[str | None, typer.Option(
    "--reason", help="Why the gate is skipped (with --skip-gate); recorded in the ledger.")]
CertificateOption = Annotated[Path | None, typer.Option(
    "--certificate", exists=True, dir_okay=False,
    help="A signed gate bundle (groundkit eval gate --bundle) for exactly the configuration this change makes: "
         "reused instead of running the gate. Needs --public-key.")]
PublicKeyOption = Annotated[Path | None, typer.Option(
    "--public-key", exists=True, dir_okay=False, help="The Ed25519 public key (PEM) that signed --certificate.")]
GateDsnOption = Annotated[str | None, typer.Option(
    "--gate-dsn", help="Run the gate's throwaway databases on this server instead of the target's (same "
                       "PostgreSQL and pgvector versions, or the certificate will not match). Needs CREATEDB and "
                       "CREATEROLE there.", show_default=False)]
TapOption = Annotated[Path | None, typer.Option(
    "--tap", dir_okay=False, help="Write the gate's TAP output to this file.")]
KeyOption = Annotated[Path | None, typer.Option(
    "--key", dir_okay=False, help="The Ed25519 signing key (PEM file). Never sent to the database.")]
KeyEnvOption = Annotated[str | None, typer.Option(
    "--key-env", help="Instead of --key: the environment variable holding the PEM signing key.")]


def skip_reason(skip_gate: bool, reason: str | None) -> str | None:
    """The bypass reason, or None to gate; --reason without --skip-gate is a mistake."""
    if reason is not None and not skip_gate:
        raise InvalidArgument("--reason goes with --skip-gate")
    if skip_gate and (reason is None or not reason.strip()):
        raise InvalidArgument("--skip-gate needs --reason TEXT: a bypass is recorded in the gate ledger, with it")
    return reason if skip_gate else None


@contextlib.contextmanager
def gate_output(tap: Path | None) -> Iterator[io.StringIO]:
    """The TAP of a gated change, kept in memory: written to ``tap`` at the end, and its failing
    checks printed on stderr when the change is refused."""
    buf = io.StringIO()
    try:
        yield buf
    except GateRefused:
        print_failures(buf.getvalue())
        raise
    finally:
        if tap is not None and buf.getvalue():
            tap.write_text(buf.getvalue(), encoding="utf-8")


def section_progress(section: str) -> None:
    err.print(f"[dim]gate: section {section}...[/]", highlight=False, soft_wrap=True)


def say_change(what: str, change: deployment.GatedChange) -> None:
    """One line per gated change: what the ledger now says, on stderr."""
    where = f"ledger row {change.ledger_id}" if change.ledger_id is not None else "no ledger"
    if change.verdict == "certified":
        how = (f"reusing the certificate of ledger row {change.reused}" if change.reused is not None else
               f"reusing the signed bundle {change.bundle_digest}" if change.bundle_digest else
               f"the gate passed ({change.summary['passed']}/{change.summary['checks']} checks, "
               f"{change.summary['duration_s']:.1f} s)" if change.summary else "")
        err.print(f"[green]{what}: certified[/] ({where}; {how}; configuration {change.config_hash[:16]})",
                  highlight=False, soft_wrap=True)
    elif change.verdict == "bypassed":
        err.print(f"[bold yellow]{what}: the gate was bypassed[/] ({where}): {escape(change.reason or '')}. "
                  "This configuration is NOT certified: groundkit serve refuses it without --allow-ungated.",
                  highlight=False, soft_wrap=True)
    else:
        err.print(f"[bold yellow]{what}: not certified[/] ({where}): {escape(change.reason or change.verdict)}",
                  highlight=False, soft_wrap=True)


def print_failures(tap: str) -> None:
    """The failing checks of a gate run's TAP, with their diagnostics, on stderr."""
    lines = tap.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("not ok") and "# TODO" not in line:
            err.print(escape(line), highlight=False, soft_wrap=True)
            for more in lines[i + 1:i + 12]:
                if not more.startswith("#     "):
                    break
                err.print(escape(more), highlight=False, soft_wrap=True)


# -- groundkit audit --------------------------------------------------------------------------

app = typer.Typer(help="Tamper evidence: signed checkpoints of the audit chain, its verification, evidence "
                       "bundles, the gate ledger (docs/governance.md).", no_args_is_help=True,
                  rich_markup_mode="markdown")


@app.command("keygen")
@handle_errors
def keygen(
    private_key: Annotated[Path, typer.Option("--private-key", dir_okay=False,
                                              help="Where to write the private key (PEM, mode 0600).")],
    public_key: Annotated[Path, typer.Option("--public-key", dir_okay=False,
                                             help="Where to write the public key (PEM): give it to auditors.")],
) -> None:
    """Make an Ed25519 key pair for signing checkpoints and evidence bundles. Keep the private key
    outside the database and away from its hosts' backups; groundkit never stores it."""
    for path in (private_key, public_key):
        if path.exists():
            raise InvalidArgument(f"{path} exists; not overwriting a key")
    private, public = audit.generate_key()
    fd = os.open(private_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(private)
    public_key.write_bytes(public)
    out.print(f"key {audit.key_id(audit.load_public_key(public_key))}: private {private_key} (0600), "
              f"public {public_key}", highlight=False, soft_wrap=True)


@app.command("checkpoint")
@handle_errors
def checkpoint(
    key: KeyOption = None,
    key_env: KeyEnvOption = None,
    output: Annotated[Path | None, typer.Option("--out", dir_okay=False,
                                                help="Write it to this file instead of stdout.")] = None,
    dsn: DsnOption = None,
) -> None:
    """Print the audit chain's head (its id, last entry, last hash), signed. Keep checkpoints
    outside the database (another system, write-once storage); `groundkit audit verify
    --checkpoint FILE` later proves each is a prefix of the history then."""
    signing = audit.load_private_key(key, key_env)
    with Groundkit.connect(dsn) as gk:
        doc = audit.make_checkpoint(gk, signing)
    if output is not None:
        audit.write_json(output, doc)
        err.print(f"checkpoint #{doc['seq']} of chain {doc['chain_id'][:16]} written to {output}", highlight=False,
                  soft_wrap=True)
    else:
        sys.stdout.write(audit.canonical(doc).decode("utf-8") + "\n")


@app.command("verify")
@handle_errors
def verify(
    checkpoint_files: Annotated[list[Path] | None, typer.Option(
        "--checkpoint", exists=True, dir_okay=False,
        help="A saved checkpoint (repeatable): each must be a prefix of today's chain.")] = None,
    public_key: Annotated[Path | None, typer.Option(
        "--public-key", exists=True, dir_okay=False, help="The public key the checkpoints were signed with.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
    dsn: DsnOption = None,
) -> None:
    """Recompute the audit chain from today's rows (run headers, run searches, gate-ledger rows and
    prune tombstones) and check every saved checkpoint against it. Exit 1 naming the first broken
    link: an edited, deleted or reordered row or entry, a row written around the chain, a
    checkpoint that is not a prefix of today's history. Needs groundkit_auditor or the owner."""
    docs: list[tuple[str, dict[str, Any]]] = []
    for path in checkpoint_files or ():
        doc, _, _ = audit.read_json(path)
        docs.append((str(path), doc))
    key = audit.load_public_key(public_key) if public_key is not None else None
    if docs and key is None:
        raise InvalidArgument("--checkpoint needs --public-key: an unsigned head proves nothing")
    with Groundkit.connect(dsn) as gk:
        report = audit.verify_chain(gk, docs, key)
    if as_json:
        body = report.model_dump()
        body["ok"] = report.ok
        body["first_break"] = report.first_break.model_dump() if report.first_break else None
        sys.stdout.write(json.dumps(body) + "\n")
    else:
        out.print(f"chain {report.chain_id[:16]}: {report.entries:,} entries, head #{report.head_seq} "
                  f"{report.head_hash[:16]}; {report.pruned:,} pruned entr(ies) accounted for by tombstones",
                  highlight=False, soft_wrap=True)
        for line in report.checkpoints:
            out.print(line, highlight=False, soft_wrap=True)
        if report.ok:
            out.print("[green]verified[/]: every link holds")
        else:
            first = report.first_break
            assert first is not None
            err.print(f"[bold red]BROKEN[/] first broken link: {escape(first.what)}", highlight=False, soft_wrap=True)
            for p in report.problems:
                if p is not first:
                    err.print(f"  also: {escape(p.what)}", highlight=False, soft_wrap=True)
    if not report.ok:
        raise typer.Exit(1)


@app.command("verify-bundle")
@handle_errors
def verify_bundle(
    bundle: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="A run or gate evidence bundle.")],
    public_key: Annotated[Path, typer.Option("--public-key", exists=True, dir_okay=False,
                                             help="The Ed25519 public key (PEM) it must be signed with.")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Check an evidence bundle offline (no database, no network): its signature, every row's
    hash against its chain entry, and that what it shows (the pinned set; the configuration, the
    summary, the TAP) is what was hashed and signed. Exit 1 on any difference."""
    try:
        report = audit.verify_bundle_file(bundle, audit.load_public_key(public_key))
    except AuditFailure as exc:
        if as_json:
            sys.stdout.write(json.dumps({"ok": False, "error": exc.message}) + "\n")
        raise
    if as_json:
        sys.stdout.write(json.dumps({"ok": True, "kind": report.kind, "digest": report.digest,
                                     "checked": list(report.checked)}) + "\n")
        return
    out.print(f"[green]verified[/] {report.kind} bundle {bundle} (sha256 {report.digest[:16]})", highlight=False,
              soft_wrap=True)
    for line in report.checked:
        out.print(f"  {escape(line)}", highlight=False, soft_wrap=True)


@app.command("ledger")
@handle_errors
def ledger(
    limit: Annotated[int, typer.Option(min=1, help="At most this many rows, newest first.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per row.")] = False,
    dsn: DsnOption = None,
) -> None:
    """The gate ledger, newest first: every verdict on a configuration (gate runs, gated migrates
    and cutovers, reused certificates, bypasses) with who, when and why."""
    with deployment._connection(_dsn(dsn)) as conn:
        rows = deployment.ledger(conn, limit)
    if as_json:
        for r in rows:
            sys.stdout.write(r.model_dump_json() + "\n")
        return
    table = Table("id", "at", "kind", "verdict", "config", "sections", "checks", "by", "reason")
    for r in rows:
        checks = "-" if r.checks is None else f"{(r.checks or 0) - (r.failed or 0)}/{r.checks}"
        table.add_row(str(r.id), f"{r.recorded_at:%Y-%m-%d %H:%M:%S}", r.kind, r.verdict, r.config_hash[:12],
                      ",".join(r.sections_run) or "-", checks, r.operator or r.recorded_by,
                      escape(r.reason or ""))
    out.print(table)


def _dsn(dsn: str | None) -> str:
    from groundkit.client import resolve_dsn

    return resolve_dsn(dsn)
