"""A read never loads the tokenizer when the fold recorded the token counts its plan needs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memfold.cli.ingest import ingest_file
from memfold.core.settings import POLICY_NAMES, Settings
from memfold.core.tokens import MESSAGE_OVERHEAD, TokenCounter
from memfold.engine.engine import MemoryEngine

SAMPLE = Path(__file__).resolve().parents[2] / "cli" / "data" / "sample.jsonl"

# A process of its own: token counters are shared within a process, and the writer's has loaded the tokenizer.
READER = """
import json, sys
from pathlib import Path
from memfold.core.settings import POLICY_NAMES, Settings
from memfold.engine.engine import MemoryEngine

data_dir, policy = Path(sys.argv[1]), sys.argv[2]
with MemoryEngine(Settings.load(None, data_dir=data_dir, policies=POLICY_NAMES), start=False,
                  policy_changes="refuse") as reader:
    folded = reader.runner.run_once()
    memories = [(m.kind, m.content, m.tokens)
                for c in reader.conversation_ids(tenant_id="acme")
                for m in reader.context(c, tenant_id="acme", policy=policy)
                if m.kind not in ("verbatim", "current", "system_prompt")]
    print(json.dumps({"folded": folded, "loaded": reader.counter.loaded, "memories": memories}))
"""


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """The sample ingested with every policy and summarized, then closed."""
    path = tmp_path_factory.mktemp("counts")
    with MemoryEngine(Settings.load(None, data_dir=path, policies=POLICY_NAMES)) as engine:
        assert ingest_file(engine, SAMPLE, progress=False).accepted > 600
        engine.wait_idle(timeout=300)
    return path


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_a_reader_plans_every_policy_without_the_tokenizer(data_dir, policy):
    done = subprocess.run([sys.executable, "-c", READER, str(data_dir), policy], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    read = json.loads(done.stdout)
    assert read["folded"] == 0  # caught up: the read only reads
    assert read["memories"], f"{policy} has no memory in any conversation of the sample: nothing was tested"
    assert read["loaded"] is False, "a read loaded the tokenizer although the fold recorded its counts"
    counter = TokenCounter()  # and the recorded counts are the real ones
    for kind, content, tokens in read["memories"]:
        assert tokens == counter.count(content) + MESSAGE_OVERHEAD, (policy, kind)


# Appends one short ASCII message and folds it, in a process of its own (as `memfold append` does).
APPENDER = """
import json, sys
from pathlib import Path
from memfold.core.settings import POLICY_NAMES, Settings
from memfold.engine.engine import MemoryEngine

data_dir, policy, conversation = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
with MemoryEngine(Settings.load(None, data_dir=data_dir, policies=POLICY_NAMES), start=False) as writer:
    writer.append_message(conversation, "user", "Is the refund on its way?", tenant_id="acme")
    folded = writer.runner.run_once()
    plan = writer.store.plan_tokens(policy, "acme", conversation)
    print(json.dumps({"folded": folded, "loaded": writer.counter.loaded, "plan": plan}))
"""


def test_a_process_that_appends_a_short_message_and_folds_it_leaves_tiktoken_unloaded(tmp_path, data_dir):
    copy = tmp_path / "data"
    shutil.copytree(data_dir, copy)
    with MemoryEngine(Settings.load(None, data_dir=copy, policies=POLICY_NAMES), start=False) as engine:
        conversation = engine.conversation_ids(tenant_id="acme")[0]
    done = subprocess.run([sys.executable, "-c", APPENDER, str(copy), "sliding_window", conversation],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    wrote = json.loads(done.stdout)
    assert wrote["folded"] == 1
    assert wrote["plan"], "the state records no plan counts: nothing was tested"
    # The memory texts the plans count were counted before (their counts are recorded with the states the
    # fold loads) and the new message is short ASCII (memfold.core.cl100k): no tiktoken in this process.
    assert wrote["loaded"] is False
