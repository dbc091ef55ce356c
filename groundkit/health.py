"""The index's health, as ``groundkit status`` shows it and ``status --check`` alerts on it: one
report and one set of thresholds, read by the CLI and the console alike, so the two cannot
disagree about what is wrong.

:func:`health_report` reads the search index's state, what a maintenance pass would do, the
workers' heartbeats, outdated chunks, each embedding model's lag, the replication state and
whether a passing gate certifies the configuration serving readers (the gate ledger,
:mod:`groundkit.deployment`); :class:`Thresholds` says when the embedding lag, a replica's lag or
the fence's routing alerts. An uncertified configuration always alerts.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from groundkit import deployment, embedding, replicas
from groundkit.client import Groundkit
from groundkit.config import Settings
from groundkit.deployment import DeploymentStatus
from groundkit.embedding import EmbeddingLag
from groundkit.models import AnalysisState, Due, IndexStatus, OutdatedChunks, WorkerHeartbeat
from groundkit.replicas import ReplicationStatus

__all__ = ["FENCE_ALERT", "REPLAY_LAG_ALERT_S", "HealthReport", "Thresholds", "gate_alerts", "health_report",
           "lag_alert"]

#: a replica (or streaming standby) replaying further behind than this many seconds alerts
REPLAY_LAG_ALERT_S = 30.0
#: the fence sending more than this share of a replica's reads today to the primary alerts
FENCE_ALERT = 0.5


class Thresholds(BaseModel):
    """When ``status --check`` exits 1 (and the console shows an alert)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: the active model's oldest unembedded chunk older than this (seconds; 0 or less: never)
    embed_lag_alert_s: float
    #: more chunks than this lacking the active model's embedding (None: no limit)
    embed_lag_alert_chunks: int | None = Field(default=None, ge=0)
    replay_lag_alert_s: float = Field(default=REPLAY_LAG_ALERT_S, ge=0)
    fence_alert: float = Field(default=FENCE_ALERT, ge=0, le=1)

    @classmethod
    def from_settings(cls, settings: Settings | None = None, *, embed_lag_alert_s: float | None = None,
                      embed_lag_alert_chunks: int | None = None, replay_lag_alert_s: float = REPLAY_LAG_ALERT_S,
                      fence_alert: float = FENCE_ALERT) -> Thresholds:
        """The embedding thresholds from the environment (``GROUNDKIT_EMBEDDING_LAG_ALERT_S``,
        ``..._CHUNKS``) unless given; the replication ones as given."""
        settings = settings or Settings.from_env()
        return cls(
            embed_lag_alert_s=settings.embedding_lag_alert_s if embed_lag_alert_s is None else embed_lag_alert_s,
            embed_lag_alert_chunks=(settings.embedding_lag_alert_chunks if embed_lag_alert_chunks is None
                                    else embed_lag_alert_chunks),
            replay_lag_alert_s=replay_lag_alert_s, fence_alert=fence_alert)


def lag_alert(lag: EmbeddingLag, alert_s: float, alert_chunks: int | None) -> str | None:
    """Why an active model's lag alerts, or None."""
    if lag.state != "active":
        return None
    if alert_s > 0 and lag.oldest_age_s is not None and lag.oldest_age_s > alert_s:
        return (f"{lag.model}: the oldest unembedded chunk waits {lag.oldest_age_s:.0f} s, more than "
                f"{alert_s:g} s (is a worker running? groundkit worker, or groundkit embed)")
    if alert_chunks is not None and lag.missing > alert_chunks:
        return f"{lag.model}: {lag.missing:,} chunks unembedded, more than {alert_chunks:,}"
    return None


def gate_alerts(gate: DeploymentStatus | None) -> tuple[str, ...]:
    """Why the configuration serving readers alerts: no ledger, or no passing gate certifies it."""
    if gate is None:
        return ("this database has no gate ledger (groundkit migrate)",)
    if gate.certified:
        return ()
    return (f"the configuration serving readers is not certified: {gate.reason}",)


class HealthReport(BaseModel):
    """Everything ``groundkit status`` shows, with the alerts of ``thresholds``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: IndexStatus
    due: tuple[Due, ...]
    workers: tuple[WorkerHeartbeat, ...]
    outdated: tuple[OutdatedChunks, ...]
    #: per language the index holds, its analysis against the analysis now (docs/bm25/analysis.md)
    analysis: tuple[AnalysisState, ...]
    #: whether this database can do dense search (pgvector)
    dense: bool
    lags: tuple[EmbeddingLag, ...]
    lag_alerts: tuple[str, ...]
    replication: ReplicationStatus
    replica_alerts: tuple[str, ...]
    #: ``groundkit.deployment_status()``: which configuration serves readers and which gate run
    #: certifies it (None: the database has no gate ledger)
    deployment: DeploymentStatus | None
    gate_alerts: tuple[str, ...]
    thresholds: Thresholds

    @property
    def alerts(self) -> tuple[str, ...]:
        """Every breached threshold: ``status --check`` exits 1 when there is one."""
        return self.lag_alerts + self.replica_alerts + self.gate_alerts


def health_report(gk: Groundkit, thresholds: Thresholds, replica_dsns: Sequence[str] = ()) -> HealthReport:
    """Read the health of ``gk``'s database (and of ``replica_dsns``, read replicas) and judge it
    against ``thresholds``."""
    dense = embedding.dense_available(gk)
    lags = tuple(embedding.lag(gk)) if dense else ()
    replication = replicas.replication_status(gk, tuple(replica_dsns))
    gate = deployment.serving_status(gk)
    lag_alerts = tuple(a for a in (lag_alert(lag, thresholds.embed_lag_alert_s, thresholds.embed_lag_alert_chunks)
                                   for lag in lags) if a)
    return HealthReport(
        index=gk.index_status(), due=gk.due(), workers=gk.workers(), outdated=gk.outdated_chunks(),
        analysis=gk.analysis_status(), dense=dense,
        lags=lags, lag_alerts=lag_alerts, replication=replication,
        replica_alerts=tuple(replication.alerts(thresholds.replay_lag_alert_s, thresholds.fence_alert)),
        deployment=gate, gate_alerts=gate_alerts(gate), thresholds=thresholds)
