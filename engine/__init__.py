"""The application: the MemoryEngine facade, its builders, the fold runner, the summary workers and replays."""
