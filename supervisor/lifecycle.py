"""Live changes and systemd: SIGHUP reload, `scale`, `drain`, and sd_notify.

A mixin of ``daemon.Supervisor``, kept apart because it owns one concern — changing a running pool
without dropping work — while daemon.py owns forking, reaping and requeueing. Everything here runs
on the supervisor's main loop (control requests arrive from the status thread as queued commands),
so it may touch the slot table freely.
"""

from __future__ import annotations

import os
import signal

from . import control
from .config import ConfigError, load
from .types import STATUS_PROTOCOL, SlotState

STATUS_REFRESH_S = 10.0  # sd_notify STATUS= at least this often, and whenever its text changes


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


class LiveChanges:
    # --- live changes -----------------------------------------------------------------------------

    def reload(self) -> None:
        """SIGHUP: re-read the config the way the daemon found it at start. Invalid: keep running on
        the old one and say why (log, STATUS=). Valid: apply what applies live (``control``)."""
        self.notify.reloading()
        source = None if self.cfg.source == "(defaults)" else self.cfg.source
        try:
            new = load(source)
        except ConfigError as e:
            self.status_note = f"reload rejected, still running the previous config: config: {e}"
            self.log.error("reload_rejected", error=f"config: {e}", config=self.cfg.source)
            self.notify.ready(self.status_text())
            return
        change = control.classify(self.cfg, new)
        file_workers = new.pool.worker_count if "pool.worker_count" in change.live else None
        control.adopt(self.cfg, control.merge(self.cfg, new, change.restart))
        self.status_note = f"restart needed for: {', '.join(change.restart)}" if change.restart else ""
        if file_workers is not None:  # the file changed: it wins over an earlier `scale`
            self.set_workers(file_workers, "reload")
        elif self.target != self.cfg.pool.worker_count:
            self.log.info("live_scale_kept", workers=self.target, config_says=self.cfg.pool.worker_count)
        if change.slots and not self.paused:
            for s in self.slots:
                if s.pid and not s.retiring:  # IDLE/BUSY → STOPPING; forked again once its job is done
                    s.recycle, s.state = True, SlotState.STOPPING
                    _kill(s.pid, signal.SIGTERM)
        self.log.info("reloaded", config=self.cfg.source, applied=change.live, slots_recycled_for=change.slots,
                      restart_needed=change.restart)
        self.notify.ready(self.status_text())

    def set_workers(self, n: int, why: str) -> None:
        """Grow: new slots (or a retiring one taken back: it finishes, exits, is forked again).
        Shrink: retire the surplus, offline then idle slots first, busy ones last; a retiring slot
        gets SIGTERM, finishes its current job and exits; it is never killed to shrink the pool."""
        self.target = n
        keep = [s for s in self.slots if not s.retiring]
        if len(keep) < n:
            for s in self.slots:
                if s.retiring and len(keep) < n:
                    s.retiring, s.recycle = False, True
                    keep.append(s)
            used = {s.index for s in self.slots}
            i = 1
            while len(keep) < n:
                if i not in used:
                    s = self.new_slot(i)
                    self.slots.append(s)
                    keep.append(s)
                    used.add(i)
                i += 1
            self.slots.sort(key=lambda s: s.index)  # in place: the status builder holds this list
        elif len(keep) > n:
            rank = {SlotState.OFFLINE: 0, SlotState.CRASH_LOOPING: 0, SlotState.STARTING: 1, SlotState.IDLE: 1}
            for s in sorted(keep, key=lambda s: (rank.get(s.state, 2), -s.index))[: len(keep) - n]:
                s.retiring = True
                if s.pid:
                    s.state = SlotState.STOPPING  # → OFFLINE → removed, in on_slot_exit
                    _kill(s.pid, signal.SIGTERM)
                else:
                    self.slots.remove(s)
                    self.seqs[s.index] = s.seq
        self.log.info("scaled", workers=n, why=why, slots=[s.worker_id for s in self.slots if not s.retiring],
                      retiring=[s.worker_id for s in self.slots if s.retiring])

    def pause(self) -> None:
        """A `drain` request: every slot finishes its job and exits; nothing is respawned and nothing
        claims until `scale N`. The supervisor stays up (status, watchdog, a fast `systemctl stop`)."""
        self.paused = True
        for s in self.slots:
            if s.pid and s.state != SlotState.STOPPING:
                s.state = SlotState.STOPPING
                _kill(s.pid, signal.SIGTERM)
        self.log.info("drain_requested", running=[s.busy.job_id for s in self.slots if s.busy])

    def apply_control(self, cmd: control.Command) -> None:
        if cmd.op == "scale":
            if self.paused:
                self.paused = False
                self.log.info("resumed", workers=cmd.workers)
            self.set_workers(cmd.workers, "scale")
        elif cmd.op == "drain":
            self.pause()

    def _handle_request(self, req: control.Request):
        """Status thread: reads go to the status builder; control requests are checked, queued for
        the main loop (which owns the slot table) and answered at once."""
        assert self.builder is not None
        if req.control is None:
            return self.builder.handle(req)
        cmd = control.check(req)
        if isinstance(cmd, str):
            return control.ControlReply(STATUS_PROTOCOL, False, error=cmd)
        if self.draining:
            return control.ControlReply(STATUS_PROTOCOL, False, error="the daemon is stopping")
        live = sum(1 for s in self.slots if not s.retiring)
        self.controls.append(cmd)
        try:
            os.write(self.wake_fd, b"c")
        except OSError:
            pass  # pipe full: the loop is awake anyway, and wakes each second regardless
        if cmd.op == "scale":
            msg = f"scaling from {live} to {cmd.workers} slot(s); surplus slots finish their current job first"
        else:
            msg = f"draining: {sum(1 for s in self.slots if s.busy)} running job(s) finish, nothing new is claimed"
        return control.ControlReply(STATUS_PROTOCOL, True, message=msg)

    # --- systemd ------------------------------------------------------------------------------------

    def status_text(self) -> str:
        states = [s.state for s in self.slots if not s.retiring]
        parts = [f"{states.count(SlotState.BUSY)} busy, {states.count(SlotState.IDLE)} idle of {len(states)} slots"]
        parts.append(f"queue {self.queue_depth}" if self.queue_depth is not None else "queue ?")
        if SlotState.CRASH_LOOPING in states:
            parts.append(f"{states.count(SlotState.CRASH_LOOPING)} crash-looping")
        if self.draining:
            parts.append("stopping")
        elif self.paused:
            parts.append("drained" if not any(s.pid for s in self.slots) else "draining")
        if self.status_note:
            parts.append(self.status_note)
        return "; ".join(parts)

    def housekeeper_healthy(self, now: float) -> bool:
        """The housekeeper thread is alive and went round its loop within the watchdog window (a
        Redis outage does not count: its calls fail within redis.socket_timeout and it backs off;
        a call that hangs, a deadlock or a dead thread does)."""
        h = self.house
        return h is not None and h.is_alive() and now - h.last_loop < self.notify.watchdog_s

    def notify_step(self, now: float) -> None:
        """READY once every slot reported in (Redis answered before the first fork); STATUS= when it
        changes or every STATUS_REFRESH_S; WATCHDOG=1 while this loop and the housekeeper run."""
        if not self.notify.enabled:
            return
        text = self.status_text()
        if not self.ready and not self.draining and self.slots and all(
            s.state in (SlotState.IDLE, SlotState.BUSY) for s in self.slots
        ):
            self.ready = True
            self.notify.ready(text)
            self.status_sent, self.status_sent_at = text, now
            self.log.info("ready", status=text)
        elif text != self.status_sent or now - self.status_sent_at >= STATUS_REFRESH_S:
            self.notify.status(text)
            self.status_sent, self.status_sent_at = text, now
        wd = self.notify.watchdog_s
        if wd and now - self.last_ping >= wd / 3 and self.housekeeper_healthy(now):
            self.notify.watchdog()
            self.last_ping = now

