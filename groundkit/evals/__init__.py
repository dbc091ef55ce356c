"""Retrieval-quality evaluation: test-collection loaders, trec_eval metrics and reference BM25 arms."""
