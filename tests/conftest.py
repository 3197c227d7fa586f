"""Session-wide test plugins: real backends started once per run."""

import pytest

pytest_plugins = [
    "fixtures.kafka_broker",
    "fixtures.openai_server",
    "fixtures.memfold_service",
    "support.client_engine",  # `engine`: a client-role engine on a real log, for tests that only append
]


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``make test`` runs two workers), keep every test of one shared backend on one worker.

    Each worker starts its own session fixtures; grouping the tests that use
    the Kafka broker (or the shared live service) means one broker (one
    service) for the run, as without xdist. ``--dist loadgroup`` honours it.
    """
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "kafka_bootstrap" in names:
            item.add_marker(pytest.mark.xdist_group("kafka"))
        elif "service" in names:
            item.add_marker(pytest.mark.xdist_group("service"))
