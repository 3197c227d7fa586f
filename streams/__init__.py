"""Log and key-store adapters: the SQLite and Kafka event logs, the sealing wrapper, key stores, partition ownership."""
