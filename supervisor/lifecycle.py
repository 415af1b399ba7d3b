"""Live changes: SIGHUP reload, `scale`, `drain` — changing a running pool without dropping work.

Plain functions over the slot table (``slot_table.SlotTable``), called by the supervisor's main loop
only (control requests arrive from the status thread as queued commands; ``answer`` runs in that
thread and only reads). Which config keys apply how is ``control``'s decision; how a slot stops and
comes back is the table's. systemd hears about the outcome through the daemon (``notify``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

from tender_pool.supervisor import control
from tender_pool.store.config import Config, ConfigError, check_functions, has_functions, load
from tender_pool.supervisor.forking import SPAWN_LOCK
from tender_pool.supervisor.slot_table import SlotState, SlotTable
from tender_pool.client.status_protocol import STATUS_PROTOCOL


@dataclass
class Reloaded:
    ok: bool
    note: str  # the sticky part of STATUS=: a rejected reload, keys that wait for a restart


class PendingReload:
    """A reload waiting for its function handlers' import check (``config.check_functions``: a
    child process imports the platform's modules, which may take seconds). A thread waits for that
    child, so the main loop never blocks on it; the loop finishes the reload (``finish``) once
    ``done`` is set, and keeps the child's pid (``pid``) out of its orphan sweep meanwhile.
    ``wake`` is called (from the thread) when the verdict is in. The thread only waits on a pipe
    and a child: it holds no lock a slot forked meanwhile could need."""

    def __init__(self, new: Config, wake: Callable[[], None]):
        self.new = new
        self.error: ConfigError | None = None
        self.pid = 0
        self.done = threading.Event()
        self.wake = wake
        self.thread = threading.Thread(target=self._check, name="reload-check", daemon=True)

    def start(self) -> "PendingReload":
        self.thread.start()
        return self

    def _on_start(self, pid: int) -> None:
        self.pid = pid

    def _check(self) -> None:
        try:
            check_functions(self.new, on_start=self._on_start, spawn_lock=SPAWN_LOCK)
        except ConfigError as e:
            self.error = e
        except Exception as e:  # noqa: BLE001 - cannot even start the child (EAGAIN): reject, say why
            self.error = ConfigError("handlers", "(import check)", f"could not run: {e}")
        finally:
            self.done.set()
            self.wake()


def reload(cfg: Config, table: SlotTable, log, now: float,
           wake: Callable[[], None] = lambda: None) -> Reloaded | PendingReload:
    """SIGHUP: re-read the config the way the daemon found it at start. Invalid: keep running on
    the old one and say why. Valid: adopt it in place (``cfg`` is shared with the status builder),
    resize if the file's ``worker_count`` changed, and recycle the slots if their settings did or
    any function handler is configured (its module is imported again by the new slots). A config
    with function handlers is adopted only once they import (``PendingReload``, then ``finish``):
    one that no longer does rejects the reload like an invalid value."""
    source = None if cfg.source == "(defaults)" else cfg.source
    try:
        new = load(source)
    except ConfigError as e:
        return _rejected(cfg, e, log)
    if has_functions(new):
        log.info("reload_checking_functions", config=cfg.source)
        return PendingReload(new, wake).start()
    return _adopt(cfg, new, table, log, now)


def finish(cfg: Config, table: SlotTable, pending: PendingReload, log, now: float) -> Reloaded | None:
    """The main loop's half of a pending reload: None while its check runs, then the outcome."""
    if not pending.done.is_set():
        return None
    if pending.error is not None:
        return _rejected(cfg, pending.error, log)
    return _adopt(cfg, pending.new, table, log, now)


def _rejected(cfg: Config, e: ConfigError, log) -> Reloaded:
    log.error("reload_rejected", error=f"config: {e}", config=cfg.source)
    return Reloaded(False, f"reload rejected, still running the previous config: config: {e}")


def _adopt(cfg: Config, new: Config, table: SlotTable, log, now: float) -> Reloaded:
    change = control.classify(cfg, new)
    file_workers = new.pool.worker_count if "pool.worker_count" in change.live else None
    control.adopt(cfg, control.merge(cfg, new, change.restart))
    if file_workers is not None:  # the file changed: it wins over an earlier `scale`
        scale(table, file_workers, "reload", log)
    elif table.target != cfg.pool.worker_count:
        log.info("live_scale_kept", workers=table.target, config_says=cfg.pool.worker_count)
    # Function handlers' code may have changed on disk with the config unchanged: a reload is how
    # an operator asks for the new code, so the slots import it again (recycled after their job).
    reimport = [n for n, h in cfg.handlers.items() if h.function is not None]
    recycled = table.recycle(now) if change.slots or reimport else []
    log.info("reloaded", config=cfg.source, applied=change.live, slots_recycled_for=change.slots,
             reimported=reimport, recycled=recycled, restart_needed=change.restart)
    return Reloaded(True, f"restart needed for: {', '.join(change.restart)}" if change.restart else "")


def scale(table: SlotTable, n: int, why: str, log) -> None:
    kept, retiring = table.scale(n)
    log.info("scaled", workers=n, why=why, slots=kept, retiring=retiring)


def pause(table: SlotTable, log) -> None:
    """A `drain` request: every slot finishes its job and exits; nothing is respawned and nothing
    claims until `scale N`. The supervisor stays up (status, watchdog, a fast `systemctl stop`)."""
    table.pause()
    log.info("drain_requested", running=[s.busy.job_id for s in table.slots if s.busy])


def apply_control(table: SlotTable, cmd: control.Command, log) -> None:
    if cmd.op == "scale":
        if table.paused:
            table.resume()
            log.info("resumed", workers=cmd.workers)
        scale(table, cmd.workers, "scale", log)
    elif cmd.op == "drain":
        pause(table, log)


def answer(table: SlotTable, cmd: control.Command) -> control.ControlReply:
    """Status thread: the reply to a control request the main loop will apply."""
    if cmd.op == "scale":
        live = len(table.counted())
        msg = f"scaling from {live} to {cmd.workers} slot(s); surplus slots finish their current job first"
    else:
        busy = sum(1 for s in table.snapshot() if s.busy)
        msg = f"draining: {busy} running job(s) finish, nothing new is claimed"
    return control.ControlReply(STATUS_PROTOCOL, True, message=msg)


def status_text(table: SlotTable, queue_depth: int | None, note: str) -> str:
    """sd_notify's STATUS= line."""
    states = [s.state for s in table.counted()]
    parts = [f"{states.count(SlotState.BUSY)} busy, {states.count(SlotState.IDLE)} idle of {len(states)} slots"]
    parts.append(f"queue {queue_depth}" if queue_depth is not None else "queue ?")
    if SlotState.CRASH_LOOPING in states:
        parts.append(f"{states.count(SlotState.CRASH_LOOPING)} crash-looping")
    if table.draining:
        parts.append("stopping")
    elif table.paused:
        parts.append("drained" if not table.live() else "draining")
    if note:
        parts.append(note)
    return "; ".join(parts)
