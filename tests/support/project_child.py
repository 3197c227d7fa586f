"""Child process for crash tests: project a SQLite log into DuckDB, optionally dying mid-transaction.

usage: python project_child.py LOG STORE BATCH_SIZE CRASH_AT_BATCH [TOPIC]

LOG is a SQLite file path or a kafka://HOST:PORT URL (then TOPIC names the
topic, and the child is a projector node: it appends nothing).
CRASH_AT_BATCH = -1 never crashes; N >= 0 SIGKILLs this process inside the
N-th transaction, after the rows are written and before COMMIT.
"""

import os
import signal
import sys

from memfold.core.settings import POLICY_NAMES, Settings
from memfold.core.tokens import counter
from memfold.engine.builders import fold_contexts
from memfold.engine.runner import Runner
from memfold.projections.projector import Projector
from memfold.projections.store import DuckDBProjectionStore
from memfold.streams.logs import open_log


class CrashingStore(DuckDBProjectionStore):
    crash_at = -1
    batches = 0

    def _write(self, cur, changes):
        super()._write(cur, changes)
        if os.environ.get("MEMFOLD_TEST_PROGRESS"):  # inside the transaction, before COMMIT
            print(f"batch {self.batches}", flush=True)
        if self.batches == self.crash_at:
            os.kill(os.getpid(), signal.SIGKILL)
        self.batches += 1


def main() -> None:
    log_arg, store_path, batch_size, crash_at = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    topic = sys.argv[5] if len(sys.argv) > 5 else "memfold.events"
    settings = Settings.load(None, policies=POLICY_NAMES, partitions=4)
    url = log_arg if "://" in log_arg else f"sqlite:///{log_arg}"
    log = open_log(url, partitions=4, topic=topic)
    store = CrashingStore(store_path)
    store.crash_at = crash_at
    runner = Runner(
        log, store, Projector(store, fold_contexts(settings), counter()), batch_size=batch_size,
        emit_requests=not url.startswith("kafka://"),
    )
    while runner.run_once():
        pass
    store.close()
    log.close()


if __name__ == "__main__":
    main()
