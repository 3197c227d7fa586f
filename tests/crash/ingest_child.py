"""Child process for the kill -9 suite: ingest a JSONL file as ``memfold ingest`` does, printing every acknowledged batch.

usage: python ingest_child.py DATA_DIR FILE BATCH_SIZE [KAFKA_URL TOPIC]

Prints ``acked ID ID ...`` after each append returned (the evidence of what
the log promised to keep), ``ingested`` when the file is done, then (embedded
mode) waits for every summary due, like ``memfold ingest`` without ``--no-wait``.
The parent SIGKILLs it at a moment of its choosing.
"""

import sys
from pathlib import Path

from memfold.cli.ingest import ingest_file
from memfold.core.settings import Settings
from memfold.engine.engine import MemoryEngine


def main() -> None:
    data_dir, path, batch_size = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    kafka = len(sys.argv) > 4
    overrides = {"log": sys.argv[4], "topic": sys.argv[5]} if kafka else {}
    settings = Settings.load(None, data_dir=data_dir, **overrides)
    with MemoryEngine(settings, role="client" if kafka else "embedded") as engine:
        append = engine.append_events

        def acked(events):
            positions = append(events)
            print("acked", *(e.event_id for e in events), flush=True)
            return positions

        engine.append_events = acked
        ingest_file(engine, path, batch_size=batch_size, progress=False)
        print("ingested", flush=True)
        if not kafka:
            engine.wait_idle(timeout=600)
    print("done", flush=True)


if __name__ == "__main__":
    main()
