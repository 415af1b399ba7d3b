/*
 * tender-pool's job protocol, for Spin (model/README.md explains the abstraction).
 *
 * Mirrors store/lua/*.lua as of the commit named in model/mirrors.json (their SHA-256 are recorded
 * there; tests/model/test_mirrors.py fails when a script changes: re-check the step named below, then
 * `python model/record.py`). Each Lua script is ONE atomic block here, named `<script>.lua` in a
 * comment; every other step names the Python function it mirrors.
 *
 *   lib/attempt.lua  START_JOB, SETTLE_JOB, TAKE_JOB, CLAIM_ENTRY, CLEAR_BUSY (the slot's hot path)
 *   lib/lock.lua     PROMOTE_WAITER, RELEASE_LOCK
 *   lib/terminal.lua ON_TERMINAL
 *   lib/state.lua    SETSTATE (set_state)
 *   lib/classes.lua  push_front, park_entry: the rdy, wt and dp counts (lists as multisets)
 *   lib/base.lua     TERMINAL
 *   take.lua         TAKE: take_job with the entry a BLMOVE gave      (Slot, label take)
 *   settle_take.lua  SETTLE_TAKE: settle_job, then take_job            (Slot, label settle)
 *   settle.lua       SETTLE: settle_job                                (Slot, label settle, aborting)
 *   enqueue.lua      ENQUEUE            (Producer)
 *   deadletter.lua   DEADLETTER         (Slot, label deadletter: take_job answered raw)
 *   requeue.lua      REQUEUE            (Intake.reconcile / NoLease, Supervisor death path, Reaper)
 *   cancel.lua       CANCEL             (Canceller)
 *   stamp.lua        the claim stamp: ghost `rjs` (Reaper, deadline rule)
 *   unstick.lua      UNSTICK            (Reaper, lost-promotion sweep)
 *   promote_due.lua  PROMOTE_DUE        (Reaper)
 *
 * World: 3 jobs (0 and 1 of user 0, 2 of user 1; job 0 interactive, the others bulk; job 2 runs
 * `--after` job 0; HIJ names the interactive job, U2 job 2's user), 2 slots (slot s on
 * host s, each host with its supervisor), 1 reaper (whichever host holds the lease), 1 producer,
 * 1 canceller, and Env (time, replication, failover). Budgets (-D...): CRASHES (all processes
 * together), ERRS (Redis calls that fail or lose their reply), LAPSES (a live host's heartbeat
 * lapsing past the fence), LATES (the reaper finding an entry far past its deadline), FREEZES (a
 * replica falling behind; each ends in catch-up or failover), CANCELS, RETRIES (business retries),
 * DUPS (a copy of a running job's entry appears in another worker's list); JOBS (how many of the
 * three jobs are submitted: a smaller world for the two-fault runs).
 *
 * Seeded faults (-D...; each a copy of the protocol with one defect, tests/model shows spin finds it):
 *   FAULT_REQUEUE_NO_OWNER_CHECK   requeue.lua without l.15 (GET host:<owner> == the judged holder)
 *   FAULT_REQUEUE_DUP_RUNNING      requeue.lua without owned_elsewhere (a duplicate entry of a running
 *                                  job owned by another list requeues it: a second attempt)
 *   FAULT_REQUEUE_NO_PROC_CHECK    requeue.lua as at 8f52d95: busy-state evidence for every job, the
 *                                  attempt's `proc` unread (blind to a worker's other incarnation)
 *   FAULT_RELEASE_BEFORE_RESULT    the slot frees the user's lock in one call, then settles in another
 *   FAULT_SETTLE_NO_FENCE          settle_job without its token check (a stale attempt settles)
 *   FAULT_NO_STAMP_RECHECK         requeue.lua without l.16 (the fix of 64a3038 undone)
 *   FAULT_NO_LEASE_CHECK           take_job without the PTTL check (the fix of 64a3038 undone)
 *   FAULT_NO_LPOS_CHECK            take_job without the LPOS check of a given entry (64a3038 undone)
 *   FAULT_TAKE_RETRY_NO_LPOS       take_job's LPOS check skipped on a retry (a9993b1 undone)
 *   FAULT_TAKE_RETRY_NO_LEASE      take_job's lease check skipped on a retry (a9993b1 undone)
 *   FAULT_SETTLE_TAKE_RETRY_REMOVES settle_take on a retry settles again even when its first call
 *                                  re-took the settled job (a9993b1 undone): fenced, LREM proc 0 id
 *   FAULT_TAKEOVER_DROPS_WAITER    start_job's takeover (an interactive job taking its user's lock
 *                                  reserved for a bulk job b) takes b out of ready but does not put it
 *                                  back in the wait list
 */

#ifndef CRASHES
#define CRASHES 1
#endif
#ifndef ERRS
#define ERRS 1
#endif
#ifndef LAPSES
#define LAPSES 1
#endif
#ifndef FREEZES
#define FREEZES 0
#endif
#ifndef CANCELS
#define CANCELS 1
#endif
#ifndef LATES
#define LATES 1
#endif
#ifndef RETRIES
#define RETRIES 1
#endif
#ifndef DUPS
#define DUPS 1        /* duplicate entries of a running job in another worker's list (see Env) */
#endif
#ifndef JOBS
#define JOBS 3        /* how many of the jobs 0, 1, 2 the producer submits (a smaller world) */
#endif

#define NJ 3          /* jobs */
#define NU 2          /* users */
#define NS 2          /* slots = hosts: slot s runs on host s */
#define NOJ 255

/* processing lists: slot s's incarnation k owns list s + NS*k (proc:<host>:<incarnation>:<slot>.<n>) */
#if CRASHES == 0
#define NL 2
#elif CRASHES == 1
#define NL 4
#else
#define NL 6
#endif
#define OWNER(L) ((L) % NS)
#define PL(L, j) pl[(L) * NJ + (j)]

/* job states (JobRecord.state) */
#define NONE      0   /* no job hash */
#define QUEUED    1
#define WAITING   2
#define RUNNING   3
#define COMPLETED 4
#define FAILED    5
#define CANCELLED 6
#define TERMINAL(x) ((x) >= COMPLETED)

#ifndef U2
#define U2 1          /* job 2's user (U2=0: a third job of user 0, e.g. interactive with HIJ=2) */
#endif
#define USER(j) ((j) == 2 -> U2 : 0)
#define DEP(j)  ((j) == 2 -> 0 : NOJ)
#ifndef HIJ
#define HIJ 0         /* the interactive job (priority 'interactive'); the others are bulk. NOJ: all bulk */
#endif
#define HI(j)   ((j) == HIJ)
#define RES 100       /* lock value RES + j is 'r:<j>'; 1..99 are attempt tokens; 0 is no lock */

#define MAXWAITS 2    /* pool.max_waits */
#define CRASHCAP 2    /* pool.crash_cap */
#define MAXTRIES 2    /* pool.max_tries */

/* script answers */
#define R_NONE 0
#define R_RUN 1
#define R_PARKED 2
#define R_ENDED 3
#define R_STALE 4
#define R_OK 5
#define R_FENCED 6
#define R_ALIVE 7
#define R_GONE 8
#define R_REQUEUED 9
#define R_FAILED 10
#define R_EMPTY 11
#define R_NOLEASE 12
#define R_RAW 13      /* take_job: no job hash (HGETALL empty) */

/* settle verdicts (queue.Verdict) */
#define V_COMPLETED 1
#define V_FAILED 2
#define V_CANCELLED 3
#define V_RETRY 4
#define V_REQUEUE 5

/* requeue.lua reasons */
#define RS_CRASH 1
#define RS_DEADLINE 2
#define RS_UNCLAIM 3

/* host lease: the host key host:<h>, as its PTTL and its supervisor's last heartbeat write see it */
#define FRESH 0       /* PTTL >= the take's min_lease; the last write younger than the fence interval */
#define STALE 1       /* below: no take starts a job; the fence and the slot's own poll stop attempts */
#define EXPIRED 2     /* the key expired: other hosts' reapers count the host as dead */

/* Redis, as two copies of the same keys: the primary (plain names) and the replica while it lags
 * (r_ names; zero otherwise: it has everything). Plain arrays rather than a typedef, so that
 * `spin -t -g` shows them at every step (tests/model/spin.py summarizes a counterexample from it). */
byte js[NJ];          /* job:<id> state */
byte jt[NJ];          /* job:<id> token ('' = 0) */
bit  jc[NJ];          /* job:<id> cancel */
byte jw[NJ];          /* job:<id> waits */
byte jx[NJ];          /* job:<id> crashes */
byte jr[NJ];          /* job:<id> tries */
byte rdy[NJ];         /* copies in ready:hi + ready:lo (+ backlog:<user>: see README, fairness) */
byte pl[NL * NJ];     /* copies in each processing list */
byte wt[NJ];          /* copies in wait:<user(j)> */
byte dp[NJ];          /* copies in deps:<dep(j)> */
bit  dl[NJ];          /* member of delayed */
byte lk[NU];          /* lock:<user> */
bit  wu[NU];          /* member of waitusers */
byte jk[NJ];          /* job:<id> worker: the slot that started its last attempt (read only while running) */
byte jp[NJ];          /* job:<id> proc: the list its running attempt started from + 1 (0 = none; cleared when
                         it leaves running: the Lua leaves it stale, read only while running) */
byte bj[NS];          /* busy:<worker of slot s>: the job its state names + 1 (0 = no key) ... */
byte bt[NS];          /* ... and that attempt's token (the Lua compares `attempt` with the job's `attempts`) */
byte r_js[NJ]; byte r_jt[NJ]; bit r_jc[NJ]; byte r_jw[NJ]; byte r_jx[NJ]; byte r_jr[NJ];
byte r_rdy[NJ]; byte r_pl[NL * NJ]; byte r_wt[NJ]; byte r_dp[NJ]; bit r_dl[NJ]; byte r_lk[NU]; bit r_wu[NU];
byte r_jk[NJ]; byte r_jp[NJ]; byte r_bj[NS]; byte r_bt[NS];
bit frozen;           /* the replica stopped taking writes at the moment R was copied */
byte lag[1 + NS];     /* a WAITed write of the producer (0) / slot s (1+s): 0 on the replica, 1 not yet, 2 lost */

byte lease[NS];
bit  hdead[NS];       /* the host's supervisor died: its slots die with it (PDEATHSIG, cgroup) */
bit  sdead[NS];       /* slot process dead, not yet respawned */
bit  tk[NS];          /* its job tree killed by the supervisor (on_slot_exit), respawn pending */
byte inc[NS];         /* incarnation: the slot's list is lst[s] = s + NS * inc[s] */
byte lst[NS];
bit  pend[NL];        /* list handed to the housekeeper (requeue_later), not yet requeued */

/* ghosts: what runs, for the properties (not in Redis) */
byte sj[NS];          /* the job a live slot has in hand (claim .. settle), NOJ none */
byte stok[NS];        /* its attempt token (take's suffix) */
byte ntok[NS];        /* the suffix settle_take starts the next attempt with (kept for its retries) */
bit  win[NS];         /* take answered run; its handler has not ended yet */
bit  cov[NS];         /* that attempt was started while the host's lease was FRESH (the margin covers it) */
bit  hrun[NS];        /* its handler process is running (possibly orphaned by a slot crash) */
byte hj[NS];          /* the job of that handler */
bit  fk[NS];          /* the host's fence stopped this attempt (SIGUSR1: the slot aborts) */
byte running[NJ];     /* handlers of job j running now */
byte rj = NOJ;        /* the entry the reaper judged far past its deadline (its claim stamp) ... */
bit  rjs;             /* ... and whether `started` <rj> changed since (requeue.lua ARGV[9] re-check) */

byte crashes, errs, lapses, freezes, cancels, lates, retries, dups;

/* scratch of the atomic blocks, written before read on every path: kept out of the state vector
 * (-DSHOWN keeps them in: pan's breadth-first search refuses hidden variables) */
#ifdef SHOWN
#define HIDDEN
#else
#define HIDDEN hidden
#endif
HIDDEN byte ci, x, u, rsv, nj, sk, adp, sres;
bit  pdone;

/* ------------------------------------------------------------------------------------------- */
/* lib/*.lua                                                                                    */

#define WAITLEN(u) ((USER(0) == (u) -> wt[0] : 0) + (USER(1) == (u) -> wt[1] : 0) + (USER(2) == (u) -> wt[2] : 0))

/* the claim stamp (`started` <id>) of the judged entry changed: HSET by a start, HDEL by an unclaim */
#define RESTAMP(e) if :: (e) == rj -> rjs = 1 :: else -> skip fi

/* lib/lock.lua promote_waiter: LPOP the head of wait:<user> (any waiter: the model keeps no order),
 * reserve the lock for it ('r:<id>') and push it to ready; with no waiter, DEL the lock. */
inline PROMOTE_WAITER(u, head) {
  head = NOJ;
  if
  :: (USER(0) == u && wt[0] > 0) -> head = 0
  :: (USER(1) == u && wt[1] > 0) -> head = 1
  :: (USER(2) == u && wt[2] > 0) -> head = 2
  :: else -> skip
  fi;
  if
  :: head != NOJ ->
     wt[head]--; lk[u] = RES + head; rdy[head]++;
     if :: WAITLEN(u) == 0 -> wu[u] = 0 :: else -> skip fi
  :: else -> lk[u] = 0; wu[u] = 0
  fi
}

/* lib/lock.lua release_lock (release_held, conc 'lock'): GETDEL, put back if not ours */
inline RELEASE_LOCK(u, t, head) {
  if
  :: (t != 0 && lk[u] == t) -> PROMOTE_WAITER(u, head)
  :: else -> skip
  fi
}

/* lib/terminal.lua on_terminal: wake the dependents (deps:<id> → ready) */
inline ON_TERMINAL(e) {
  for (ci : 0 .. NJ - 1) {
    if
    :: DEP(ci) == e -> rdy[ci] = rdy[ci] + dp[ci]; dp[ci] = 0
    :: else -> skip
    fi
  }
}

/* lib/attempt.lua clear_busy: the slot's busy state names this job: DEL it */
inline CLEAR_BUSY(w, e) {
  if :: bj[w] == (e) + 1 -> bj[w] = 0; bt[w] = 0 :: else -> skip fi
}

/* lib/state.lua set_state (the state field; counts, fairness, runs and events are not modelled):
 * a terminal state is never left (one terminal state per job) */
#define SETSTATE(e, st) assert(!TERMINAL(js[e])); js[e] = st; \
  if :: (st) != RUNNING -> jp[e] = 0 :: else -> skip fi

/* ------------------------------------------------------------------------------------------- */
/* enqueue.lua (idempotent on the id)                                                           */
inline ENQUEUE(e) {
  if
  :: js[e] == NONE -> js[e] = QUEUED; rdy[e]++
  :: else -> skip
  fi
}

/* lib/attempt.lua start_job: own retry, stale copy, cancel, max waits, dependencies, the user's lock or
 * park, token; the caller's atomic step. `adp`: the answer adopts an attempt an earlier call with
 * this suffix started */
inline UNCLAIM(L, e) {
  if :: PL(L, e) > 0 -> PL(L, e)-- :: else -> skip fi;   /* LREM proc 1 id */
  RESTAMP(e)                                             /* HDEL started id */
}
inline PASS_RESERVATION(u, rsv, head) {
  if :: rsv -> PROMOTE_WAITER(u, head) :: else -> skip fi
}
inline FINISH(L, e, st, u, rsv, head) {
  UNCLAIM(L, e); SETSTATE(e, st); jt[e] = 0; ON_TERMINAL(e); PASS_RESERVATION(u, rsv, head)
}
inline PARK_WAIT(L, e, u) {
  UNCLAIM(L, e); wt[e]++; SETSTATE(e, WAITING); jw[e]++
}
/* the lock reserved for another job ('r:<b>', b bulk) and e interactive: e takes it over */
#define TAKEOVER(u, e) (lk[u] >= RES && lk[u] != RES + (e) && HI(e) && !HI(lk[u] - RES))
inline START_JOB(L, e, t, res) {
  u = USER(e); rsv = (lk[u] == RES + e); res = R_NONE; adp = 0;
  /* our own retry after a lost reply: the first call did start it (suffix match) */
  if
  :: (js[e] == RUNNING && PL(L, e) > 0 && jt[e] == t) -> res = R_RUN; adp = 1
  :: else -> skip
  fi;
  /* a duplicate entry of a finished or running job: the other copy owns it */
  if
  :: (res == R_NONE && (TERMINAL(js[e]) || js[e] == RUNNING)) ->
     UNCLAIM(L, e); PASS_RESERVATION(u, rsv, x); res = R_STALE
  :: else -> skip
  fi;
  /* cancelled before it started; max waits */
  if
  :: (res == R_NONE && jc[e]) -> FINISH(L, e, CANCELLED, u, rsv, x); res = R_ENDED
  :: (res == R_NONE && !jc[e] && jw[e] >= MAXWAITS) -> FINISH(L, e, FAILED, u, rsv, x); res = R_ENDED
  :: else -> skip
  fi;
  /* dependencies: completed → on; gone or ended otherwise → failed; else park on deps:<dep> */
  if
  :: (res == R_NONE && DEP(e) != NOJ) ->
     if
     :: js[DEP(e)] == COMPLETED -> skip
     :: (js[DEP(e)] == NONE || (TERMINAL(js[DEP(e)]) && js[DEP(e)] != COMPLETED)) ->
        FINISH(L, e, FAILED, u, rsv, x); res = R_ENDED
     :: (js[DEP(e)] != NONE && !TERMINAL(js[DEP(e)])) ->
        PASS_RESERVATION(u, rsv, x);
        UNCLAIM(L, e); dp[e]++; SETSTATE(e, WAITING); jw[e]++; res = R_PARKED
     fi
  :: else -> skip
  fi;
  /* per_user = 1: SET lock token NX GET */
  if
  :: (res == R_NONE && lk[u] == 0 && WAITLEN(u) > 0) ->
     /* a lost promotion: queue behind the waiters (RPUSH, SADD) and promote the head (LPOP: an
        earlier waiter, so promoting first is the same) */
     PROMOTE_WAITER(u, x); PARK_WAIT(L, e, u); wu[u] = 1; res = R_PARKED
  :: (res == R_NONE && TAKEOVER(u, e)) ->
     /* an interactive job finds the lock reserved for a bulk job b ('r:<b>', HGET job:<b> priority):
        it takes the lock (the run step below SETs its token over the reservation); b, if still in
        ready (LREM ready:lo -1 b), goes back to the wait list (insert_before_bulk: the head of the
        bulk waiters; the model keeps no order) and the user to waitusers; b already claimed by a
        slot: its start finds the lock held and parks it */
     x = lk[u] - RES;
#ifndef FAULT_TAKEOVER_DROPS_WAITER
     if :: rdy[x] > 0 -> rdy[x]--; wt[x]++; wu[u] = 1 :: else -> skip fi;
#else
     if :: rdy[x] > 0 -> rdy[x]-- :: else -> skip fi;    /* out of ready, into no wait list */
#endif
     x = 0
  :: (res == R_NONE && lk[u] != 0 && !rsv && !TAKEOVER(u, e)) ->
     wu[u] = 1; PARK_WAIT(L, e, u); res = R_PARKED
  :: else -> skip
  fi;
  /* run: lock := token, state running, token, started := now */
  if
  :: res == R_NONE ->
     lk[u] = t; SETSTATE(e, RUNNING); jt[e] = t; jk[e] = OWNER(L); jp[e] = L + 1; RESTAMP(e);
     bj[OWNER(L)] = e + 1; bt[OWNER(L)] = t;            /* SET busy:<worker> {job_id, attempt, ...} */
     res = R_RUN
  :: else -> skip
  fi;
  rsv = 0; x = 0; u = 0
}

/* lib/attempt.lua claim_entry: LMOVE ready:hi, else ready:lo → our list (any queued entry: no order) */
inline CLAIM_ENTRY(L, e) {
  if
  :: rdy[0] > 0 -> e = 0
  :: rdy[1] > 0 -> e = 1
  :: rdy[2] > 0 -> e = 2
  :: else -> e = NOJ
  fi;
  if :: e != NOJ -> rdy[e]--; PL(L, e)++ :: else -> skip fi
}

/* lib/attempt.lua take_job. g: the entry a BLMOVE gave (NOJ: claim here); rt: a retry after a lost reply
 * (adopt the first entry our list holds other than sk, the job just settled); t: the suffix.
 * Answers res (R_EMPTY, R_NOLEASE, or start_job's) for job e. */
inline TAKE_JOB(tL, tg, trt, tsk, tt, te, tres) {
  te = tg; tres = R_NONE;
  if
  :: trt ->
     if
     :: (PL(tL, 0) > 0 && tsk != 0) -> te = 0
     :: (PL(tL, 1) > 0 && tsk != 1) -> te = 1
     :: (PL(tL, 2) > 0 && tsk != 2) -> te = 2
     :: else -> skip                                   /* nothing there: the given entry ('' claims) */
     fi
  :: else -> skip
  fi;
#ifndef FAULT_NO_LEASE_CHECK
  /* no start on a lapsing lease (PTTL host:<h> < min_lease), unless a retry adopts its first call's
     running attempt (HMGET state, token: running with our suffix; LPOS: still in our list) */
#ifndef FAULT_TAKE_RETRY_NO_LEASE
  if
  :: (lease[OWNER(tL)] != FRESH && !(trt && te != NOJ && js[te] == RUNNING && jt[te] == tt && PL(tL, te) > 0)) ->
     tres = R_NOLEASE
  :: else -> skip
  fi;
#else
  if :: (!trt && lease[OWNER(tL)] != FRESH) -> tres = R_NOLEASE :: else -> skip fi;
#endif
#endif
#ifndef FAULT_NO_LPOS_CHECK
  /* the entry (the BLMOVE's, or one a retry found) must still be in our list */
#ifndef FAULT_TAKE_RETRY_NO_LPOS
  if :: (tres == R_NONE && te != NOJ && PL(tL, te) == 0) -> tres = R_EMPTY :: else -> skip fi;
#else
  if :: (tres == R_NONE && te != NOJ && !trt && PL(tL, te) == 0) -> tres = R_EMPTY :: else -> skip fi;
#endif
#endif
  if
  :: (tres == R_NONE && te == NOJ) -> CLAIM_ENTRY(tL, te); if :: te == NOJ -> tres = R_EMPTY :: else -> skip fi
  :: else -> skip
  fi;
  /* HGETALL job:<e> empty → {'raw', e} (a failover lost the enqueue; or a producer's raw entry) */
  if :: (tres == R_NONE && js[te] == NONE) -> tres = R_RAW :: else -> skip fi;
  if :: tres == R_NONE -> START_JOB(tL, te, tt, tres) :: else -> skip fi
}

/* lib/attempt.lua settle_job: fenced by the token (then LREM proc 0 id: never leave a stale copy);
 * release the lock (promote the head waiter); the verdict */
inline SETTLE_JOB(L, e, t, v, res) {
  u = USER(e);
  if
#ifndef FAULT_SETTLE_NO_FENCE
  :: jt[e] != t -> PL(L, e) = 0; res = R_FENCED
  :: else ->
#else
  :: TERMINAL(js[e]) -> PL(L, e) = 0; res = R_FENCED      /* (set_state would refuse it anyway) */
  :: else ->
#endif
     if :: PL(L, e) > 0 -> PL(L, e)-- :: else -> skip fi;
     RESTAMP(e);
#ifndef FAULT_RELEASE_BEFORE_RESULT
     RELEASE_LOCK(u, t, x);
#endif
     if
     :: v == V_COMPLETED -> SETSTATE(e, COMPLETED); jt[e] = 0; ON_TERMINAL(e)
     :: v == V_FAILED    -> SETSTATE(e, FAILED); jt[e] = 0; ON_TERMINAL(e)
     :: v == V_CANCELLED -> SETSTATE(e, CANCELLED); jt[e] = 0; ON_TERMINAL(e)
     :: v == V_RETRY     -> jr[e]++; SETSTATE(e, QUEUED); jt[e] = 0; dl[e] = 1
     :: v == V_REQUEUE   -> SETSTATE(e, QUEUED); jt[e] = 0; rdy[e]++
     fi;
     res = R_OK
  fi;
  x = 0; u = 0
}

/* take.lua: take_job with the entry the slot's BLMOVE gave (g), no skip */
inline TAKE(L, g, rt, t, e, res) {
  TAKE_JOB(L, g, rt, NOJ, t, e, res)
}

/* settle.lua: settle_job alone (not keep_busy: clear_busy first, fenced or not) */
inline SETTLE(L, e, t, v, res) {
  CLEAR_BUSY(OWNER(L), e);
  SETTLE_JOB(L, e, t, v, res)
}

/* settle_take.lua: settle_job (token qt, verdict qv; its answer qres), then take_job from what is
 * queued (no given entry; skip the settled id; suffix qnt): the next job qn and its answer qnres */
inline SETTLE_TAKE(qL, qe, qt, qv, qrt, qnt, qn, qres, qnres) {
#ifndef FAULT_SETTLE_TAKE_RETRY_REMOVES
  /* a retry whose first call landed and re-took this very job (HGET token: our next suffix) skips
     the settle (it landed: 'ok', promoted '') and the take adopts that attempt (no skip). The Lua
     checks the token only; a token is set only while the job runs (start_job), as here. */
  if
  :: (qrt && jt[qe] == qnt) -> qres = R_OK; sk = NOJ
  :: else -> SETTLE_JOB(qL, qe, qt, qv, qres); sk = qe
  fi;
  TAKE_JOB(qL, NOJ, qrt, sk, qnt, qn, qnres); sk = 0;
#else
  SETTLE_JOB(qL, qe, qt, qv, qres);
  TAKE_JOB(qL, NOJ, qrt, qe, qnt, qn, qnres);
#endif
  /* keep_busy: a started job's state replaced it; otherwise clear it while it names the settled job */
  if :: qnres != R_RUN -> CLEAR_BUSY(OWNER(qL), qe) :: else -> skip fi
}

/* requeue.lua: re-check the owner is dead (check: l.15) and, for a deadline, that the claim stamp
 * is still the judged one (stp: l.16), the entry is still there; LREM it; running and owned
 * elsewhere (owned_elsewhere: its `proc` is another list that still holds the entry, and a
 * processing list of this queue, lib/keys.lua proc_parts: every jp of the model is; a job with no
 * `proc`, started before it existed: its `worker` is not the list's, slot OWNER(L), and that
 * worker's busy state names this job at its current attempt) → only this duplicate entry goes
 * ('gone': no HDEL started, job untouched); else HDEL started; running → release its lock, count
 * the crash (crash cap → failed), queued; RPUSH ready */
inline REQUEUE(L, e, reason, check, stp, res) {
  u = USER(e); res = R_NONE;
#ifndef FAULT_REQUEUE_NO_OWNER_CHECK
  if :: (check && lease[OWNER(L)] != EXPIRED) -> res = R_ALIVE :: else -> skip fi;
#endif
#ifndef FAULT_NO_STAMP_RECHECK
  if :: (res == R_NONE && stp && rjs) -> res = R_ALIVE :: else -> skip fi;
#endif
  if
  :: res == R_ALIVE -> skip
  :: (res == R_NONE && PL(L, e) == 0) -> res = R_GONE
  :: (res == R_NONE && PL(L, e) > 0) ->
     PL(L, e)--;
     if
#ifndef FAULT_REQUEUE_DUP_RUNNING
#ifndef FAULT_REQUEUE_NO_PROC_CHECK
     :: (js[e] == RUNNING && jp[e] != 0 && jp[e] != L + 1 && PL(jp[e] - 1, e) > 0) ->
        res = R_GONE                                   /* the attempt's list holds it: ours was a duplicate */
     /* no `proc` (a job started before it existed; none in the model: every start records it) */
     :: (js[e] == RUNNING && jp[e] == 0 && jk[e] != OWNER(L) && bj[jk[e]] == e + 1 && bt[jk[e]] == jt[e]) ->
        res = R_GONE
#else
     :: (js[e] == RUNNING && jk[e] != OWNER(L) && bj[jk[e]] == e + 1 && bt[jk[e]] == jt[e]) ->
        res = R_GONE                                   /* 8f52d95: live elsewhere by the busy evidence */
#endif
#endif
     :: else -> RESTAMP(e)                             /* HDEL started id */
     fi;
     if
     :: res == R_GONE -> skip
     :: (res != R_GONE && TERMINAL(js[e])) -> res = R_GONE
     :: (res != R_GONE && !TERMINAL(js[e])) ->
        res = R_REQUEUED;
        if
        :: js[e] == RUNNING ->
           RELEASE_LOCK(u, jt[e], x);
           if
           :: reason != RS_UNCLAIM ->
              jx[e]++;
              if
              :: jx[e] >= CRASHCAP -> SETSTATE(e, FAILED); jt[e] = 0; ON_TERMINAL(e); res = R_FAILED
              :: else -> skip
              fi
           :: else -> skip
           fi;
           if :: res != R_FAILED -> SETSTATE(e, QUEUED); jt[e] = 0 :: else -> skip fi
        :: else -> skip
        fi;
        if :: res != R_FAILED -> rdy[e]++ :: else -> skip fi
     fi
  fi;
  x = 0; u = 0
}

/* deadletter.lua: the entry, if still in our list, leaves it (to `dead`); a job hash that exists by
 * now and is not terminal becomes 'dead' (modelled as failed) */
inline DEADLETTER(L, e) {
  if
  :: PL(L, e) == 0 -> skip
  :: PL(L, e) > 0 ->
     PL(L, e)--;
     if
     :: (js[e] != NONE && !TERMINAL(js[e])) -> SETSTATE(e, FAILED); jt[e] = 0; ON_TERMINAL(e)
     :: else -> skip
     fi
  fi
}

/* cancel.lua: queued/parked/delayed → taken out and cancelled; running or in a slot's hands → flag */
inline CANCEL(e) {
  u = USER(e);
  if
  :: js[e] == NONE -> skip
  :: TERMINAL(js[e]) -> skip
  :: (js[e] != NONE && !TERMINAL(js[e])) ->
     jc[e] = 1;
     if
     :: js[e] == RUNNING -> skip                                  /* signalled */
     :: else ->
        x = rdy[e] + wt[e] + dl[e] + dp[e];
        rdy[e] = 0; wt[e] = 0; dl[e] = 0; dp[e] = 0;
        if
        :: x == 0 -> skip                                           /* signalled */
        :: else ->
           SETSTATE(e, CANCELLED); jt[e] = 0; ON_TERMINAL(e);
           if :: WAITLEN(u) == 0 -> wu[u] = 0 :: else -> skip fi;
           if :: lk[u] == RES + e -> PROMOTE_WAITER(u, x) :: else -> skip fi
        fi
     fi
  fi;
  x = 0; u = 0
}

/* unstick.lua: nobody holds or reserved the lock, but waiters: promote the head */
inline UNSTICK(u) {
  if
  :: lk[u] != 0 -> skip
  :: (lk[u] == 0 && WAITLEN(u) == 0) -> wu[u] = 0
  :: (lk[u] == 0 && WAITLEN(u) > 0) -> PROMOTE_WAITER(u, x)
  fi;
  x = 0
}

/* promote_due.lua: due retries → ready (abstract time: every backoff may have passed) */
inline PROMOTE_DUE() {
  for (ci : 0 .. NJ - 1) {
    if :: dl[ci] -> dl[ci] = 0; rdy[ci]++ :: else -> skip fi
  }
}

/* stamp.lua only writes claim times,
 * which the model replaces by abstract time (the Reaper's judgement and the ghost rjs). */

/* a WAITed write: on the replica at once unless the replica lags */
#define WROTE(p) lag[p] = frozen

/* the smallest token nobody holds (canonical, so states that differ only in token names merge) */
inline NEWTOK(t) {
  t = 1;
  do
  :: (t == jt[0] || t == jt[1] || t == jt[2] || t == lk[0] || t == lk[1] ||
      t == r_jt[0] || t == r_jt[1] || t == r_jt[2] || t == r_lk[0] || t == r_lk[1] ||
      t == stok[0] || t == stok[1] || t == ntok[0] || t == ntok[1] ||
      t == bt[0] || t == bt[1] || t == r_bt[0] || t == r_bt[1]) -> t++
  :: else -> break
  od
}

#define LISTED(j) (rdy[j] > 0 || wt[j] > 0 || dp[j] > 0 || dl[j] || INPROC(j))
#if NL == 2
#define INPROC(j) (PL(0, j) + PL(1, j) > 0)
#elif NL == 4
#define INPROC(j) (PL(0, j) + PL(1, j) + PL(2, j) + PL(3, j) > 0)
#else
#define INPROC(j) (PL(0, j) + PL(1, j) + PL(2, j) + PL(3, j) + PL(4, j) + PL(5, j) > 0)
#endif
#define INPROC_L(L) (PL(L, 0) + PL(L, 1) + PL(L, 2) > 0)
/* an attempt of job e is between take's answer and its handler's end */
#define ACTIVE(e) ((win[0] && sj[0] == e) || (hrun[0] && hj[0] == e) || (win[1] && sj[1] == e) || (hrun[1] && hj[1] == e))
#if NL == 2
#define ANYPEND (pend[0] || pend[1])
#elif NL == 4
#define ANYPEND (pend[0] || pend[1] || pend[2] || pend[3])
#else
#define ANYPEND (pend[0] || pend[1] || pend[2] || pend[3] || pend[4] || pend[5])
#endif
/* the reaper's choices: list l's owner is dead (host key gone) / entry j of l, owner alive, past deadline */
#define DEADL(l) :: (jd == NOJ && rj == NOJ && l < NL && lease[OWNER(l)] == EXPIRED && INPROC_L(l)) -> jd = l
#define LATE(l, j) :: (lates < LATES && jd == NOJ && rj == NOJ && l < NL && lease[OWNER(l)] != EXPIRED && PL(l, j) > 0 && !ACTIVE(j)) -> jl = l; rj = j; rjs = 0; lates++
#define LATEL(l) LATE(l, 0) LATE(l, 1) LATE(l, 2)
/* no job lost: a job that exists is terminal or in some list or zset (ready, a processing list,
 * wait, deps, delayed); and a running job has an entry in a processing list (the only place its
 * recovery looks: a slot death, a dead host, a deadline) */
#define KEPT(j) (js[j] == NONE || TERMINAL(js[j]) || LISTED(j))
#define RUNLISTED(j) (js[j] != RUNNING || INPROC(j))
/* no lock stranded: a token lock belongs to the running attempt of one of the user's jobs; a
 * reservation names a job that can still start, or has an entry whose start passes it on; and a
 * running job holds its user's lock (per_user = 1) */
#define TOKOWNED(u, j) (USER(j) == u && js[j] == RUNNING && jt[j] == lk[u])
#define LOCKOK(u) (lk[u] == 0 || (lk[u] >= RES && (!TERMINAL(js[lk[u] - RES]) || \
                     rdy[lk[u] - RES] > 0 || INPROC(lk[u] - RES))) || \
                   (lk[u] < RES && (TOKOWNED(u, 0) || TOKOWNED(u, 1) || TOKOWNED(u, 2))))
#define LOCKHELD(j) (js[j] != RUNNING || (jt[j] != 0 && lk[USER(j)] == jt[j]))
#define INVARIANT (KEPT(0) && KEPT(1) && KEPT(2) && RUNLISTED(0) && RUNLISTED(1) && RUNLISTED(2) && \
                   LOCKOK(0) && LOCKOK(1) && LOCKHELD(0) && LOCKHELD(1) && LOCKHELD(2))
/* handlers of user u's jobs running now (per_user = 1: at most one) */
#define URUN(u) ((USER(0) == (u) -> running[0] : 0) + (USER(1) == (u) -> running[1] : 0) + (USER(2) == (u) -> running[2] : 0))

/* ------------------------------------------------------------------------------------------- */
/* processes                                                                                    */

/* a crash before the next step: local state lost, Redis effects stay (hdead: the supervisor died,
 * PDEATHSIG ends the slot at its next step) */
#define SLOT_CRASH \
  :: hdead[s] -> goto dead \
  :: atomic { (!hdead[s] && crashes < CRASHES) -> crashes++ }; goto dead

/* a Redis call that fails without running */
#define CALL_FAILS (!hdead[s] && errs < ERRS) -> errs++

/* what the slot knows after a take's answer: the job in hand, whether its attempt is live, and
 * whether that attempt was started while the lease was fresh (an adopted one keeps its own) */
#define TOOK(s, e, res) \
  if \
  :: res == R_RUN -> sj[s] = e; win[s] = 1; if :: !adp -> cov[s] = (lease[s] == FRESH) :: else -> skip fi \
  :: res == R_NOLEASE -> sj[s] = e; win[s] = 0; cov[s] = 0 \
  :: else -> sj[s] = NOJ; win[s] = 0; cov[s] = 0 \
  fi

/* between jobs: nothing in hand (a local step: no crash point of its own) */
#define NEXT \
  sj[s] = NOJ; stok[s] = 0; ntok[s] = 0; win[s] = 0; cov[s] = 0; fk[s] = 0; \
  e = NOJ; g = NOJ; v = 0; res = 0; rty = 0; tn = 0; rec = due; goto endloop

/* Intake.read: run it; NoLease: put the BLMOVE's entry back, claim nothing until renewed; a raw
 * entry: dead-letter it; else (parked, ended, stale, empty: report_not_run) the next claim */
#define TAKEN \
  if \
  :: res == R_RUN -> rty = 0; g = NOJ; res = 0; goto launch \
  :: (res == R_NOLEASE && e != NOJ) -> lap = 1; goto unclaim \
  :: (res == R_NOLEASE && e == NOJ) -> lap = 1; NEXT \
  :: res == R_RAW -> goto deadletter \
  :: (res != R_RUN && res != R_NOLEASE && res != R_RAW) -> NEXT \
  fi

/* settle_take answered: the job it started (sj[s], with the next suffix) is the slot's now */
#define SETTOOK e = sj[s]; stok[s] = ntok[s]; ntok[s] = 0; TAKEN

proctype Slot(byte s) {                    /* slots/slot.py: Slot.main, Slot.step */
  byte L, e, g, v, res;                    /* list; job in hand; the BLMOVE's entry; verdict; answer */
  bit due, rec, lap, rty, tn;              /* reconcile_due; reconcile now; lease_lapsed; retry; take_next */
boot:                                      /* forked with its list registered (register_list) */
  atomic { L = lst[s]; due = 1; rec = 1; lap = 0; e = NOJ; g = NOJ; v = 0; res = 0; rty = 0; tn = 0;
    if                                     /* BusyTracker.clear_stale: DEL busy:<worker> (errors swallowed) */
    :: bj[s] = 0; bt[s] = 0
    :: errs < ERRS -> errs++
    fi }
endloop:                                   /* Slot.step: reconcile, claim */
  if
  SLOT_CRASH
  /* Intake.reconcile: our list must be empty between jobs; requeue.lua 'unclaim' each entry */
  :: atomic { rec && CALL_FAILS; rec = 0 }                      /* reconcile_failed: claim anyway */
  :: atomic { (rec && !hdead[s]) ->
       if
       :: PL(L, 0) > 0 -> e = 0
       :: PL(L, 1) > 0 -> e = 1
       :: PL(L, 2) > 0 -> e = 2
       :: else -> due = 0; rec = 0
       fi;
       if :: e != NOJ -> REQUEUE(L, e, RS_UNCLAIM, 0, 0, res); e = NOJ; res = 0 :: else -> skip fi }
  /* lease_renewed (after a NoLease: PTTL until renewed), then Queue.claim: LMOVE ready:hi /
     BLMOVE ready:lo → our list (blocks while ready is empty) */
  :: atomic { !rec && CALL_FAILS; due = 1; rec = 1 }
  :: atomic { (!rec && !hdead[s] && (!lap || lease[s] == FRESH) && (rdy[0] > 0 || rdy[1] > 0 || rdy[2] > 0)) ->
       lap = 0;
       if
       :: rdy[0] > 0 -> g = 0
       :: rdy[1] > 0 -> g = 1
       :: rdy[2] > 0 -> g = 2
       fi;
       rdy[g]--; PL(L, g)++;
       if
       :: sj[s] = g; goto take
       :: errs < ERRS -> errs++; g = NOJ; due = 1; rec = 1          /* moved, reply lost */
       fi }
  fi;
  goto endloop;

take:                                      /* Intake.take → Queue.take → take.lua (+ WAIT) */
  if
  SLOT_CRASH
  :: atomic { CALL_FAILS; due = 1; rty = 1;
       if :: goto take :: NEXT fi }                                /* 20 failures: raise, reconcile */
  :: atomic { !hdead[s] ->
       if :: stok[s] == 0 -> NEWTOK(x); stok[s] = x; x = 0 :: else -> skip fi;  /* kept for retries */
       TAKE(L, g, rty, stok[s], e, res); WROTE(1 + s);
       TOOK(s, e, res);
       if
       :: lag[1 + s] == 0 -> TAKEN                                 /* acknowledged */
       :: errs < ERRS -> errs++; due = 1; rty = 1; goto take       /* reply lost: same suffix */
       :: lag[1 + s] != 0 -> skip                                  /* WAIT: the replica lags */
       fi }
     if
     SLOT_CRASH
     :: atomic { lag[1 + s] == 0 -> TAKEN }
     :: atomic { lag[1 + s] != 0 -> due = 1; rty = 1; goto take }  /* NotReplicated: retry */
     fi
  fi;
unclaim:                                   /* NoLease with the BLMOVE's entry: requeue.lua 'unclaim' */
  if
  SLOT_CRASH
  :: atomic { CALL_FAILS; due = 1; NEXT }                        /* reconcile puts it back */
  :: atomic { !hdead[s] -> REQUEUE(L, e, RS_UNCLAIM, 0, 0, res); NEXT }
  fi;

deadletter:                                /* Intake.load: decode_submit refuses an id → deadletter.lua */
  if
  SLOT_CRASH
  :: atomic { CALL_FAILS; due = 1; NEXT }
  :: atomic { !hdead[s] -> DEADLETTER(L, e); NEXT }
  fi;

launch:                                    /* Slot.work → Attempt.run → runner.spawn (no lease gate) */
  if
  SLOT_CRASH
  :: atomic { !hdead[s] ->
       assert(running[e] == 0);            /* property: never two attempts of one job at once */
       assert(URUN(USER(e)) == 0);         /* property: never two jobs of one per_user = 1 user at once */
       running[e]++; hrun[s] = 1; hj[s] = e }
  fi;

handler:                                   /* runner.run until the handler ends; kinds.conclude; Settle.verdict */
  if
  :: hdead[s] -> goto dead                 /* PDEATHSIG: the handler was killed with the host */
  :: atomic { (!hdead[s] && crashes < CRASHES) -> crashes++; goto dead }   /* handler orphaned */
  /* the fence stopped it (SIGUSR1: abort; the settle takes nothing) */
  :: atomic { !hdead[s] && fk[s] -> v = V_REQUEUE; win[s] = 0; cov[s] = 0; tn = 0 }
  /* Attempt._tick: our own poll sees the lease lapsing (PTTL < kill + poll): stopped, 'fenced' */
  :: atomic { !hdead[s] && !fk[s] && lease[s] != FRESH ->
       v = V_REQUEUE; hrun[s] = 0; running[e]--; win[s] = 0; cov[s] = 0; tn = 1 }
  :: atomic { !hdead[s] && !fk[s] ->
       if
       :: v = V_COMPLETED
       :: e == 0 -> v = V_FAILED                                       /* final, or a timeout */
       :: (retries < RETRIES && jr[e] + 1 < MAXTRIES) -> retries++; v = V_RETRY   /* tries left */
       :: jc[e] -> v = V_CANCELLED                                   /* poll_attempt: cancel */
       :: jt[e] != stok[s] -> v = V_REQUEUE                          /* poll_attempt: fenced */
       fi;
       hrun[s] = 0; running[e]--; win[s] = 0; cov[s] = 0; tn = 1 }
  fi;

settle:                                    /* Settle.settle: settle_take.lua (+ WAIT), settle.lua when aborting */
#ifdef FAULT_RELEASE_BEFORE_RESULT
  /* seeded fault: the user's lock is freed by a call of its own before the result is written */
  if
  SLOT_CRASH
  :: atomic { !hdead[s] -> if :: jt[e] == stok[s] -> RELEASE_LOCK(USER(e), stok[s], x); x = 0 :: else -> skip fi }
  fi;
#endif
  if
  SLOT_CRASH
  :: atomic { CALL_FAILS; due = 1; rty = 1; goto settle }
  :: atomic { !hdead[s] && !tn -> SETTLE(L, e, stok[s], v, res); WROTE(1 + s); res = 0;
       if
       :: lag[1 + s] == 0 -> NEXT                                  /* acknowledged: ok or fenced */
       :: errs < ERRS -> errs++; due = 1; rty = 1; goto settle     /* reply lost: retry */
       :: lag[1 + s] != 0 -> skip
       fi }
     if
     SLOT_CRASH
     :: atomic { lag[1 + s] == 0 -> NEXT }
     :: atomic { lag[1 + s] != 0 -> due = 1; rty = 1; goto settle }  /* NotReplicated: retry */
     fi
  :: atomic { !hdead[s] && tn ->
       if :: ntok[s] == 0 -> NEWTOK(x); ntok[s] = x; x = 0 :: else -> skip fi;
       SETTLE_TAKE(L, e, stok[s], v, rty, ntok[s], nj, sres, res); sres = 0; WROTE(1 + s);
       TOOK(s, nj, res); nj = 0;                                   /* the taken job: sj[s] */
       if
       :: lag[1 + s] == 0 -> SETTOOK                               /* acknowledged: run what it took */
       :: errs < ERRS -> errs++; due = 1; rty = 1; goto settle     /* reply lost: retry, same suffixes */
       :: lag[1 + s] != 0 -> skip
       fi }
     if
     SLOT_CRASH
     :: atomic { lag[1 + s] == 0 -> SETTOOK }
     :: atomic { lag[1 + s] != 0 -> due = 1; rty = 1; goto settle }  /* NotReplicated: retry */
     fi
  fi;

dead:                                      /* the process is gone; a launched handler runs on */
  atomic {
    sdead[s] = 1; sj[s] = NOJ; stok[s] = 0; ntok[s] = 0; win[s] = 0; fk[s] = 0; lag[1 + s] = 0;
    if :: !hrun[s] -> cov[s] = 0 :: else -> skip fi;
    e = NOJ; g = NOJ; v = 0; res = 0; due = 0; rec = 0; lap = 0; rty = 0; tn = 0; L = 0
  }
enddead:
  sdead[s] == 0;                           /* respawned by its supervisor */
  goto boot
}

/* supervisor/daemon.py (on_slot_exit, the fence) + supervisor/housekeeper.py Housekeeper (heartbeat,
 * requeue_own) of host h, whose slot is slot h */
proctype Supervisor(byte h) {
  byte L, e, res;
end:
  do
  /* on_slot_exit: kill the dead slot's job tree, hand its list to the housekeeper */
  :: atomic { !hdead[h] && sdead[h] && !tk[h] ->
       if :: hrun[h] -> hrun[h] = 0; running[hj[h]]--; cov[h] = 0 :: else -> skip fi;
       tk[h] = 1; pend[lst[h]] = 1 }
  /* the table's verdict: respawn with a new incarnation (a new processing list) */
  :: atomic { !hdead[h] && tk[h] && inc[h] < CRASHES ->
       inc[h]++; lst[h] = h + NS * inc[h]; tk[h] = 0; sdead[h] = 0 }
  /* Housekeeper.requeue_own → Queue.requeue_list: requeue.lua 'crash' per entry, owner '' */
  :: atomic { (!hdead[h] && ANYPEND) ->
       L = NOJ;
       for (ci : 0 .. NL - 1) { if :: (pend[ci] && L == NOJ) -> L = ci :: else -> skip fi };
       e = NOJ;
       if
       :: PL(L, 0) > 0 -> e = 0
       :: PL(L, 1) > 0 -> e = 1
       :: PL(L, 2) > 0 -> e = 2
       :: else -> pend[L] = 0                                      /* list done */
       fi;
       if
       :: e != NOJ -> REQUEUE(L, e, RS_CRASH, 0, 0, res)
       :: else -> skip
       fi;
       L = 0; e = 0; res = 0 }
  /* Housekeeper.heartbeat: SET host:<h> (the write can fail: then this step just does not happen) */
  :: atomic { !hdead[h] && lease[h] != FRESH -> lease[h] = FRESH }
  /* daemon.check_fence: the last heartbeat write is older than the fence interval: a busy slot
     (its Busy report came: the handler runs) is told to abort (SIGUSR1) and the attempt's group
     is killed (TERM, KILL after kill_grace). Once per lapse in the code; here whenever enabled,
     which only adds behaviours. */
  :: atomic { !hdead[h] && lease[h] == STALE && win[h] && hrun[h] && !fk[h] ->
       fk[h] = 1; hrun[h] = 0; running[hj[h]]-- }
  /* the supervisor dies: the host's processes die with it (PDEATHSIG; the unit's cgroup) */
  :: atomic { !hdead[h] && crashes < CRASHES ->
       crashes++; hdead[h] = 1;
       if :: hrun[h] -> hrun[h] = 0; running[hj[h]]-- :: else -> skip fi;
       win[h] = 0; cov[h] = 0 }
     break
  od
}

/* supervisor/housekeeper.py Housekeeper.reap on whichever host holds the reaper lease */
active proctype Reaper() {
  byte e, jd, jl, res;
  jd = NOJ; jl = NOJ;
end:
  do
  :: atomic { (dl[0] || dl[1] || dl[2]) -> PROMOTE_DUE() }     /* promote_due.lua */
  /* sweep: unstick.lua for each member of waitusers (only when it changes something: with the
     lock held it answers '' and changes nothing, and Spin's weak fairness is per process) */
  :: atomic { (wu[0] && lk[0] == 0) -> UNSTICK(0) }
  :: atomic { (wu[1] && lk[1] == 0) -> UNSTICK(1) }
  /* check_list: the owner's host key is gone → requeue_list(..., 'crash', owner_incarnation) */
  :: atomic {
       if DEADL(0) DEADL(1) DEADL(2) DEADL(3) DEADL(4) DEADL(5) fi }
  :: atomic { jd != NOJ ->
       e = NOJ;
       if
       :: PL(jd, 0) > 0 -> e = 0
       :: PL(jd, 1) > 0 -> e = 1
       :: PL(jd, 2) > 0 -> e = 2
       :: else -> jd = NOJ                                           /* list done */
       fi;
       if
       :: e != NOJ -> REQUEUE(jd, e, RS_CRASH, 1, 0, res);
          if :: res == R_ALIVE -> jd = NOJ :: else -> skip fi     /* owner back: stop */
       :: else -> skip
       fi;
       e = 0; res = 0 }
  /* check_list, owner alive: stamp.lua, then an entry far past its deadline → requeue 'deadline'
     with the stamp it judged (ARGV[9]). Abstract time: an entry is far past its deadline once no
     attempt of its job is between take's answer and its handler's end (the runner kills a
     handler at its deadline); `rjs` records whether the stamp changed since. */
  :: atomic {
       if LATEL(0) LATEL(1) LATEL(2) LATEL(3) LATEL(4) LATEL(5) fi }
  :: atomic { rj != NOJ -> REQUEUE(jl, rj, RS_DEADLINE, 0, 1, res); jl = NOJ; rj = NOJ; rjs = 0; res = 0 }
  /* the reaper's host dies: another host's reaper takes the lease and starts over */
  :: atomic { crashes < CRASHES -> crashes++; jd = NOJ; jl = NOJ; rj = NOJ; rjs = 0 }
  od
}


/* supervisor/cli.py submit → Queue.enqueue → enqueue.lua (+ WAIT); exit 4 → submitted again */
active proctype Producer() {
  byte e;
  do
  :: e < JOBS ->
     if
     :: atomic { crashes < CRASHES -> crashes++; goto gone }
     :: atomic { ENQUEUE(e); WROTE(0) }
        if
        :: atomic { lag[0] == 0 -> e++ }
        :: lag[0] != 0 -> skip                                      /* NotReplicated: again */
        fi
     fi
  :: e == JOBS -> break
  od;
gone:
  pdone = 1
}

/* supervisor/cli.py cancel → Queue.cancel → cancel.lua */
active proctype Canceller() {
  byte e;
  do
  :: atomic { cancels < CANCELS -> cancels++; select (e : 0 .. NJ - 1); CANCEL(e); e = 0 }
  :: cancels == CANCELS -> break
  od
}

/* time and replication */
/* the replica stops taking writes: it keeps a copy of the primary as of now */
inline SNAPSHOT() {
  for (ci : 0 .. NJ - 1) { r_js[ci] = js[ci]; r_jt[ci] = jt[ci]; r_jc[ci] = jc[ci]; r_jw[ci] = jw[ci]; r_jx[ci] = jx[ci]; r_jr[ci] = jr[ci]; r_rdy[ci] = rdy[ci]; r_wt[ci] = wt[ci]; r_dp[ci] = dp[ci]; r_dl[ci] = dl[ci] }
  for (ci : 0 .. NL * NJ - 1) { r_pl[ci] = pl[ci] }
  for (ci : 0 .. NU - 1) { r_lk[ci] = lk[ci]; r_wu[ci] = wu[ci] }
  for (ci : 0 .. NJ - 1) { r_jk[ci] = jk[ci]; r_jp[ci] = jp[ci] }
  for (ci : 0 .. NS - 1) { r_bj[ci] = bj[ci]; r_bt[ci] = bt[ci] }
}
/* failover: the lagging replica becomes the primary */
inline FAILOVER() {
  for (ci : 0 .. NJ - 1) { js[ci] = r_js[ci]; jt[ci] = r_jt[ci]; jc[ci] = r_jc[ci]; jw[ci] = r_jw[ci]; jx[ci] = r_jx[ci]; jr[ci] = r_jr[ci]; rdy[ci] = r_rdy[ci]; wt[ci] = r_wt[ci]; dp[ci] = r_dp[ci]; dl[ci] = r_dl[ci] }
  for (ci : 0 .. NL * NJ - 1) { pl[ci] = r_pl[ci] }
  for (ci : 0 .. NU - 1) { lk[ci] = r_lk[ci]; wu[ci] = r_wu[ci] }
  for (ci : 0 .. NJ - 1) { jk[ci] = r_jk[ci]; jp[ci] = r_jp[ci] }
  for (ci : 0 .. NS - 1) { bj[ci] = r_bj[ci]; bt[ci] = r_bt[ci] }
}
/* the replica has everything again (its copy is not needed: zero keeps the state vector canonical) */
inline RZERO() {
  for (ci : 0 .. NJ - 1) { r_js[ci] = 0; r_jt[ci] = 0; r_jc[ci] = 0; r_jw[ci] = 0; r_jx[ci] = 0; r_jr[ci] = 0; r_rdy[ci] = 0; r_wt[ci] = 0; r_dp[ci] = 0; r_dl[ci] = 0 }
  for (ci : 0 .. NL * NJ - 1) { r_pl[ci] = 0 }
  for (ci : 0 .. NU - 1) { r_lk[ci] = 0; r_wu[ci] = 0 }
  for (ci : 0 .. NJ - 1) { r_jk[ci] = 0; r_jp[ci] = 0 }
  for (ci : 0 .. NS - 1) { r_bj[ci] = 0; r_bt[ci] = 0 }
}
#define LAPSE(h) (lease[h] == FRESH && (hdead[h] || lapses < LAPSES))
/* the key expires only once the host's covered attempt has stopped: the take's min_lease (kill +
 * 2 polls) lets the fence or the slot's own poll stop an attempt started on a FRESH lease before
 * the key runs out (3 x heartbeat > fence + kill). An attempt started while the lease was not
 * fresh has no such margin. */
#define EXPIRES(h) (lease[h] == STALE && !(cov[h] && (hrun[h] || win[h])))
#define DUP(s, j) (dups < DUPS && js[j] == RUNNING && jk[j] != (s) && PL(lst[s], j) == 0) -> \
  dups++; PL(lst[s], j)++
#define BUSYEXPIRES(s) (bj[s] != 0 && sj[s] + 1 != bj[s] && !(hrun[s] && hj[s] + 1 == bj[s]))
active proctype Env() {
end:
  do
  /* no heartbeat write for the fence interval (partition, stall; a dead host's always lapses) */
  :: atomic { LAPSE(0) -> if :: !hdead[0] -> lapses++ :: else -> skip fi; lease[0] = STALE }
  :: atomic { LAPSE(1) -> if :: !hdead[1] -> lapses++ :: else -> skip fi; lease[1] = STALE }
  /* the key expires: fence interval + the time to stop < 3 x heartbeat, so only after the fence */
  :: atomic { EXPIRES(0) -> lease[0] = EXPIRED }
  :: atomic { EXPIRES(1) -> lease[1] = EXPIRED }
  /* busy:<worker> expires (PX longest timeout + 120 s): only once the slot holds that job no more
     and no handler of that slot runs it (the runner kills an attempt at its deadline) */
  :: atomic { BUSYEXPIRES(0) -> bj[0] = 0; bt[0] = 0 }
  :: atomic { BUSYEXPIRES(1) -> bj[1] = 0; bt[1] = 0 }
  /* a duplicate entry: a copy of a running job's entry in the current list of a slot other than the
     job's worker. The model's failover loses a suffix of the writes (the replica's copy is a prefix
     of the history), so it never leaves such a copy; a real one can (a split brain's writes on the
     old primary, a promoted replica other than the one a WAIT counted): this step stands for it. */
  :: atomic { DUP(0, 0) } :: atomic { DUP(0, 1) } :: atomic { DUP(0, 2) }
  :: atomic { DUP(1, 0) } :: atomic { DUP(1, 1) } :: atomic { DUP(1, 2) }
  /* replication: the replica stops taking writes here ... */
  :: atomic { !frozen && freezes < FREEZES -> freezes++; frozen = 1; SNAPSHOT() }
  /* ... and catches up (the WAITs in flight are answered) */
  :: atomic { frozen -> frozen = 0; RZERO();
       for (ci : 0 .. NS) { if :: lag[ci] == 1 -> lag[ci] = 0 :: else -> skip fi } }
  /* ... or fails over: the primary becomes the lagging replica; unreplicated writes are lost */
  :: atomic { frozen -> FAILOVER(); frozen = 0; RZERO();
       for (ci : 0 .. NS) { if :: lag[ci] == 1 -> lag[ci] = 2 :: else -> skip fi } }
  od
}

/* every job that exists has ended, no lock is held and nothing is parked (so every parked job was
 * promoted, no lock stranded, no job lost) */
#define QUIET (lk[0] == 0 && lk[1] == 0 && \
  (js[0] == 0 || js[0] >= 4) && (js[1] == 0 || js[1] >= 4) && (js[2] == 0 || js[2] >= 4) && \
  wt[0] + wt[1] + wt[2] + dp[0] + dp[1] + dp[2] == 0)

/* when nothing can move any more (the budgets are spent and every process is blocked), every job
 * has settled: checked in every safety run, whatever the budgets (the LTL property `settles`
 * below is the same under weak fairness, which also rules out cycles, at a much higher cost) */
active proctype Quiesce() {
end:
  timeout -> assert(QUIET)                  /* property: every job settles (at quiescence) */
}

active proctype Monitor() {
end:
  atomic { !INVARIANT ->
    assert(KEPT(0) && KEPT(1) && KEPT(2));                /* property: no job lost */
    assert(RUNLISTED(0) && RUNLISTED(1) && RUNLISTED(2)); /* property: a running job is in a processing list */
    assert(LOCKOK(0) && LOCKOK(1));                       /* property: no lock stranded */
    assert(LOCKHELD(0) && LOCKHELD(1) && LOCKHELD(2))     /* property: a running job holds its user's lock */
  }
}

init {
  byte i;
  atomic {
    for (i : 0 .. NS - 1) { sj[i] = NOJ; lst[i] = i; hj[i] = NOJ }
    run Slot(0); run Slot(1); run Supervisor(0); run Supervisor(1)
  }
}

/* liveness: eventually for good QUIET (under weak fairness: pan -a -f) */
ltl settles { <> [] QUIET }
