"""Finding a function handler's callable: ``"module:qualname"`` → the object, and the config check.

Two users, one rule for what counts as importable:
- the slot's preload (``functions.FunctionKind.preload``), once per slot before its first claim;
- the config check (``config.check_functions``), which runs this module as a short-lived child
  process (``python -m tender_pool.slots.function_import``) so that a module that fails, hangs,
  starts threads or half-initialises never does so inside the supervisor. The child reads the
  supervisor's ``sys.path`` and the handlers on stdin and prints one JSON object: handler name →
  the problem (``None`` when both ``function`` and ``after_fork`` resolve to callables).

Stdlib only: the check child must import nothing but the platform's module.
"""

from __future__ import annotations

import importlib
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time: the fork server imports this module
    from typing import Any, Callable


class ImportProblem(Exception):
    """Why a ``module:qualname`` is not a usable callable; ``str()`` ends with the import error's
    last line, ready for the one-line ``config:`` message."""


def prepend_path(path: list[str]) -> None:
    """Put a handler's ``path`` entries first in ``sys.path`` (once each, in the order given)."""
    for p in reversed(path):
        if p in sys.path:
            sys.path.remove(p)
        sys.path.insert(0, p)


def resolve(spec: str) -> Callable[..., Any]:
    """Import ``module`` and walk ``qualname`` (dotted: ``Class.method`` works) to a callable."""
    module, sep, qualname = spec.partition(":")
    if not sep or not module or not qualname:
        raise ImportProblem('not "module:qualname"')
    try:
        obj: Any = importlib.import_module(module)
    except BaseException as e:  # noqa: BLE001 - SystemExit, a KeyboardInterrupt raised by the module: all refusals
        raise ImportProblem(f"cannot import {module}: {_last_line(e)}") from e
    for part in qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ImportProblem(f"module {module} has no attribute {qualname}") from None
        except BaseException as e:  # noqa: BLE001 - a module __getattr__ that raises
            raise ImportProblem(f"{module}:{qualname}: {_last_line(e)}") from e
    if not callable(obj):
        raise ImportProblem(f"{module}:{qualname} is not callable (a {type(obj).__name__})")
    return obj


def _last_line(e: BaseException) -> str:
    text = "".join(str(e).splitlines()[-1:]).strip()
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def problem(function: str, after_fork: str | None, path: list[str]) -> str | None:
    """What is wrong with one handler's ``function`` / ``after_fork``, or None."""
    prepend_path(path)
    for key, spec in (("function", function), ("after_fork", after_fork)):
        if spec is None:
            continue
        try:
            resolve(spec)
        except ImportProblem as e:
            return f"{key}: {spec}: {e}"
    return None


def main() -> int:
    """The config check's child: stdin ``{"sys_path": [...], "handlers": {name: {function,
    after_fork, path}}}``, stdout ``{name: problem or null}``. Our answer goes to a private copy of
    the stdout pipe; whatever the platform's module writes at import (``print``, or straight to
    file descriptor 1) goes to stderr."""
    import json

    req = json.load(sys.stdin)
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.path[:] = list(req["sys_path"])
    answers: dict[str, str | None] = {}
    for name, h in req["handlers"].items():
        answers[name] = problem(h["function"], h.get("after_fork"), h.get("path") or [])
    out.write(json.dumps(answers))
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
