"""The ground: events, errors, ids, positions, ports, settings, tokens, sealing, validation, shapes.

It imports nothing else of memfold; every other layer builds on it.
"""
