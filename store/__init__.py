"""The Redis schema every other package shares: key names (``keys``, the only speller), the records
and their codecs (``types``), the Lua texts and their loader (``scripts``, ``lua/``), the connection
(``connection``), the input digest, the handler-facing ``JobContext``, the config file and logging.

It imports nothing else of ours, so ``client``, ``slots`` and ``supervisor`` can all depend on it
without a cycle (``tests/test_layout.py`` holds the folder graph)."""
