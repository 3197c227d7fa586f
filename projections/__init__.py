"""What events become: policy folds, context assembly, the DuckDB store, summarizer and embedder adapters."""
