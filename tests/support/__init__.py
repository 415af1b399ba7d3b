"""What tests in several folders share, beyond tests/conftest.py's ``redis_server`` and harness:
``keyspace`` (every key name, from the store's ``Keys``), ``producer`` (a submitting thread for the
failover tests), real processes — a Sentinel-managed Redis set (``sentinel``), a Redis Cluster
(``cluster``) — and TCP proxies a test can pause or cut (``proxy``, ``blackhole``); ``requeue_ref``
is the reference the batched requeue is checked against."""
