"""The chaos soak (issue 11): see test_chaos.py's docstring."""
