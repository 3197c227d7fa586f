"""Shared parts of the shard-node tests: ``memfold project``/``serve`` nodes as subprocesses over one topic."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from memfold.core.events import MessageAppended
from memfold.core.partitioner import partition_for
from memfold.core.settings import POLICY_NAMES

MEMFOLD = str(Path(sys.executable).with_name("memfold"))
WAIT_S = 120  # an upper bound for a node to own or catch up on a loaded machine; never reached when all is well


def node_env(topic: str, partitions: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")}
    env.update(MEMFOLD_TOPIC=topic, MEMFOLD_PARTITIONS=str(partitions), MEMFOLD_POLICIES=",".join(POLICY_NAMES))
    return env


def project(bootstrap: str, topic: str, partitions: int, data_dir: Path, *flags: str) -> str:
    """Run ``memfold project --until-caught-up`` to completion; return its output."""
    done = subprocess.run(
        [MEMFOLD, "project", "--log", f"kafka://{bootstrap}", "--data-dir", str(data_dir), "--until-caught-up",
         *flags], capture_output=True, text=True, timeout=300, env=node_env(topic, partitions),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


class NodeProcess:
    """A long-running ``memfold project`` shard node; its output goes to a file quoted in failures."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, data_dir: Path, log_path: Path, *flags: str):
        self.log_path = log_path
        self._log = open(log_path, "a")
        self.proc = subprocess.Popen(
            [MEMFOLD, "project", "--log", f"kafka://{bootstrap}", "--data-dir", str(data_dir),
             "--status-every", "0.3", "--session-timeout", "6", *flags],
            stdout=self._log, stderr=subprocess.STDOUT, env=node_env(topic, partitions),
        )

    def text(self) -> str:
        return self.log_path.read_text()

    def wait_for_line(self, predicate, what: str, after: int = 0) -> str:
        """Wait until a line of the output past character ``after`` satisfies ``predicate``; return it."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"node exited with {self.proc.returncode}:\n{self.text()[-3000:]}"
            for line in self.text()[after:].splitlines():
                if predicate(line):
                    return line
            time.sleep(0.1)
        raise AssertionError(f"node never logged {what}:\n{self.text()[-3000:]}")

    def wait_caught_up(self, partitions: list[int], after: int) -> None:
        """Wait for a status line, written after character ``after``, saying it folds ``partitions`` with no lag."""
        self.wait_for_line(lambda ln: f"partitions {partitions}, lag 0 events" in ln,
                           f"partitions {partitions} with lag 0", after)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(30)
        self._log.close()

    def terminate(self) -> int:
        self.proc.terminate()
        try:
            return self.proc.wait(60)
        finally:
            self._log.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self._log.close()


def partitions_of(messages: list[MessageAppended], partitions: int) -> set[int]:
    return {partition_for(m.key, partitions) for m in messages}


def union(*projections: dict[str, list[tuple]]) -> dict[str, list[tuple]]:
    """Return the tables of several shard projections merged, rows in the canonical order ``projection`` uses."""
    out: dict[str, list[tuple]] = {}
    for proj in projections:
        for table, rows in proj.items():
            out.setdefault(table, []).extend(rows)
    return {t: sorted(rows, key=lambda r: tuple("" if v is None else str(v) for v in r)) for t, rows in out.items()}
