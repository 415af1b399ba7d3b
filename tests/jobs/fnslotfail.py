"""Imports in the config check's child, fails in a slot (forked from `tender-pool run`): a slot's
boot error that the config check could not see (an environment the slot alone has)."""

import sys

if sys.argv[1:2] == ["run"]:
    raise ImportError("only the slots lack the platform's native library")


def work(ctx):
    return {}
