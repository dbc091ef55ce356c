"""Evidence an auditor can check outside the database (docs/governance.md, "Tamper evidence").

- The audit chain (``groundkit.audit_chain``, sql/089_governance.sql): one entry per run header,
  run search and gate-ledger row, in commit order, each holding the sha256 of its row's canonical
  encoding and a hash linking it to the entry before. :func:`verify_chain` recomputes it here, in
  Python, from the entries and the rows as they are now, and names the first broken link.
- Checkpoints: the chain's head (its id, last seq, last hash), signed with the operator's Ed25519
  key (:func:`make_checkpoint`), meant to be kept outside the database. A checkpoint verifies when
  today's chain has the same hash at its seq: it is a prefix of today's history.
- Evidence bundles: a run (:func:`run_bundle`) or a gate result (:func:`gate_bundle`), signed; each
  row in it carries its canonical encoding, whose sha256 is the row hash its chain entry holds.
  :func:`verify_bundle` checks one with the public key alone: no database, no network.

The private key is read from a file or from an environment variable the operator names; it is
never sent to the database. Signatures are Ed25519 (the ``cryptography`` package).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from groundkit.errors import AuditFailure, ConfigError, InvalidArgument
from groundkit.schema import installed_version

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

    from groundkit.deployment import GateEvidence
    from groundkit.session import Session

CHECKPOINT_FORMAT = "groundkit-checkpoint/1"
BUNDLE_FORMAT = "groundkit-bundle/1"
GENESIS_PREV = bytes(32)
PAGE = 5000


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# -- canonical JSON and keys -------------------------------------------------------------------


def canonical(value: Any) -> bytes:
    """The bytes a signature covers: JSON with sorted keys, no spaces, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def config_hash(config: Mapping[str, str | None]) -> str:
    """The sha256 (hex) of a deployment configuration's canonical JSON, as the SQL
    ``groundkit.configuration_hash`` computes it (tests/test_governance.py holds them to each
    other): the identity the gate ledger and a gate bundle give a configuration."""
    for key, value in config.items():
        if not isinstance(key, str) or not (value is None or isinstance(value, str)):
            raise InvalidArgument("a configuration's components are strings or null")
    return hashlib.sha256(canonical(dict(config))).hexdigest()


def generate_key() -> tuple[bytes, bytes]:
    """A new Ed25519 key pair as PEM: (private, public)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return private, public


def load_private_key(path: Path | None = None, env: str | None = None) -> Ed25519PrivateKey:
    """The signing key: a PEM file, or an environment variable (named by the operator) holding the
    PEM. Exactly one of the two. Its text never appears in an error."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    if (path is None) == (env is None):
        raise InvalidArgument("give the signing key as a file (--key FILE) or an environment variable (--key-env NAME)")
    if env is not None:
        value = os.environ.get(env)
        if not value:
            raise ConfigError(f"the environment variable {env} holds no key")
        data, where = value.encode("utf-8"), f"${env}"
    else:
        assert path is not None
        try:
            data, where = path.read_bytes(), str(path)
        except OSError as exc:
            raise ConfigError(f"cannot read the key file {path}: {exc.strerror}") from None
    try:
        key = load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise ConfigError(f"{where} is not an unencrypted PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"{where} is not an Ed25519 key")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    try:
        key = load_pem_public_key(path.read_bytes())
    except OSError as exc:
        raise ConfigError(f"cannot read the public key {path}: {exc.strerror}") from None
    except ValueError:
        raise ConfigError(f"{path} is not a PEM public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ConfigError(f"{path} is not an Ed25519 public key")
    return key


def _raw_public(key: Ed25519PublicKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(key: Ed25519PublicKey) -> str:
    """A public key's short id: the first 16 hex digits of the sha256 of its raw bytes."""
    return hashlib.sha256(_raw_public(key)).hexdigest()[:16]


def sign(document: Mapping[str, Any], key: Ed25519PrivateKey) -> dict[str, Any]:
    """``document`` with a ``signature`` over its canonical JSON (without the signature)."""
    body = {k: v for k, v in document.items() if k != "signature"}
    public = key.public_key()
    return {**body, "signature": {"algorithm": "ed25519", "key_id": key_id(public),
                                  "public_key": _raw_public(public).hex(),
                                  "value": key.sign(canonical(body)).hex()}}


def check_signature(document: Mapping[str, Any], key: Ed25519PublicKey) -> None:
    """:class:`AuditFailure` unless ``document`` is signed by ``key`` and unchanged since."""
    from cryptography.exceptions import InvalidSignature

    sig = document.get("signature")
    if not isinstance(sig, dict) or sig.get("algorithm") != "ed25519" or not isinstance(sig.get("value"), str):
        raise AuditFailure("no Ed25519 signature")
    if set(sig) != {"algorithm", "key_id", "public_key", "value"}:
        raise AuditFailure("the signature block was changed")
    if sig.get("key_id") != key_id(key) or sig.get("public_key") != _raw_public(key).hex():
        raise AuditFailure(f"signed by key {sig.get('key_id')!r}, not by the key given ({key_id(key)})")
    body = {k: v for k, v in document.items() if k != "signature"}
    try:
        key.verify(bytes.fromhex(sig["value"]), canonical(body))
    except (InvalidSignature, ValueError):
        raise AuditFailure("the signature does not match: the document was changed after it was signed") from None


# -- the chain --------------------------------------------------------------------------------


def ref_of(kind: str, run_id: str | None, search_no: int | None, ledger_id: int | None) -> str:
    """An entry's name in its hash, as ``groundkit._audit_ref`` makes it."""
    if kind == "search":
        return f"search:{run_id}/{search_no}"
    if kind == "gate":
        return f"gate:{ledger_id}"
    if kind == "genesis":
        return "genesis:"
    return f"{kind}:{run_id}"


def entry_hash(prev_hash: bytes, seq: int, ref: str, row_hash: bytes) -> bytes:
    """An entry's hash, as ``groundkit._audit_entry_hash`` computes it."""
    return hashlib.sha256(prev_hash + seq.to_bytes(8, "big", signed=True) + ref.encode("utf-8") + row_hash).digest()


class Head(_Frozen):
    chain_id: str
    seq: int
    hash: str


class Problem(_Frozen):
    seq: int | None  # the entry; None: a row no entry chains
    what: str


class ChainReport(_Frozen):
    chain_id: str
    entries: int
    head_seq: int
    head_hash: str
    pruned: int  # entries whose rows a prune tombstone accounts for
    problems: tuple[Problem, ...]
    checkpoints: tuple[str, ...]  # one line per checkpoint verified

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def first_break(self) -> Problem | None:
        chained = [p for p in self.problems if p.seq is not None]
        if chained:
            return min(chained, key=lambda p: p.seq or 0)
        return self.problems[0] if self.problems else None


def head(s: Session) -> Head:
    rows = s._fetch("select * from groundkit.audit_head()", {})
    if not rows:
        raise AuditFailure("the audit chain has no genesis entry (groundkit migrate)")
    return Head.model_validate(rows[0])


def _entries(s: Session) -> Iterator[dict[str, Any]]:
    after = -1
    while True:
        rows = s._fetch("select * from groundkit.audit_entries(%(after)s, %(n)s)", {"after": after, "n": PAGE})
        yield from rows
        if len(rows) < PAGE:
            return
        after = int(rows[-1]["seq"])


_RANGE = re.compile(r"([\[(])(\d+),(\d+)([\])])")


def parse_multirange(text: str | None) -> list[tuple[int, int]]:
    """An int8multirange's text as inclusive (low, high) pairs."""
    out = []
    for lo_b, lo, hi, hi_b in _RANGE.findall(text or ""):
        out.append((int(lo) + (lo_b == "("), int(hi) - (hi_b == ")")))
    return out


class Checkpoint(_Frozen):
    format: str
    chain_id: str
    seq: int
    head: str
    at: str
    groundkit_version: str
    signature: dict[str, Any]


def verify_chain(s: Session, checkpoints: Sequence[tuple[str, Mapping[str, Any]]] = (),
                 public_key: Ed25519PublicKey | None = None) -> ChainReport:
    """Recompute the chain from its entries and today's rows, and check ``checkpoints`` (name,
    document) against it: each must be signed by ``public_key`` and have the hash today's chain
    has at its seq. Never raises for what it finds: the report lists every problem, by entry."""
    problems: list[Problem] = []
    wanted: dict[int, list[tuple[str, Checkpoint]]] = {}
    for name, doc in checkpoints:
        try:
            cp = Checkpoint.model_validate(doc)
        except ValueError:
            problems.append(Problem(seq=None, what=f"checkpoint {name}: not a groundkit checkpoint"))
            continue
        if public_key is None:
            raise InvalidArgument("checking checkpoints needs the public key that signed them (--public-key FILE)")
        try:
            check_signature(doc, public_key)
        except AuditFailure as exc:
            problems.append(Problem(seq=None, what=f"checkpoint {name}: {exc.message}"))
            continue
        wanted.setdefault(cp.seq, []).append((name, cp))
    found: dict[int, str] = {}
    prev: dict[str, Any] | None = None
    missing: dict[int, tuple[str, str]] = {}  # entries whose rows are gone: seq -> (kind, ref)
    tombstones: list[dict[str, Any]] = []
    count = 0
    chain_id = ""
    for e in _entries(s):
        count += 1
        seq = int(e["seq"])
        ref = ref_of(e["kind"], None if e["run_id"] is None else str(e["run_id"]), e["search_no"], e["ledger_id"])
        row_hash, prev_hash, stored = bytes(e["row_hash"]), bytes(e["prev_hash"]), bytes(e["hash"])
        expected_seq = 0 if prev is None else int(prev["seq"]) + 1
        if seq != expected_seq:
            problems.append(Problem(seq=expected_seq, what=f"entries #{expected_seq}..#{seq - 1} are missing: "
                                                           "deleted from the chain"))
        if seq == 0:
            chain_id = stored.hex()
            if e["kind"] != "genesis" or prev_hash != GENESIS_PREV:
                problems.append(Problem(seq=0, what="the genesis entry was rewritten"))
        elif prev is not None and prev_hash != bytes(prev["hash"]):
            problems.append(Problem(seq=seq, what=f"entry #{seq} ({ref}) does not follow the entry before it: "
                                                  "the chain was reordered or an entry rewritten"))
        if entry_hash(prev_hash, seq, ref, row_hash) != stored:
            problems.append(Problem(seq=seq, what=f"entry #{seq} ({ref}) is not what was chained: its hash does not "
                                                  "match its content"))
        current = e["current_hash"]
        if current is None:
            missing[seq] = (e["kind"], ref)
        elif bytes(current) != row_hash:
            problems.append(Problem(seq=seq, what=f"entry #{seq} ({ref}): the row was changed after it was chained"))
        if e["kind"] == "prune" and current is not None:
            tombstones.append(e)
        found[seq] = stored.hex()
        prev = e
    if prev is None:
        raise AuditFailure("the audit chain is empty (groundkit migrate)")
    pruned = _check_prunes(missing, tombstones, problems)
    for row in s._fetch("select * from groundkit.audit_unchained()", {}):
        what = ref_of(row["kind"], None if row["run_id"] is None else str(row["run_id"]), row["search_no"],
                      row["ledger_id"])
        problems.append(Problem(seq=None, what=f"{what} is in no chain entry: written around the chain"))
    lines = _check_checkpoints(wanted, found, chain_id, int(prev["seq"]), problems)
    return ChainReport(chain_id=chain_id, entries=count, head_seq=int(prev["seq"]), head_hash=bytes(prev["hash"]).hex(),
                       pruned=pruned, problems=tuple(problems), checkpoints=tuple(lines))


def _check_prunes(missing: dict[int, tuple[str, str]], tombstones: Iterable[Mapping[str, Any]],
                  problems: list[Problem]) -> int:
    """Every entry whose row is gone must be one a later prune tombstone names, with its counts."""
    claimed: set[int] = set()
    for t in tombstones:
        if t["pruned_seqs"] is None:
            continue  # a prune from before the chain existed: the rows it deleted were never chained
        seqs = {n for lo, hi in parse_multirange(t["pruned_seqs"]) for n in range(lo, hi + 1)}
        runs = sum(1 for n in seqs if missing.get(n, ("",))[0] == "run")
        searches = sum(1 for n in seqs if missing.get(n, ("",))[0] == "search")
        tseq = int(t["seq"])
        if any(n >= tseq for n in seqs) or seqs & claimed:
            problems.append(Problem(seq=tseq, what=f"prune tombstone #{tseq} names entries it could not have pruned"))
        if runs != (t["pruned_runs"] or 0) or searches != (t["pruned_searches"] or 0) or len(seqs) != runs + searches:
            problems.append(Problem(seq=tseq, what=f"prune tombstone #{tseq} pruned {t['pruned_runs']} run(s) and "
                                                   f"{t['pruned_searches']} search(es), but {runs} and {searches} of "
                                                   "the entries it names are gone (a named row still exists, or is "
                                                   "no run)"))
        claimed |= seqs
    for seq, (_, ref) in sorted(missing.items()):
        if seq not in claimed:
            problems.append(Problem(seq=seq, what=f"entry #{seq} ({ref}): its row was deleted, and no prune "
                                                  "tombstone accounts for it"))
    return len(claimed & set(missing))


def _check_checkpoints(wanted: Mapping[int, list[tuple[str, Checkpoint]]], found: Mapping[int, str], chain_id: str,
                       last: int, problems: list[Problem]) -> list[str]:
    lines = []
    for seq in sorted(wanted):
        for name, cp in wanted[seq]:
            if cp.chain_id != chain_id:
                problems.append(Problem(seq=None, what=f"checkpoint {name} is of another chain ({cp.chain_id[:16]}…)"))
            elif seq > last:
                problems.append(Problem(seq=last + 1, what=f"checkpoint {name} (#{seq}, {cp.at}) is ahead of today's "
                                                           f"chain, which ends at #{last}: entries were removed "
                                                           "(or this is an older backup)"))
            elif found.get(seq) != cp.head:
                problems.append(Problem(seq=seq, what=f"checkpoint {name} (#{seq}, {cp.at}) is not a prefix of "
                                                      "today's history: the chain was rewritten at or before "
                                                      f"#{seq}"))
            else:
                lines.append(f"checkpoint {name}: #{seq} of {cp.at} is a prefix of today's history")
    return lines


def make_checkpoint(s: Session, key: Ed25519PrivateKey) -> dict[str, Any]:
    """The chain's head now, signed: keep it outside the database."""
    h = head(s)
    return sign({"format": CHECKPOINT_FORMAT, "chain_id": h.chain_id, "seq": h.seq, "head": h.hash,
                 "at": datetime.now(UTC).isoformat(timespec="seconds"), "groundkit_version": installed_version()},
                key)


# -- evidence bundles -------------------------------------------------------------------------


def _chain_rows(s: Session, run_id: Any = None, ledger_id: int | None = None) -> list[dict[str, Any]]:
    rows = s._fetch("select * from groundkit.audit_rows(%(run)s, %(ledger)s)", {"run": run_id, "ledger": ledger_id})
    return [{"seq": int(r["seq"]), "kind": r["kind"], "ref": r["ref"], "encoding": r["encoding"],
             "row_hash": bytes(r["row_hash"]).hex(), "prev_hash": bytes(r["prev_hash"]).hex(),
             "hash": bytes(r["hash"]).hex()} for r in rows]


def run_bundle(s: Session, run_id: Any, key: Ed25519PrivateKey) -> dict[str, Any]:
    """A run's evidence, signed: its header and searches as chained (each row's canonical
    encoding, row hash and chain entry), its pinned set, its replay statuses now (no chunk text),
    and the chain's head at export."""
    from groundkit.runs import parse_run_id, replay

    rid = parse_run_id(run_id)
    result = replay(s, rid)  # (GK012 for an unknown run; the auditor's or the owner's)
    entries = _chain_rows(s, run_id=rid)
    if not entries:
        raise AuditFailure(f"run {rid} is in no chain entry: it was written around the chain, or is not committed")
    searches = [json.loads(e["encoding"]) for e in entries if e["kind"] == "search" and e["encoding"]]
    replay_status = [{"search_no": h.search_no, "hit_no": h.hit_no, "object_id": h.object_id,
                      "object_version": h.object_version, "chunk_seq": h.chunk_seq, "now": h.now,
                      "redacted": h.redacted, "verified": h.verified, "chunker_version": h.chunker_version}
                     for h in result.hits]
    body = {"run_id": str(rid), "pinned": [{"search_no": x["search_no"], "query": x["query"], "hits": x["hits"]}
                                           for x in searches],
            "replay": replay_status, "entries": entries, "head": head(s).model_dump()}
    return sign({"format": BUNDLE_FORMAT, "kind": "run", "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
                 "groundkit_version": installed_version(), "body": body}, key)


def gate_bundle(evidence: GateEvidence, key: Ed25519PrivateKey, *, s: Session | None = None,
                ledger_id: int | None = None) -> dict[str, Any]:
    """A gate run's evidence, signed: the configuration it tested and its hash, the sections run
    and skipped, the summary, the TAP and its digest, and, when recorded, the ledger row as chained."""
    body: dict[str, Any] = json.loads(evidence.model_dump_json())
    body["ledger"] = None
    if s is not None and ledger_id is not None:
        body["ledger"] = {"id": ledger_id, "entries": _chain_rows(s, ledger_id=ledger_id), "head": head(s).model_dump()}
    return sign({"format": BUNDLE_FORMAT, "kind": "gate", "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
                 "groundkit_version": installed_version(), "body": body}, key)


class BundleReport(_Frozen):
    kind: str
    digest: str  # sha256 of the file
    checked: tuple[str, ...]
    body: dict[str, Any]


def _check_entries(entries: Sequence[Mapping[str, Any]], checked: list[str]) -> None:
    for e in entries:
        if e.get("encoding") is None:
            raise AuditFailure(f"entry #{e.get('seq')}: its row is gone (pruned)")
        row_hash = hashlib.sha256(str(e["encoding"]).encode("utf-8")).hexdigest()
        if row_hash != e["row_hash"]:
            raise AuditFailure(f"entry #{e['seq']} ({e['ref']}): the row's encoding does not hash to its row hash")
        if entry_hash(bytes.fromhex(e["prev_hash"]), int(e["seq"]), str(e["ref"]),
                      bytes.fromhex(e["row_hash"])).hex() != e["hash"]:
            raise AuditFailure(f"entry #{e['seq']} ({e['ref']}): its hash is not its content's")
    checked.append(f"{len(entries)} chain entr{'y' if len(entries) == 1 else 'ies'}: each row hashes to its entry, "
                   "each entry to its hash")


def verify_bundle(document: Mapping[str, Any], key: Ed25519PublicKey, digest: str = "") -> BundleReport:
    """Check an evidence bundle offline: the signature, then every hash inside it, then that what
    it shows (the pinned set, the configuration, the TAP) is what was hashed."""
    if document.get("format") != BUNDLE_FORMAT or document.get("kind") not in ("run", "gate"):
        raise AuditFailure("not a groundkit evidence bundle")
    check_signature(document, key)
    checked = [f"signature: Ed25519, key {key_id(key)}"]
    body = document["body"]
    if not isinstance(body, dict):
        raise AuditFailure("the bundle has no body")
    if document["kind"] == "run":
        _verify_run_body(body, checked)
    else:
        _verify_gate_body(body, checked)
    return BundleReport(kind=str(document["kind"]), digest=digest, checked=tuple(checked), body=body)


def _verify_run_body(body: Mapping[str, Any], checked: list[str]) -> None:
    entries = body["entries"]
    _check_entries(entries, checked)
    rows = [json.loads(e["encoding"]) for e in entries]
    if any(r.get("run_id") != body["run_id"] for r in rows):
        raise AuditFailure("an entry belongs to another run")
    if not any(e["kind"] == "run" for e in entries):
        raise AuditFailure("the run's header is not in the bundle")
    searches = sorted((r for e, r in zip(entries, rows, strict=True) if e["kind"] == "search"),
                      key=lambda r: r["search_no"])
    pinned = [{"search_no": r["search_no"], "query": r["query"], "hits": r["hits"]} for r in searches]
    if pinned != body["pinned"]:
        raise AuditFailure("the pinned set shown is not the one chained")
    if any(int(e["seq"]) > int(body["head"]["seq"]) for e in entries):
        raise AuditFailure("an entry is after the chain head the bundle names")
    checked.append(f"pinned set: {len(pinned)} search(es), {sum(len(p['hits']) for p in pinned)} hit(s), as chained")


def _verify_gate_body(body: Mapping[str, Any], checked: list[str]) -> None:
    if config_hash(body["config"]) != body["config_hash"]:
        raise AuditFailure("the configuration does not hash to the configuration hash")
    checked.append(f"configuration hash {body['config_hash'][:16]}…")
    if hashlib.sha256(str(body["tap"]).encode("utf-8")).hexdigest() != body["tap_digest"]:
        raise AuditFailure("the TAP does not hash to its digest")
    checked.append(f"TAP digest {body['tap_digest'][:16]}… ({body['summary']['checks']} checks)")
    failing = len(re.findall(r"^not ok \d+ - (?!.*# TODO)", str(body["tap"]), flags=re.MULTILINE))
    if failing != body["summary"]["failed"] or bool(body["summary"]["ok"]) != (failing == 0):
        raise AuditFailure("the summary does not agree with the TAP")
    ledger = body.get("ledger")
    if ledger:
        _check_entries(ledger["entries"], checked)
        row = json.loads(ledger["entries"][0]["encoding"])
        if row.get("config_hash") != body["config_hash"] or row.get("tap_digest") != body["tap_digest"]:
            raise AuditFailure("the ledger row is for another gate run")
        checked.append(f"ledger row {row['id']}: {row['verdict']}")


def read_json(path: Path) -> tuple[dict[str, Any], str, bool]:
    """A signed document (a bundle, a checkpoint), the sha256 of its bytes, and whether its
    bytes are its canonical form (as :func:`write_json` writes them)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InvalidArgument(f"cannot read {path}: {exc.strerror}") from None
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise AuditFailure(f"{path} is not JSON: changed or truncated") from None
    if not isinstance(doc, dict):
        raise AuditFailure(f"{path} is not a groundkit document")
    return doc, hashlib.sha256(data).hexdigest(), data == canonical(doc) + b"\n"


def verify_bundle_file(path: Path, key: Ed25519PublicKey) -> BundleReport:
    """:func:`verify_bundle` of a file, whose bytes must also be exactly the canonical form of
    what they say (so that no byte of it can change, whitespace included)."""
    doc, digest, exact = read_json(path)
    try:
        report = verify_bundle(doc, key, digest)
    except (KeyError, TypeError, ValueError) as exc:
        raise AuditFailure(f"{path}: the bundle is malformed ({type(exc).__name__}: {exc})") from None
    if not exact:
        raise AuditFailure(f"{path}: its bytes are not the bundle as written (changed outside its signed content)")
    return report


def write_json(path: Path, document: Mapping[str, Any]) -> None:
    """A signed document in its canonical form (one line): every byte of the file is covered."""
    path.write_bytes(canonical(document) + b"\n")
