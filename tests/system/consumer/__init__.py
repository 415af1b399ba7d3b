"""The database consumer (examples/db_sync.py) against a real daemon, and under chaos."""
