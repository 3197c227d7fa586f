"""Moving events: SQLite and Kafka logs, the runner (one fold loop for every mode), the summarizer pool, partition ownership."""
