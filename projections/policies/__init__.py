"""One pure policy module per seed."""
