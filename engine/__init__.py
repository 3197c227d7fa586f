"""memfold core: events, errors, ports, settings, tokens, partitioner; the engine facade and CLI."""
