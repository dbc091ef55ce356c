"""OpenTelemetry spans and counters (groundkit/telemetry.py), exported in memory by the SDK."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from typer.testing import CliRunner

from groundkit import ConfigError, ContentObject, Groundkit, ReaderNotAllowed, telemetry
from groundkit.cli import app
from groundkit.config import Settings

# One exporter and reader per process, kept on the opentelemetry.trace module: other test files
# import this one as tests.test_telemetry while pytest imports it as test_telemetry, two module
# objects, and OpenTelemetry's providers can be set only once, so both must export to these.
_SHARED: tuple[InMemorySpanExporter, InMemoryMetricReader, list[bool]] = trace.__dict__.setdefault(
    "_groundkit_test_exporters", (InMemorySpanExporter(), InMemoryMetricReader(), [False]))
_EXPORTER, _METRICS, _INSTALLED = _SHARED


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The SDK installed once per process (OpenTelemetry's providers are set once), emptied per test."""
    if not _INSTALLED[0]:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
        metrics.set_meter_provider(MeterProvider(metric_readers=[_METRICS]))
        _INSTALLED[0] = True
    _EXPORTER.clear()
    telemetry.configure(include=None)
    yield _EXPORTER
    telemetry.configure(include=None)


def _named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def _counter_sum(name: str, **labels: Any) -> float:
    data = _METRICS.get_metrics_data()
    total = 0.0
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name == name:
                    for point in metric.data.data_points:
                        assert isinstance(point, NumberDataPoint)
                        if all((point.attributes or {}).get(k) == v for k, v in labels.items()):
                            total += point.value
    return total


def test_search_span_has_flow_mode_k_hits_and_no_query_or_reader(community: Groundkit,
                                                                 spans: InMemorySpanExporter) -> None:
    gk = community
    gk.put_object("a", 1, "board_post", "open", "T0", "Pricing", "How to price a commission")
    with telemetry.span("run", flow="tutor"):
        hits = gk.search("t2", "pricing", k=5)
    (span,) = _named(spans, "groundkit.search")
    attrs = dict(span.attributes or {})
    assert attrs["groundkit.flow"] == "tutor"
    assert attrs["groundkit.mode"] == "bm25"
    assert attrs["groundkit.k"] == 5
    assert attrs["groundkit.hits"] == len(hits) == 1
    assert attrs["groundkit.reader_tier_rank"] == 2
    assert "groundkit.query" not in attrs and "groundkit.reader" not in attrs
    assert "pricing" not in repr(attrs) and "t2" not in str(list(attrs.values()))
    (run,) = _named(spans, "groundkit.run")
    assert span.parent is not None and span.parent.span_id == run.context.span_id


def test_search_span_carries_query_and_reader_only_when_configured(community: Groundkit,
                                                                   spans: InMemorySpanExporter) -> None:
    telemetry.configure(include={"query", "reader"})
    community.search("t1", "pricing")
    (span,) = _named(spans, "groundkit.search")
    assert span.attributes is not None
    assert span.attributes["groundkit.query"] == "pricing"
    assert span.attributes["groundkit.reader"] == "t1"


def test_unknown_sensitive_attribute_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError):
        telemetry.configure(include={"body"})
    monkeypatch.setenv(telemetry.INCLUDE_ENV, "query,password")
    telemetry.configure(include=None)
    with pytest.raises(ConfigError):
        telemetry.included()
    monkeypatch.setenv(telemetry.INCLUDE_ENV, "query")
    telemetry.configure(include=None)
    assert telemetry.included() == {"query"}
    assert Settings.from_env().telemetry_include == "query"  # a known variable, not a startup error
    telemetry.configure(include=None)


def test_search_that_raises_records_the_error_on_its_span(community: Groundkit,
                                                          spans: InMemorySpanExporter) -> None:
    # the database refuses it: this login is bound to member t0 and searches as t1 (GK010)
    community.conn.execute("insert into groundkit.login_members (login, member_sub) values (session_user, 't0')")
    with pytest.raises(ReaderNotAllowed):
        community.search("t1", "pricing")
    (span,) = _named(spans, "groundkit.search")
    assert span.status.status_code is StatusCode.ERROR
    (event,) = [e for e in span.events if e.name == "exception"]
    assert event.attributes is not None
    assert str(event.attributes["exception.type"]).endswith("ReaderNotAllowed")
    assert "pricing" not in str(event.attributes)


def test_ingest_spans_for_put_object_and_put_objects(community: Groundkit, spans: InMemorySpanExporter) -> None:
    gk = community
    gk.put_object("a", 1, "board_post", "open", "T0", "Pricing", "How to price a commission")
    gk.put_objects([ContentObject(object_id=f"b{i}", version=1, content_type="document", space_id="open",
                                  tier_visibility="T0", title="t", body="body text") for i in range(3)])
    (one,) = _named(spans, "groundkit.ingest.put_object")
    assert one.attributes is not None and one.attributes["groundkit.status"] == "applied"
    assert one.attributes["groundkit.content_type"] == "board_post"
    (many,) = _named(spans, "groundkit.ingest.put_objects")
    assert many.attributes is not None and many.attributes["groundkit.objects"] == 3
    assert many.status.status_code is StatusCode.UNSET


def test_ingest_span_that_raises_is_an_error(community: Groundkit, spans: InMemorySpanExporter) -> None:
    from groundkit import UnknownSpace

    with pytest.raises(UnknownSpace):
        community.put_object("a", 1, "board_post", "nowhere", "T0", "Pricing", "text")
    (span,) = _named(spans, "groundkit.ingest.put_object")
    assert span.status.status_code is StatusCode.ERROR
    assert any(e.name == "exception" for e in span.events)


def test_groundkit_ingest_has_a_run_span_around_its_writes(community: Groundkit, dsn: str, tmp_path: Path,
                                                          spans: InMemorySpanExporter) -> None:
    (tmp_path / "a.md").write_text("# Kilns\n\nHow hot a kiln gets.\n")
    (tmp_path / "b.md").write_text("# Glazes\n\nGlaze recipes.\n")
    result = CliRunner().invoke(app, ["ingest", str(tmp_path), "--space", "open", "--tier", "T0", "--dsn", dsn])
    assert result.exit_code == 0, result.output
    (run,) = _named(spans, "groundkit.ingest.run")
    assert run.attributes is not None
    assert (run.attributes["groundkit.files"], run.attributes["groundkit.written"]) == (2, 2)
    assert _named(spans, "groundkit.ingest.put_objects")


def test_merge_and_analyze_spans(community: Groundkit, spans: InMemorySpanExporter) -> None:
    community.put_object("a", 1, "board_post", "open", "T0", "Pricing", "How to price a commission")
    community.merge_pending()
    community.analyze_postings()
    names = {s.name for s in spans.get_finished_spans()}
    assert {"groundkit.maintenance.merge", "groundkit.maintenance.analyze"} <= names


def test_counters_for_hits_tokens_and_cost(community: Groundkit, spans: InMemorySpanExporter) -> None:
    community.put_object("a", 1, "board_post", "open", "T0", "Pricing", "How to price a commission")
    before = _counter_sum("groundkit.hits", **{"groundkit.mode": "bm25"})
    community.search("t1", "pricing")
    assert _counter_sum("groundkit.hits", **{"groundkit.mode": "bm25"}) == before + 1
    telemetry.add_tokens(120, direction="in", model="m-1", flow="tutor")
    telemetry.add_cost(0.25, currency="USD", model="m-1", flow="tutor")
    assert _counter_sum("groundkit.tokens", **{"groundkit.model": "m-1", "groundkit.direction": "in"}) >= 120
    assert _counter_sum("groundkit.cost", **{"groundkit.currency": "USD"}) >= 0.25


def test_every_call_works_without_the_package(dsn: str) -> None:
    """With opentelemetry unimportable, telemetry is off and search, ingest and the helpers work."""
    script = f"""
import sys
sys.modules['opentelemetry'] = None  # import fails
from groundkit import Groundkit, telemetry
assert not telemetry.enabled()
with telemetry.span('run', flow='x') as s:
    assert s is None
telemetry.add_hits(1); telemetry.add_tokens(1, direction='in'); telemetry.add_cost(1.0, currency='USD')
with Groundkit.connect({dsn!r}) as gk:
    gk.put_member('m', 'T1'); gk.put_space('s', 'T0')
    gk.put_object('a', 1, 'board_post', 's', 'T0', 'Pricing', 'How to price a commission')
    assert [h.object_id for h in gk.search('m', 'pricing')] == ['a']
print('ok')
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_run_span_wraps_a_run_and_tags_its_search_with_the_flow(community: Groundkit,
                                                                 spans: InMemorySpanExporter) -> None:
    community.put_object("k1", 1, "board_post", "open", "T0", "Kilns", "kiln firing schedule")
    with community.run(flow="tutor", reader="t1", model="m-1") as run:
        run.search("kiln")
    (span,) = _named(spans, "groundkit.run")
    assert span.attributes is not None
    assert (span.attributes["groundkit.flow"], span.attributes["groundkit.model"]) == ("tutor", "m-1")
    with pytest.raises(KeyError), community.run(flow="tutor", reader="t1"):
        raise KeyError("the app failed")
    failed = _named(spans, "groundkit.run")[-1]
    assert failed.status.status_code == StatusCode.ERROR
