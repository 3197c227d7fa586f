"""The Summarizer contract over the offline summarizer and the OpenAI-compatible one (real client, loopback server)."""

from __future__ import annotations

import pytest
from fixtures.openai_server import hang, model_says

from contract.summarizer_contract import DeterministicSummarizerContract, Failure, FallibleSummarizerContract, Subject
from memfold.core.errors import SummarizerOutputError, SummarizerTimeoutError
from memfold.core.settings import SummarizerSettings
from memfold.projections.offline_summarizer import OfflineSummarizer
from memfold.projections.openai_summarizer import OpenAISummarizer
from memfold.projections.summarizers import DeferredSummarizer


class TestOfflineSummarizer(DeterministicSummarizerContract):
    @pytest.fixture
    def subject(self) -> Subject:
        return Subject(make=lambda **_: OfflineSummarizer())


class TestDeferredOfflineSummarizer(DeterministicSummarizerContract):
    """What the engine holds: the offline summarizer made on first use."""

    @pytest.fixture
    def subject(self) -> Subject:
        return Subject(make=lambda **_: DeferredSummarizer("offline", OfflineSummarizer))


class TestOpenAISummarizer(FallibleSummarizerContract):
    @pytest.fixture
    def subject(self, openai_server) -> Subject:
        def make(**overrides) -> OpenAISummarizer:
            fields = {"kind": "openai", "model": "gpt-test", "base_url": openai_server.url, "api_key": "sk-test",
                      "timeout_s": 5.0, "max_retries": 1, "backoff_base_s": 0.0, "backoff_max_s": 0.0, **overrides}
            return OpenAISummarizer(SummarizerSettings(**fields), sleep=lambda seconds: None)

        return Subject(make=make)

    @pytest.fixture(params=["timeout", "broken JSON", "wrong shape"])
    def failure(self, request, openai_server) -> Failure:
        return {
            "timeout": Failure("timeout", lambda: openai_server.script(hang(seconds=5)), SummarizerTimeoutError, True),
            "broken JSON": Failure("broken JSON", lambda: openai_server.script(model_says('{"facts": [{"key": "or')),
                                   SummarizerOutputError, False),
            "wrong shape": Failure("wrong shape", lambda: openai_server.script(model_says('{"facts": "none"}')),
                                   SummarizerOutputError, False),
        }[request.param]
