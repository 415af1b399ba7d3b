"""Test helpers that start real processes beyond the single ``redis_server`` of tests/conftest.py:
a Sentinel-managed Redis set (``sentinel``) and a TCP proxy the test can pause, resume and cut
(``proxy``). Imported by the conftest of the directories that use them."""
