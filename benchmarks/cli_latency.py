"""Benchmark: wall time of one ``memfold`` CLI command, as a whole process, on the demo data.

    python benchmarks/cli_latency.py [--runs 7] [--data-dir DIR] [--top 10]

Steps: 1. ingest the bundled sample (cli/data/sample.jsonl, what ``memfold
demo`` ingests) into a temporary data dir with ``memfold ingest`` and wait
until it is projected; 2. run each command below RUNS times as its own
process, in rounds (every command once a round, after a warm-up round, so a
machine that slows down for a minute slows every command alike), and print
min/median/max seconds: ``--help``, ``context``,
``append`` (each run appends one more message and waits, as it does by
default), ``history``, ``summaries``, ``sql``; 3. the same commands with
``--url`` against ``memfold serve`` on that data dir (an admin key of the
tenant, made with ``memfold keys create``); 4. time ``python -c "import
memfold.cli.main"`` and the libraries every embedded command loads (DuckDB,
pydantic with one model) against ``python -c pass`` (interpreter start-up
alone), in the same rounds; 5. print the modules with the largest cumulative import time from
``python -X importtime -c "import memfold.cli.main"``. Targets to report
against: p50 <= 0.3 s per command, <= 0.25 s with ``--url``. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

CONVERSATION, TENANT = "support-4711", "acme"  # the demo's conversation (cli/demo.py)
TARGET_S = 0.3
TARGET_URL_S = 0.25


def memfold_command() -> list[str]:
    """Return the ``memfold`` console script of this interpreter's environment (the one users run)."""
    beside = Path(sys.executable).with_name("memfold")
    found = str(beside) if beside.is_file() else shutil.which("memfold")
    if found is None:
        raise SystemExit("no memfold console script beside this Python or on PATH: pip install -e . first")
    return [found]


def commands(data_dir: Path) -> dict[str, list[str]]:
    """The embedded commands (``--help`` first), on ``data_dir``."""
    return {"memfold --help": [*memfold_command(), "--help"],
            **reads_and_writes("", [*memfold_command(), "--data-dir", str(data_dir)])}


def remote_commands(url: str) -> dict[str, list[str]]:
    """The same commands with ``--url``."""
    return reads_and_writes("--url ", [*memfold_command(), "--url", url])


def reads_and_writes(label: str, base: list[str]) -> dict[str, list[str]]:
    """Return ``{label: argv}`` of the timed commands, each ``base`` + its arguments."""
    return {
        f"{label}context {CONVERSATION}": [*base, "context", CONVERSATION, "--tenant", TENANT],
        f"{label}append {CONVERSATION} user TEXT": [*base, "append", CONVERSATION, "user", "Is the refund on its way?",
                                                    "--tenant", TENANT],
        f"{label}history {CONVERSATION}": [*base, "history", CONVERSATION, "--tenant", TENANT],
        f"{label}summaries {CONVERSATION}": [*base, "summaries", CONVERSATION, "--tenant", TENANT],
        f'{label}sql "SELECT count(*) FROM messages"': [*base, "sql", "SELECT count(*) FROM messages"],
    }


@contextmanager
def served(data_dir: Path, env: dict[str, str]):
    """Run ``memfold serve`` on ``data_dir`` on a free loopback port; yield (url, admin API key of the tenant)."""
    made = subprocess.run([*memfold_command(), "--data-dir", str(data_dir), "keys", "create", "--tenant", TENANT,
                           "--role", "admin", "--json"], check=True, capture_output=True, text=True, env=env)
    key = json.loads(made.stdout)["key"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([*memfold_command(), "--data-dir", str(data_dir), "serve", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=1):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"memfold serve did not come up on {url}") from None
                time.sleep(0.2)
        yield url, key
    finally:
        server.terminate()
        server.wait(timeout=60)


def timed(cmd: list[str], env: dict[str, str]) -> float:
    """Run ``cmd`` to completion and return its wall time in seconds; a failing command stops the benchmark."""
    t0 = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    took = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited with {done.returncode}:\n{done.stderr[-2000:]}")
    return took


def import_times(args: list[str], env: dict[str, str]) -> tuple[int, list[tuple[int, int, str]]]:
    """Run ``python -X importtime ARGS``; return the total import time (us) and every (cumulative us, self us, module) row, largest first."""
    done = subprocess.run([sys.executable, "-X", "importtime", *args], capture_output=True, text=True, env=env,
                          check=True)
    rows, total = [], 0
    for line in done.stderr.splitlines():
        # "import time:       self [us] |  cumulative | imported package"
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        self_us, cumulative_us, module = line[len("import time:"):].split("|", 2)
        rows.append((int(cumulative_us), int(self_us), module.rstrip()))
        if module.startswith(" ") and not module.startswith("  "):  # top level: the rows below it are inside it
            total += int(cumulative_us)
    return total, sorted(rows, reverse=True)


LIBRARIES = "import duckdb\nfrom pydantic import BaseModel\nclass M(BaseModel):\n    a: int = 0"


def in_rounds(cmds: dict[str, list[str]], env: dict[str, str], runs: int) -> dict[str, list[float]]:
    """Return ``runs`` wall times of each command, run once each a round after a warm-up round (page cache,
    .pyc files, as for a user's second command)."""
    for cmd in cmds.values():
        timed(cmd, env)
    times: dict[str, list[float]] = {label: [] for label in cmds}
    for _ in range(runs):
        for label, cmd in cmds.items():
            times[label].append(timed(cmd, env))
    return times


def line(label: str, times: list[float], target: float = TARGET_S) -> str:
    p50 = statistics.median(times)
    mark = "" if p50 <= target else f"  over the {target} s target"
    return f"{label:<42} {min(times):7.3f} {p50:7.3f} {max(times):7.3f}{mark}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="processes per command (default 7)")
    parser.add_argument("--data-dir", type=Path, help="an empty dir to use (default: a temporary one, removed)")
    parser.add_argument("--top", type=int, default=10, help="modules to list by cumulative import time")
    args = parser.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFOLD_")}  # this run's dir and defaults only

    def print_imports(title: str, args_: list[str]) -> None:
        total, rows = import_times(args_, env)
        print(f"top {args.top} modules by cumulative import time ({title}; all imports: {total / 1000:.0f} ms):")
        print(f"{'cumulative ms':>13} {'self ms':>8}  module")
        for cumulative, own, module in rows[:args.top]:
            print(f"{cumulative / 1000:13.1f} {own / 1000:8.1f}  {module}")

    with tempfile.TemporaryDirectory(prefix="memfold-cli-") as tmp:
        data_dir = args.data_dir or Path(tmp) / "data"
        sample = Path(str(resources.files("memfold.cli") / "data" / "sample.jsonl"))
        t0 = time.perf_counter()
        subprocess.run([*memfold_command(), "--data-dir", str(data_dir), "ingest", str(sample), "--quiet"],
                       check=True, stdout=subprocess.DEVNULL, env=env)
        lines = sum(1 for _ in sample.open())
        print(f"setup: memfold ingest {sample.name} ({lines} lines) into {data_dir}: {time.perf_counter() - t0:.2f} s")
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {args.runs} runs per command, "
              f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        if env.get("PYTHONDONTWRITEBYTECODE"):  # then the warm-up run leaves no .pyc files behind
            print("PYTHONDONTWRITEBYTECODE is set: modules without a .pyc (memfold's own, in an editable install) "
                  "are compiled in every run; unset it for the figures a user sees")
        print()
        print(f"{'command (one process each)':<42} {'min s':>7} {'p50 s':>7} {'max s':>7}")
        for label, times in in_rounds(commands(data_dir), env, args.runs).items():
            print(line(label, times), flush=True)
        with served(data_dir, env) as (url, key):
            remote_env = {**env, "MEMFOLD_API_KEY": key}
            for label, times in in_rounds(remote_commands(url), remote_env, args.runs).items():
                print(line(label, times, TARGET_URL_S), flush=True)

        print()
        bare, cli, libraries = "python -c pass", 'python -c "import memfold.cli.main"', "python -c <DuckDB, pydantic, a model>"
        baseline = in_rounds({bare: [sys.executable, "-c", "pass"], cli: [sys.executable, "-c", "import memfold.cli.main"],
                              libraries: [sys.executable, "-c", LIBRARIES]}, env, args.runs)
        for label, times in baseline.items():
            print(line(label, times))
        p50 = {label: statistics.median(times) for label, times in baseline.items()}
        print(f"import of memfold.cli.main alone (p50 difference): {p50[cli] - p50[bare]:.3f} s; "
              f"the libraries every embedded command loads: {p50[libraries] - p50[bare]:.3f} s")

        print()
        print_imports('python -X importtime -c "import memfold.cli.main"', ["-c", "import memfold.cli.main"])
        print()
        # What a whole command imports, the lazy imports inside it included.
        context = commands(data_dir)[f"context {CONVERSATION}"]
        print_imports(f"python -X importtime memfold context {CONVERSATION}", context)
    return 0


if __name__ == "__main__":
    sys.exit(main())
