"""The gate's ``replicas`` section: a stale standby never serves a revoked permission.

A real primary and streaming standby (:mod:`groundkit.replica_pair`, from the embedded
PostgreSQL's binaries; the section is skipped, saying so, where they are missing). For each kind
of change of authority or visibility (a downgrade, a suspension, a space made private, a revoked
grant, a re-tier, a delete, a redaction) the standby's replay is paused, the change committed on
the primary, and the affected reader searches through the fenced router
(:func:`groundkit.replicas.connect_pool`): every hit must be one the primary itself returns now.
Each case also checks that the paused standby, asked directly, still shows the old answer, so
that the case tests something. Last, the same cases run against the router with its fence taken
out (it believes every replica is up to date): they must leak, or the section cannot fail.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

from groundkit import schema
from groundkit.client import Groundkit
from groundkit.gate.tap import Counts, Tap
from groundkit.gate.throwaway import GateDatabases
from groundkit.replicas import FencedPool

QUERY = "kiln glaze"
# generous: only the fence, not the lag rule, may keep these reads off the paused standby
MAX_LAG = 600.0


class Unfenced(FencedPool):
    """The router with its fence removed: it takes the primary's authority position to be zero,
    so every replica seems to have replayed it. Only the lag rule is left."""

    def _primary_position(self) -> tuple[int, ...]:
        super()._primary_position()
        return (0,) * 16


def _world(gk: Groundkit) -> None:
    for sub, tier in (("ana", "T2"), ("bo", "T1"), ("cy", "T1"), ("dee", "T1"), ("eve", "T1")):
        gk.put_member(sub, tier)
    gk.put_space("open", "T0")
    gk.put_space("lounge", "T1")
    gk.put_space("vault", "T0", private=True)
    gk.grant_space("vault", "cy")
    for oid, space, tier in (("o-t2", "open", "T2"), ("o-bo", "open", "T1"), ("o-lounge", "lounge", "T1"),
                             ("o-vault", "vault", "T0"), ("o-retier", "open", "T1"), ("o-del", "open", "T0"),
                             ("o-red", "open", "T0")):
        gk.put_object(oid, 1, "board_post", space, tier, oid, f"{oid}: firing the kiln with a new glaze")


# (what, reader, the change, the object the reader must no longer see)
CASES: tuple[tuple[str, str, Callable[[Groundkit], Any], str], ...] = (
    ("a downgrade", "ana", lambda gk: gk.put_member("ana", "T0"), "o-t2"),
    ("a suspension", "bo", lambda gk: gk.put_member("bo", "T1", "suspended"), "o-bo"),
    ("a space made private", "dee", lambda gk: gk.put_space("lounge", "T1", private=True), "o-lounge"),
    ("a revoked grant", "cy", lambda gk: gk.revoke_space("vault", "cy"), "o-vault"),
    ("a re-tier", "eve", lambda gk: gk.retier_object("o-retier", 2, "T3"), "o-retier"),
    ("a delete", "eve", lambda gk: gk.delete_object("o-del", 2), "o-del"),
    ("a redaction", "eve", lambda gk: gk.redact_object("o-red", 2), "o-red"),
)


def _ids(hits: list[Any]) -> set[str]:
    return {h.object_id for h in hits}


def run_cases(pair: Any, router: type[FencedPool], tap: Tap) -> None:
    """Each case on a fresh world in database ``pair``'s primary, through ``router``."""
    schema.apply(pair.primary_dsn)
    with Groundkit.connect(pair.primary_dsn) as primary:
        _world(primary)
        pair.wait_replayed()
        pool = router(pair.primary_dsn, [pair.standby_dsn], max_lag=MAX_LAG, pool_size=2, pool_timeout=5.0)
        try:
            for what, reader, change, gone in CASES:
                pair.pause_replay()
                try:
                    change(primary)
                    truth = _ids(primary.search(reader, QUERY))
                    with Groundkit.connect(pair.standby_dsn) as standby:
                        stale = _ids(standby.search(reader, QUERY))
                    got = _ids(pool.search(reader, QUERY))
                finally:
                    pair.resume_replay()
                    pair.wait_replayed()
                leaked = sorted(got - truth)
                tap.check(gone in stale and gone not in truth,
                          f"{what}: the paused standby still shows {gone} to {reader}, the primary does not",
                          [f"standby {sorted(stale)}, primary {sorted(truth)}"], counts=Counts(integrity=1))
                tap.check(not leaked and got == truth,
                          f"{what} committed while the standby's replay is paused: {reader}'s search through "
                          "the router answers as the primary",
                          [f"leaked {leaked}; router {sorted(got)}, primary {sorted(truth)}"],
                          counts=Counts(leaks=len(leaked)))
        finally:
            pool.close()


def run_section(dbs: GateDatabases, tap: Tap, opts: Any) -> None:
    from groundkit import replica_pair

    for router, fenced in ((FencedPool, True), (Unfenced, False)):
        try:
            pair = replica_pair.ReplicaPair()
        except replica_pair.Unavailable as exc:
            tap.skip("replicas section", f"no server binaries for a primary and standby here: {exc}")
            return
        with pair:
            if fenced:
                run_cases(pair, router, tap)
                continue
            inner = Tap(io.StringIO())
            run_cases(pair, router, inner)
            caught = inner.counts.leaks > 0
            tap.check(caught, f"with the fence removed, the same cases leak ({inner.counts.leaks} leaked hits): "
                      "the section can fail",
                      [] if caught else ["the cases passed without the fence: they test nothing"])
