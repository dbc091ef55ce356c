"""Retrieval quality (``groundkit eval quality``): groundkit beside reference BM25 engines.

- :mod:`~groundkit.quality.harness`: loads a collection into a scratch database, runs the arms,
  scores them (``run_quality``).
- :mod:`~groundkit.quality.datasets`: BEIR and Cranfield loaders.
- :mod:`~groundkit.quality.arms`: the reference engines (SQLite FTS5, tantivy, bm25s).
- :mod:`~groundkit.quality.metrics`: trec_eval's metrics through ir-measures.

Whether search ever leaks is another job: :mod:`groundkit.gate`.
"""
