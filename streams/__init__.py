"""Moving events: SQLite and Kafka logs, the embedded runner, the summarizer worker, the faust app."""
