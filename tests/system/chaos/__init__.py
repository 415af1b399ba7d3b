"""The chaos soak: see test_chaos.py's docstring."""
