"""Runs on real daemons: fairness, progress, counts and events, skip by input hash."""
