"""Job history lives in the client library (``tender_pool.client.history``), which the CLI and the
platform's admin page share; these names stay importable from here for the daemon's side."""

from tender_pool.client.history import BATCH, MAX_PAGE_SIZE, HistoryFilter, HistoryPage, parse_time, query

__all__ = ["BATCH", "MAX_PAGE_SIZE", "HistoryFilter", "HistoryPage", "parse_time", "query"]
