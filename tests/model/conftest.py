"""The model's checks run in the background (tests/model/spin.py ``Farm``): once collection ends,
the checks of the selected model tests are handed to the farm, and the model's tests are moved to
the end of the run, so that by the time they run their verdicts are mostly waiting for them."""

from __future__ import annotations

from pathlib import Path

from .spin import FARM

HERE = Path(__file__).resolve().parent


def _ours(item) -> bool:
    return Path(str(item.path)).resolve().parent == HERE


def pytest_collection_modifyitems(session, config, items):
    ours = [i for i in items if _ours(i)]
    items[:] = [i for i in items if not _ours(i)] + ours
    specs = []
    for item in ours:
        of = getattr(item.module, "SPEC_OF", {}).get(item.originalname)
        if of is not None:
            params = item.callspec.params if hasattr(item, "callspec") else {}
            specs.append(of(**params))
    FARM.start(specs)


def pytest_sessionfinish(session, exitstatus):
    FARM.stop()
