"""Reads on streaming replicas behind a permission fence (docs/replicas.md).

:func:`connect_pool` opens pools to a primary and its replicas. Reads (search, fetch_citation,
home) may go to a replica; everything else goes to the primary. Before each read the router
reads the primary's authority position (sql/089_replicas.sql) and lets a replica serve the read
only if

* the replica has replayed that position, shard by shard: every change of live authority or
  visibility the primary had committed when the read began is on the replica (a revocation is
  never served stale), and
* its replay is within ``max_lag`` seconds: it has replayed the WAL the primary had written
  ``max_lag`` seconds ago (from the router's own samples of the primary's WAL position), and the
  last transaction it replayed is no older than ``max_lag`` while it has more to replay (new
  content lags by at most ``max_lag``).

Otherwise the read runs on the primary. When the primary cannot be reached, no replica can be
proven fresh, so the read fails closed (:class:`~groundkit.errors.NoFreshServer`, GK018).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg.rows import dict_row
from pydantic import BaseModel, ConfigDict

from groundkit import dsn as groundkit_dsn
from groundkit.client import Groundkit
from groundkit.errors import ConfigError, DatabaseUnavailable, GroundkitError, NoFreshServer, from_psycopg
from groundkit.models import Citation, HomeItem, HomeMode, SearchHit, SearchMode
from groundkit.pool_log import scrub_pool_log

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

_T = TypeVar("_T")

DEFAULT_MAX_LAG = 5.0  # seconds new content may lag on a replica
POOL_SIZE = 10
POOL_TIMEOUT = 5.0  # seconds a read waits for a pooled connection
REPLICA_WAIT = 0.5  # seconds a read waits for a replica's connection before it goes elsewhere
FLUSH_EVERY = 1.0  # seconds between flushes of the route counts to the primary
ROUTES = ("replica", "fence", "lag", "unreachable")
# a replica's statement cancelled by a conflict with recovery (serialization_failure): retried on the primary
_RECOVERY_CONFLICT = "40001"

_PgConn = psycopg.Connection[dict[str, Any]]


@dataclass(frozen=True)
class ServerState:
    """What ``groundkit.replica_state()`` says about one server."""

    authority: tuple[int, ...]
    in_recovery: bool
    lsn: int  # WAL position: written (primary) or replayed (standby), in bytes
    lag_seconds: float


def covers(replica: Sequence[int], primary: Sequence[int]) -> bool:
    """Whether a replica at authority position ``replica`` has replayed position ``primary``:
    at least as high on every shard."""
    return len(replica) == len(primary) and all(r >= p for r, p in zip(replica, primary, strict=True))


def label(dsn: str) -> str:
    """A replica's name in counts and messages: host:port/dbname, never credentials."""
    params = groundkit_dsn.parse(dsn)
    host = params.get("host") or params.get("hostaddr") or "localhost"
    return f"{host}:{params.get('port') or '5432'}/{params.get('dbname') or params.get('user') or ''}"


def _lsn(text: object) -> int:
    high, low = str(text).split("/")
    return (int(high, 16) << 32) + int(low, 16)


def read_state(conn: _PgConn) -> ServerState:
    row = conn.execute("select * from groundkit.replica_state()").fetchone()
    assert row is not None
    return ServerState(authority=tuple(int(n) for n in row["authority"]), in_recovery=bool(row["in_recovery"]),
                       lsn=_lsn(row["lsn"]), lag_seconds=float(row["lag_seconds"]))


class FencedPool:
    """Connection pools to a primary and its replicas, with the permission fence between them.
    Thread-safe; close it (or use it as a context manager) to close the pools and flush the
    route counts."""

    def __init__(self, primary: str, replicas: Sequence[str] = (), *, max_lag: float = DEFAULT_MAX_LAG,
                 pool_size: int = POOL_SIZE, pool_timeout: float = POOL_TIMEOUT, open_wait: bool = True,
                 primary_pool: ConnectionPool[_PgConn] | None = None,
                 configure: Callable[[_PgConn], None] | None = None) -> None:
        """``primary_pool``: a pool to the primary to use instead of opening one (the servers' own);
        ``configure``: called on each new connection of the pools opened here (the servers set
        their statement and lock timeouts with it)."""
        if isinstance(replicas, str):
            raise ConfigError("replicas must be a list of DSNs, not one string")
        if not (isinstance(max_lag, int | float) and 0 < max_lag <= 86_400):
            raise ConfigError("max_lag must be a number of seconds above 0 and at most 86400")
        for d in (primary, *replicas):
            groundkit_dsn.parse(d)  # a malformed DSN fails here, without its text
        self.max_lag = float(max_lag)
        self._replica_wait = min(pool_timeout, REPLICA_WAIT)
        scrub_pool_log(primary, *replicas)
        self.labels = tuple(label(d) for d in replicas)
        self._primary = primary_pool or _pool(primary, pool_size, pool_timeout, "groundkit-primary", configure)
        self._replicas = tuple(_pool(d, pool_size, pool_timeout, f"groundkit-replica-{i}", configure)
                               for i, d in enumerate(replicas))
        self._lock = threading.Lock()
        self._next = 0
        self._samples: deque[tuple[float, int]] = deque()  # (monotonic time, primary WAL position)
        self.routed: Counter[tuple[str, str]] = Counter()  # (replica label, route) -> reads
        self._unflushed: Counter[tuple[str, str]] = Counter()
        self._flushed_at = time.monotonic()
        for pool in (self._primary, *self._replicas):
            pool.open(wait=False)
        if open_wait:
            from psycopg_pool import PoolTimeout

            try:
                self._primary.wait(timeout=pool_timeout)
            except PoolTimeout:
                self.close()
                raise DatabaseUnavailable("cannot connect to the primary") from None

    def __enter__(self) -> FencedPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            with self._connection(self._primary) as conn:
                self._flush(conn)
        except GroundkitError:
            pass  # the primary is gone: its counts with it
        for pool in (self._primary, *self._replicas):
            pool.close()

    # -- the two doors -----------------------------------------------------------------

    @contextmanager
    def primary(self) -> Iterator[Groundkit]:
        """A :class:`Groundkit` on the primary: for writes and everything but the reads."""
        with self._connection(self._primary) as conn:
            yield Groundkit(conn)

    def read(self, fn: Callable[[Groundkit], _T]) -> _T:
        """``fn`` on a fresh replica, else on the primary. A replica that fails during ``fn`` (it
        went away, or recovery cancelled the statement) is counted unreachable and ``fn`` runs
        again on the primary. ``fn`` must only read."""
        if not self._replicas:
            with self.primary() as gk:
                return fn(gk)
        position = self._primary_position()
        for index in self._order():
            conn = self._fresh_replica(index, position)
            if conn is None:
                continue
            try:
                result = fn(Groundkit(conn))
            except GroundkitError as exc:
                if not isinstance(exc, DatabaseUnavailable) and exc.sqlstate != _RECOVERY_CONFLICT:
                    raise
                self._count(index, "unreachable", undo="replica")
            else:
                return result
            finally:
                self._replicas[index].putconn(conn)
        with self.primary() as gk:
            return fn(gk)

    # -- the reads ---------------------------------------------------------------------

    def search(self, reader_sub: str, query: str, k: int = 10, content_types: Sequence[str] | None = None,
               space_ids: Sequence[str] | None = None, snippet_start: str = "<mark>",
               snippet_end: str = "</mark>", *, mode: SearchMode | None = None, exact: bool = False,
               **fusion: Any) -> list[SearchHit]:
        """:meth:`Groundkit.search`, behind the fence; ``fusion``: hybrid's knobs (``fusion``,
        ``rrf_k``, ``bm25_weight``, ``dense_weight``, ``depth``, ``match_gate``) as it takes them."""
        return self.read(lambda gk: gk.search(reader_sub, query, k, content_types, space_ids,
                                              snippet_start, snippet_end, mode=mode, exact=exact, **fusion))

    def fetch_citation(self, reader_sub: str, object_id: str, version: int, chunk_seq: int) -> Citation | None:
        """:meth:`Groundkit.fetch_citation`, behind the fence."""
        return self.read(lambda gk: gk.fetch_citation(reader_sub, object_id, version, chunk_seq))

    def home(self, reader_sub: str, mode: HomeMode = "latest", k: int = 20,
             space_ids: Sequence[str] | None = None, content_types: Sequence[str] | None = None) -> list[HomeItem]:
        """:meth:`Groundkit.home`, behind the fence."""
        return self.read(lambda gk: gk.home(reader_sub, mode, k, space_ids, content_types))

    def routes(self) -> dict[str, dict[str, int]]:
        """This router's counts so far: replica -> route -> reads."""
        with self._lock:
            out: dict[str, dict[str, int]] = {}
            for (name, route), n in self.routed.items():
                out.setdefault(name, {})[route] = n
            return out

    # -- the fence ---------------------------------------------------------------------

    def _primary_position(self) -> tuple[int, ...]:
        """The primary's authority position now; samples its WAL position and flushes the counts
        when due. An unreachable primary fails closed."""
        try:
            with self._connection(self._primary) as conn:
                state = read_state(conn)
                self._sample(state.lsn)
                if time.monotonic() - self._flushed_at >= FLUSH_EVERY:
                    self._flush(conn)
        except DatabaseUnavailable:
            raise NoFreshServer("the primary is unreachable, so no replica can be shown to have replayed "
                                "every permission change; refusing to read (fails closed)") from None
        return state.authority

    def _fresh_replica(self, index: int, position: tuple[int, ...]) -> _PgConn | None:
        """A connection to replica ``index`` if it passes the fence (the caller puts it back),
        else None, counting why."""
        from psycopg_pool import PoolTimeout

        pool = self._replicas[index]
        try:
            conn = pool.getconn(timeout=self._replica_wait)
        except (PoolTimeout, psycopg.Error):  # the replica is not there, or all its connections are busy
            self._count(index, "unreachable")
            return None
        try:
            state = read_state(conn)
        except psycopg.Error:
            pool.putconn(conn)
            self._count(index, "unreachable")
            return None
        route = ("fence" if not covers(state.authority, position)
                 else "lag" if not self._within_lag(state) else "replica")
        self._count(index, route)
        if route == "replica":
            return conn
        pool.putconn(conn)
        return None

    def _within_lag(self, state: ServerState) -> bool:
        if state.lag_seconds > self.max_lag:
            return False
        horizon = time.monotonic() - self.max_lag
        with self._lock:
            # the newest sample at least max_lag old: the primary's WAL position then
            old = [lsn for at, lsn in self._samples if at <= horizon]
        return not old or state.lsn >= old[-1]

    def _sample(self, lsn: int) -> None:
        now = time.monotonic()
        with self._lock:
            self._samples.append((now, lsn))
            # keep one sample older than max_lag, and the ones after it
            while len(self._samples) > 1 and self._samples[1][0] <= now - self.max_lag:
                self._samples.popleft()

    def _order(self) -> list[int]:
        with self._lock:
            start = self._next
            self._next = (self._next + 1) % len(self._replicas)
        return [(start + i) % len(self._replicas) for i in range(len(self._replicas))]

    def _count(self, index: int, route: str, *, undo: str | None = None) -> None:
        key = (self.labels[index], route)
        with self._lock:
            self.routed[key] += 1
            self._unflushed[key] += 1
            if undo is not None:
                self.routed[(key[0], undo)] -= 1
                self._unflushed[(key[0], undo)] -= 1

    def _flush(self, conn: _PgConn) -> None:
        with self._lock:
            counts: dict[str, dict[str, int]] = {}
            for (name, route), n in self._unflushed.items():
                if n > 0:
                    counts.setdefault(name, {})[route] = n
            self._unflushed.clear()
            self._flushed_at = time.monotonic()
        if counts:
            conn.execute("select groundkit.note_routes(%s::jsonb)", (json.dumps(counts),))

    @contextmanager
    def _connection(self, pool: ConnectionPool[_PgConn]) -> Iterator[_PgConn]:
        from psycopg_pool import PoolTimeout

        try:
            with pool.connection() as conn:
                yield conn
        except PoolTimeout:
            raise DatabaseUnavailable("no database connection came free in time") from None
        except psycopg.Error as exc:
            raise from_psycopg(exc) from None


def _pool(dsn: str, size: int, timeout: float, name: str,
          configure: Callable[[_PgConn], None] | None = None) -> ConnectionPool[_PgConn]:
    from psycopg_pool import ConnectionPool

    return ConnectionPool(dsn, min_size=1, max_size=size, timeout=timeout, open=False, name=name,
                          kwargs={"autocommit": True, "row_factory": dict_row}, configure=configure,
                          connection_class=psycopg.Connection[dict[str, Any]])


def connect_pool(primary: str, replicas: Sequence[str] = (), *, max_lag: float = DEFAULT_MAX_LAG,
                 pool_size: int = POOL_SIZE, pool_timeout: float = POOL_TIMEOUT) -> FencedPool:
    """Pools to ``primary`` and ``replicas`` with the permission fence between them (docs/replicas.md):
    reads go to a replica that has replayed every permission change and lags by at most
    ``max_lag`` seconds, else to the primary; with the primary unreachable they fail closed."""
    return FencedPool(primary, replicas, max_lag=max_lag, pool_size=pool_size, pool_timeout=pool_timeout)


# -- what `groundkit status` reports ---------------------------------------------------------


class StreamingStandby(BaseModel):
    """A standby streaming from the primary, as ``pg_stat_replication`` shows it (its lag columns
    are NULL for a role without pg_read_all_stats)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    state: str | None
    replay_lag_seconds: float | None
    replay_behind_bytes: int | None


class ReplicaReport(BaseModel):
    """One ``--replica``: its replay lag and how far its authority position is behind the
    primary's (the changes not yet replayed, summed over the shards; 0 when it has them all)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    reachable: bool
    lag_seconds: float | None = None
    authority_behind: int | None = None


class RouteCounts(BaseModel):
    """Today's reads the routers counted for one replica: served by it, and sent to the primary
    by the fence (a permission change not yet replayed), by its lag, or because it was down."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    replica: str
    replica_reads: int = 0
    fence: int = 0
    lag: int = 0
    unreachable: int = 0

    @property
    def to_primary(self) -> int:
        return self.fence + self.lag + self.unreachable


class FenceGap(BaseModel):
    """A relation ``groundkit.reader_authority`` reads whose changes do not advance the authority
    position, so the fence cannot hold a replica back from serving them stale: a table without
    the ``groundkit.authority_changed()`` trigger for inserts, updates and deletes (``fix`` is
    the statement that attaches it), or a materialized view (whose refreshes fire no trigger)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    relation: str
    kind: str
    fix: str | None

    def alert(self) -> str:
        if self.fix is None:
            return (f"groundkit.reader_authority reads the {self.kind} {self.relation}: its changes cannot advance "
                    "the authority position, so the replica fence does not see them (map the view over tables "
                    "that carry the groundkit.authority_changed() trigger, docs/replicas.md)")
        return (f"groundkit.reader_authority reads the {self.kind} {self.relation}, which has no "
                "groundkit.authority_changed() trigger for inserts, updates and deletes: the replica fence does "
                f"not see its changes (a replica may serve a revoked member). Fix: {self.fix}")


class ReplicationStatus(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    authority_position: int
    standbys: tuple[StreamingStandby, ...]
    replicas: tuple[ReplicaReport, ...]
    routes: tuple[RouteCounts, ...]
    # relations behind reader_authority the fence cannot see, and functions it calls (whose
    # tables the catalog does not name: they are listed, not judged)
    fence_gaps: tuple[FenceGap, ...] = ()
    authority_functions: tuple[str, ...] = ()

    def alerts(self, lag_alert: float, fence_alert: float) -> list[str]:
        """What is past the thresholds: a relation behind reader_authority the fence cannot see,
        a replica unreachable or lagging more than ``lag_alert`` seconds, or the fence sending more
        than ``fence_alert`` of a replica's reads to the primary."""
        found = [g.alert() for g in self.fence_gaps]
        for r in self.replicas:
            if not r.reachable:
                found.append(f"replica {r.name} is unreachable")
            elif r.lag_seconds is not None and r.lag_seconds > lag_alert:
                found.append(f"replica {r.name} replays {r.lag_seconds:.1f} s behind (alert at {lag_alert:g} s)")
        for s in self.standbys:
            if s.replay_lag_seconds is not None and s.replay_lag_seconds > lag_alert:
                found.append(f"standby {s.name} replays {s.replay_lag_seconds:.1f} s behind "
                             f"(alert at {lag_alert:g} s)")
        for c in self.routes:
            total = c.replica_reads + c.to_primary
            if total and c.fence / total > fence_alert:
                found.append(f"the fence sent {c.fence / total:.0%} of today's reads for {c.replica} to the "
                             f"primary (alert at {fence_alert:.0%})")
        return found


def replication_status(primary: Groundkit, replicas: Sequence[str] = ()) -> ReplicationStatus:
    """The primary's authority position, its streaming standbys, each of ``replicas`` (DSNs) with
    its lag and authority position against the primary's, and today's route counts."""
    position = read_state(primary.conn).authority
    standbys = tuple(StreamingStandby.model_validate(r) for r in primary._fetch(
        "select coalesce(application_name, '') || coalesce('@' || host(client_addr), '') as name, state,"
        " extract(epoch from replay_lag)::float8 as replay_lag_seconds,"
        " pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::bigint as replay_behind_bytes"
        " from pg_stat_replication order by 1", {}))
    reports = tuple(_replica_report(dsn, position) for dsn in replicas)
    counts: dict[str, dict[str, int]] = {}
    for row in primary._fetch("select replica, route, n from groundkit.replica_routes"
                              " where day = current_date order by replica, route", {}):
        counts.setdefault(row["replica"], {})[row["route"]] = int(row["n"])
    routes = tuple(RouteCounts(replica=name, replica_reads=c.get("replica", 0), fence=c.get("fence", 0),
                               lag=c.get("lag", 0), unreachable=c.get("unreachable", 0))
                   for name, c in counts.items())
    gaps, functions = fence_coverage(primary)
    return ReplicationStatus(authority_position=sum(position), standbys=standbys, replicas=reports, routes=routes,
                             fence_gaps=gaps, authority_functions=functions)


# The relations groundkit.reader_authority reads, through views of views, from the catalog: a
# view's rewrite rule depends (pg_depend) on every relation and function its query names. Row
# triggers after insert, update and delete that call authority_changed() must cover each table
# (tgtype bits: 1 row, 2 before, 4 insert, 8 delete, 16 update, 64 instead of; enabled on the
# origin or always).
_READS_SQL = """
with recursive reads(oid) as (
    select to_regclass('groundkit.reader_authority')::oid
    union
    select d.refobjid
      from reads x
      join pg_class v on v.oid = x.oid and v.relkind = 'v'
      join pg_rewrite r on r.ev_class = v.oid
      join pg_depend d on d.classid = 'pg_rewrite'::regclass and d.objid = r.oid
                      and d.refclassid = 'pg_class'::regclass and d.refobjid <> v.oid
)
select format('%%I.%%I', n.nspname, c.relname) as relation,
       case c.relkind when 'm' then 'materialized view' when 'f' then 'foreign table'
                      when 'p' then 'partitioned table' else 'table' end as kind,
       c.relkind = 'm' or coalesce((
           select bit_or(t.tgtype::int) & 28 <> 28
             from pg_trigger t
            where t.tgrelid = c.oid and t.tgfoid = to_regprocedure('groundkit.authority_changed()')
              and t.tgenabled in ('O', 'A') and t.tgtype::int & 67 = 1), true) as unfenced,
       case when c.relkind <> 'm' then
           format('create constraint trigger %%I after insert or update or delete on %%I.%%I deferrable initially '
                  'deferred for each row execute function groundkit.authority_changed();',
                  left(c.relname, 53) || '_authority', n.nspname, c.relname) end as fix
  from reads x
  join pg_class c on c.oid = x.oid and c.relkind <> 'v'
  join pg_namespace n on n.oid = c.relnamespace
 order by 1
"""
_FUNCTIONS_SQL = """
with recursive reads(oid) as (
    select to_regclass('groundkit.reader_authority')::oid
    union
    select d.refobjid
      from reads x
      join pg_class v on v.oid = x.oid and v.relkind = 'v'
      join pg_rewrite r on r.ev_class = v.oid
      join pg_depend d on d.classid = 'pg_rewrite'::regclass and d.objid = r.oid
                      and d.refclassid = 'pg_class'::regclass and d.refobjid <> v.oid
)
select distinct d.refobjid::regprocedure::text as function
  from reads x
  join pg_rewrite r on r.ev_class = x.oid
  join pg_depend d on d.classid = 'pg_rewrite'::regclass and d.objid = r.oid and d.refclassid = 'pg_proc'::regclass
 order by 1
"""


def fence_coverage(gk: Groundkit) -> tuple[tuple[FenceGap, ...], tuple[str, ...]]:
    """The relations behind ``groundkit.reader_authority`` whose changes the permission fence
    cannot see (an app's membership table without the trigger, docs/replicas.md), and the
    functions the view calls (built-in ones are not recorded in the catalog, so these are the
    app's: which tables they read is not visible here)."""
    gaps = tuple(FenceGap(relation=r["relation"], kind=r["kind"], fix=r["fix"])
                 for r in gk._fetch(_READS_SQL, {}) if r["unfenced"])
    functions = tuple(str(r["function"]) for r in gk._fetch(_FUNCTIONS_SQL, {}))
    return gaps, functions


def _replica_report(dsn: str, position: tuple[int, ...]) -> ReplicaReport:
    name = label(dsn)
    try:
        with groundkit_dsn.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
            state = read_state(conn)
    except (GroundkitError, psycopg.Error):
        return ReplicaReport(name=name, reachable=False)
    behind = sum(max(0, p - r) for p, r in zip(position, state.authority, strict=False))
    return ReplicaReport(name=name, reachable=True, lag_seconds=state.lag_seconds, authority_behind=behind)
