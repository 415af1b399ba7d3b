"""Tests of tender_pool.web: the admin app, its live events, a real browser."""
