"""Embedders: the local hashing embedder's properties, the factory, and the optional MiniLM package."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memfold.core.errors import ConfigError
from memfold.core.settings import EmbedderSettings, Settings
from memfold.projections.embedders import (
    LocalHashEmbedder,
    SentenceTransformerEmbedder,
    cosine,
    sentence_transformer_available,
)
from memfold.projections.summarizers import build_embedder

LOCAL = LocalHashEmbedder(dimensions=256)

SIMILAR = [
    ("I want to cancel my order 1234", "I want to cancel my order #1234 please"),
    ("how do I reset my router password", "how do I reset my router password please"),
    ("The refund for my broken headphones has not arrived yet",
     "My refund for the broken headphones still has not arrived"),
]
UNRELATED = [
    ("I want to cancel my order 1234", "best hiking trails near the alps"),
    ("What is the weather in Paris tomorrow", "Can you reset my account password"),
    ("python packaging wheels setuptools", "my cat refuses to eat dry food"),
]


def norm(v) -> float:
    return math.sqrt(sum(x * x for x in v))


@pytest.mark.parametrize("a, b", SIMILAR)
def test_similar_texts_are_close(a, b):
    assert cosine(*LOCAL.embed([a, b])) > 0.7


@pytest.mark.parametrize("a, b", UNRELATED)
def test_unrelated_texts_are_far(a, b):
    assert cosine(*LOCAL.embed([a, b])) < 0.3


@given(st.text(max_size=200))
def test_every_vector_has_unit_length_and_the_configured_size(text):
    [v] = LOCAL.embed([text])
    assert len(v) == 256 and math.isclose(norm(v), 1.0, rel_tol=1e-9)
    assert LOCAL.embed([text]) == LocalHashEmbedder(256).embed([text])  # pure: a new instance agrees


def test_features_are_unigrams_and_bigrams_case_folded():
    features = LOCAL.features("Cancel my ORDER, cancel!")
    assert set(features) == {"u:cancel", "u:my", "u:order", "b:cancel my", "b:my order", "b:order cancel"}
    assert features["u:cancel"] > features["u:my"] > features["b:my order"]


def test_texts_without_words_share_one_fixed_unit_vector():
    empty, punct = LOCAL.embed(["", "?!..."])
    assert empty == punct and math.isclose(norm(empty), 1.0)


def test_dimensions_are_configurable_and_checked():
    assert len(LocalHashEmbedder(64).embed(["hello world"])[0]) == 64
    with pytest.raises(ConfigError):
        LocalHashEmbedder(4)


def test_vectors_do_not_depend_on_the_process_hash_seed():
    script = (
        "import json; from memfold.projections.embedders import LocalHashEmbedder;"
        "print(json.dumps(LocalHashEmbedder(32).embed(['cancel order #1234', 'refund please'])))"
    )
    outputs = []
    for seed in ("0", "12345"):
        result = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONHASHSEED": seed},
                                capture_output=True, text=True, check=True)
        outputs.append(json.loads(result.stdout))
    local = [list(v) for v in LocalHashEmbedder(32).embed(["cancel order #1234", "refund please"])]
    assert outputs[0] == outputs[1] == local


def test_build_embedder_defaults_to_the_local_one():
    embedder = build_embedder(Settings(embedder=EmbedderSettings(dimensions=128)))
    assert isinstance(embedder, LocalHashEmbedder) and embedder.dimensions == 128 and embedder.name == "local-hash"


def test_sentence_transformers_kind_needs_the_optional_package():
    settings = Settings(embedder=EmbedderSettings(kind="sentence-transformers", dimensions=384))
    if sentence_transformer_available():
        assert build_embedder(settings).dimensions == 384
        with pytest.raises(ConfigError, match="dimensions = 384"):
            build_embedder(Settings(embedder=EmbedderSettings(kind="sentence-transformers", dimensions=256)))
    else:
        with pytest.raises(ConfigError, match=r"memfold\[st\]"):
            build_embedder(settings)


@pytest.mark.skipif(not sentence_transformer_available(), reason="optional extra memfold[st] not installed")
def test_minilm_from_the_packaged_model_offline():
    embedder = SentenceTransformerEmbedder()
    vectors = embedder.embed([SIMILAR[0][0], SIMILAR[0][1], UNRELATED[0][1]])
    assert all(len(v) == 384 and math.isclose(norm(v), 1.0, rel_tol=1e-4) for v in vectors)
    assert cosine(vectors[0], vectors[1]) > 0.7 > cosine(vectors[0], vectors[2])
    assert embedder.embed([SIMILAR[0][0]])[0] == pytest.approx(vectors[0], abs=1e-5)
