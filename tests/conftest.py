"""Session-wide test plugins: real backends started once per run."""

pytest_plugins = [
    "fixtures.kafka_broker",
    "fixtures.openai_server",
    "fixtures.memfold_service",
]
