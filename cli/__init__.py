"""The ``memfold`` command: argument parsing, the commands (embedded or ``--url``), ingest and the demo."""
