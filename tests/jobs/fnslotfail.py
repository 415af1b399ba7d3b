"""Imports in the config check's child, fails in a slot (forked from `tender-pool run`): a slot's
boot error that the config check could not see (an environment the slot alone has). With
$FN_SLOTFAIL_DIR set, the first slot to import it succeeds and the others fail."""

import os
import sys

if sys.argv[1:2] == ["run"]:
    where = os.environ.get("FN_SLOTFAIL_DIR")
    try:
        if not where:
            raise FileExistsError
        os.close(os.open(os.path.join(where, "first"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        raise ImportError("only the slots lack the platform's native library") from None


def work(ctx):
    return {}
