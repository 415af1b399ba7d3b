/*
 * tender-pool's job protocol, for Spin (model/README.md explains the abstraction).
 *
 * Mirrors slots/lua/*.lua as of the commit named in model/mirrors.json (their SHA-256 are recorded
 * there; tests/model/test_mirrors.py fails when a script changes: re-check the step named below, then
 * `python model/record.py`). Each Lua script is ONE atomic block here, named `<script>.lua` in a
 * comment; every other step names the Python function it mirrors.
 *
 *   lib.lua          PROMOTE_WAITER, RELEASE_LOCK, ON_TERMINAL
 *   enqueue.lua      ENQUEUE            (Producer)
 *   start.lua        START              (Slot, step "start")
 *   settle.lua       SETTLE             (Slot, step "settle")
 *   requeue.lua      REQUEUE            (Slot.reconcile, Supervisor death path, Reaper)
 *   cancel.lua       CANCEL             (Canceller)
 *   stamp.lua        STAMP              (Reaper, deadline rule)
 *   unstick.lua      UNSTICK            (Reaper, lost-promotion sweep)
 *   promote_due.lua  PROMOTE_DUE        (Reaper)
 *
 * World: 3 jobs (0 and 1 of user 0, 2 of user 1; job 2 runs `--after` job 0), 2 slots (slot s on
 * host s, each host with its supervisor), 1 reaper (whichever host holds the lease), 1 producer,
 * 1 canceller, and Env (time, replication, failover). Budgets (-D...): CRASHES (all processes
 * together), ERRS (Redis calls that fail or lose their reply), LAPSES (a live host's heartbeat
 * lapsing past the fence), LATES (the reaper finding an entry far past its deadline), FREEZES (a replica falling behind; each ends in catch-up or failover),
 * CANCELS.
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
#define PL(L, j) P.pl[(L) * NJ + (j)]

/* job states (JobRecord.state) */
#define NONE      0   /* no job hash */
#define QUEUED    1
#define WAITING   2
#define RUNNING   3
#define COMPLETED 4
#define FAILED    5
#define CANCELLED 6
#define TERMINAL(x) ((x) >= COMPLETED)

#define USER(j) ((j) == 2 -> 1 : 0)
#define DEP(j)  ((j) == 2 -> 0 : NOJ)
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

/* host lease: the host key host:<h> and the host's own view of its last heartbeat write */
#define FRESH 0       /* last heartbeat write younger than the fence interval */
#define STALE 1       /* older than the fence interval: the host must stop its attempts */
#define EXPIRED 2     /* the key expired (3 x heartbeat > fence): the host counts as dead */

typedef Redis {
  byte js[NJ];        /* job:<id> state */
  byte jt[NJ];        /* job:<id> token ('' = 0) */
  bit  jc[NJ];        /* job:<id> cancel */
  byte jw[NJ];        /* job:<id> waits */
  byte jx[NJ];        /* job:<id> crashes */
  byte jr[NJ];        /* job:<id> tries */
  byte rdy[NJ];       /* copies in ready:hi + ready:lo */
  byte pl[NL * NJ];   /* copies in each processing list */
  byte wt[NJ];        /* copies in wait:<user(j)> */
  byte dp[NJ];        /* copies in deps:<dep(j)> */
  bit  dl[NJ];        /* member of delayed */
  byte lk[NU];        /* lock:<user> */
  bit  wu[NU];        /* member of waitusers */
};

Redis P;              /* the primary */
Redis R;              /* the replica while it lags (zero otherwise: it has everything) */
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
byte stok[NS];        /* its attempt token (the start suffix) */
bit  win[NS];         /* start.lua answered run; its handler has not ended yet */
bit  hrun[NS];        /* its handler process is running (possibly orphaned by a slot crash) */
byte hj[NS];          /* the job of that handler */
bit  fk[NS];          /* the host's fence stopped this attempt */
byte running[NJ];     /* handlers of job j running now */

byte crashes, errs, lapses, freezes, cancels, lates, retries;

/* scratch of the atomic blocks, written before read on every path: kept out of the state vector */
hidden byte ci, x, u, rsv;
bit  pdone;

/* ------------------------------------------------------------------------------------------- */
/* lib.lua                                                                                      */

#define WAITLEN(u) ((USER(0) == (u) -> P.wt[0] : 0) + (USER(1) == (u) -> P.wt[1] : 0) + (USER(2) == (u) -> P.wt[2] : 0))

/* lib.lua promote_waiter: LPOP the head of wait:<user> (any waiter: the model keeps no order),
 * reserve the lock for it ('r:<id>') and push it to ready; with no waiter, DEL the lock. */
inline PROMOTE_WAITER(u, head) {
  head = NOJ;
  if
  :: (USER(0) == u && P.wt[0] > 0) -> head = 0
  :: (USER(1) == u && P.wt[1] > 0) -> head = 1
  :: (USER(2) == u && P.wt[2] > 0) -> head = 2
  :: else -> skip
  fi;
  if
  :: head != NOJ ->
     P.wt[head]--; P.lk[u] = RES + head; P.rdy[head]++;
     if :: WAITLEN(u) == 0 -> P.wu[u] = 0 :: else -> skip fi
  :: else -> P.lk[u] = 0; P.wu[u] = 0
  fi
}

/* lib.lua release_lock: compare-and-release by token */
inline RELEASE_LOCK(u, t, head) {
  if
  :: (t != 0 && P.lk[u] == t) -> PROMOTE_WAITER(u, head)
  :: else -> skip
  fi
}

/* lib.lua on_terminal: wake the dependents (deps:<id> → ready) */
inline ON_TERMINAL(e) {
  for (ci : 0 .. NJ - 1) {
    if
    :: DEP(ci) == e -> P.rdy[ci] = P.rdy[ci] + P.dp[ci]; P.dp[ci] = 0
    :: else -> skip
    fi
  }
}

/* every state write: a terminal state is never left (one terminal state per job) */
#define SETSTATE(e, st) assert(!TERMINAL(P.js[e])); P.js[e] = st

/* ------------------------------------------------------------------------------------------- */
/* enqueue.lua (idempotent on the id)                                                           */
inline ENQUEUE(e) {
  if
  :: P.js[e] == NONE -> P.js[e] = QUEUED; P.rdy[e]++
  :: else -> skip
  fi
}

/* start.lua: stamp, cancel check, waits, dependencies, lock-or-park, token; one atomic step */
inline UNCLAIM(L, e) {
  if :: PL(L, e) > 0 -> PL(L, e)-- :: else -> skip fi    /* LREM proc 1 id (HDEL started: no time) */
}
inline PASS_RESERVATION(u, rsv, head) {
  if :: rsv -> PROMOTE_WAITER(u, head) :: else -> skip fi
}
inline FINISH(L, e, st, u, rsv, head) {
  UNCLAIM(L, e); SETSTATE(e, st); P.jt[e] = 0; ON_TERMINAL(e); PASS_RESERVATION(u, rsv, head)
}
inline START(L, e, t, res) {
  u = USER(e); rsv = (P.lk[u] == RES + e); res = R_NONE;
  /* l.45: our own retry after a lost reply: the first call did start it */
  if
  :: (P.js[e] == RUNNING && PL(L, e) > 0 && P.jt[e] == t) -> res = R_RUN
  :: else -> skip
  fi;
#ifdef FIX_START_HOSTKEY
  /* proposed: start only while our host key names us (KEYS host:<host>, ARGV holder): a host the
     reaper may judge dead never starts an attempt it could not fence */
  if
  :: (res == R_NONE && lease[OWNER(L)] == EXPIRED) -> res = R_STALE
  :: else -> skip
  fi;
#endif
#ifdef FIX_START_LPOS
  /* proposed: start only what is still in our list (a retried call after a lost 'parked' reply, a
     claim a failover lost, an entry the reaper took back): LPOS KEYS[1] id, else {'stale', state} */
  if
  :: (res == R_NONE && PL(L, e) == 0) -> res = R_STALE
  :: else -> skip
  fi;
#endif
  /* l.53: a duplicate entry of a finished or running job: the other copy owns it */
  if
  :: (res == R_NONE && (TERMINAL(P.js[e]) || P.js[e] == RUNNING)) ->
     UNCLAIM(L, e); PASS_RESERVATION(u, rsv, x); res = R_STALE
  :: else -> skip
  fi;
  /* l.58 cancelled before it started; l.61 max waits */
  if
  :: (res == R_NONE && P.jc[e]) -> FINISH(L, e, CANCELLED, u, rsv, x); res = R_ENDED
  :: (res == R_NONE && !P.jc[e] && P.jw[e] >= MAXWAITS) -> FINISH(L, e, FAILED, u, rsv, x); res = R_ENDED
  :: else -> skip
  fi;
  /* l.66 dependencies */
  if
  :: (res == R_NONE && DEP(e) != NOJ) ->
     if
     :: P.js[DEP(e)] == COMPLETED -> skip
     :: (P.js[DEP(e)] == NONE || (TERMINAL(P.js[DEP(e)]) && P.js[DEP(e)] != COMPLETED)) ->
        FINISH(L, e, FAILED, u, rsv, x); res = R_ENDED
     :: (P.js[DEP(e)] != NONE && !TERMINAL(P.js[DEP(e)])) ->
        PASS_RESERVATION(u, rsv, x);
        UNCLAIM(L, e); P.dp[e]++; SETSTATE(e, WAITING); P.jw[e]++; res = R_PARKED
     fi
  :: else -> skip
  fi;
  /* l.80 the user's lock */
  if
  :: (res == R_NONE && P.lk[u] == 0 && WAITLEN(u) > 0) ->
     /* a lost promotion: queue behind the waiters and promote the head now (the head is one of
        the earlier waiters, so promoting before parking is the same) */
     PROMOTE_WAITER(u, x);
     UNCLAIM(L, e); P.wt[e]++; SETSTATE(e, WAITING); P.jw[e]++; P.wu[u] = 1; res = R_PARKED
  :: (res == R_NONE && P.lk[u] != 0 && !rsv) ->
     P.wu[u] = 1; UNCLAIM(L, e); P.wt[e]++; SETSTATE(e, WAITING); P.jw[e]++; res = R_PARKED
  :: else -> skip
  fi;
  /* l.94 run: SET lock token, state running, token, started */
  if
  :: res == R_NONE -> P.lk[u] = t; SETSTATE(e, RUNNING); P.jt[e] = t; res = R_RUN
  :: else -> skip
  fi;
  rsv = 0; x = 0; u = 0
}

/* settle.lua: fenced by the token; release the lock (promote the head waiter); the verdict */
inline SETTLE(L, e, t, v, res) {
  u = USER(e);
  if
  :: P.jt[e] != t -> PL(L, e) = 0; res = R_FENCED        /* LREM proc 0 id: never leave a copy */
  :: else ->
     if :: PL(L, e) > 0 -> PL(L, e)-- :: else -> skip fi;
#ifndef FAULT_RESULT_AFTER_RELEASE
     RELEASE_LOCK(u, t, x);
#endif
     if
     :: v == V_COMPLETED -> SETSTATE(e, COMPLETED); P.jt[e] = 0; ON_TERMINAL(e)
     :: v == V_FAILED    -> SETSTATE(e, FAILED); P.jt[e] = 0; ON_TERMINAL(e)
     :: v == V_CANCELLED -> SETSTATE(e, CANCELLED); P.jt[e] = 0; ON_TERMINAL(e)
     :: v == V_RETRY     -> P.jr[e]++; SETSTATE(e, QUEUED); P.jt[e] = 0; P.dl[e] = 1
     :: v == V_REQUEUE   -> SETSTATE(e, QUEUED); P.jt[e] = 0; P.rdy[e]++
     fi;
     res = R_OK
  fi;
  x = 0; u = 0
}

/* requeue.lua: re-check the owner is dead (check), the entry is still there; running → release
 * its lock, count the crash (crash cap → failed), queued; RPUSH ready */
inline REQUEUE(L, e, reason, check, res) {
  u = USER(e);
  if
#ifndef FAULT_REQUEUE_NO_OWNER_CHECK
  :: (check && lease[OWNER(L)] != EXPIRED) -> res = R_ALIVE        /* l.12 GET host:<owner> */
  :: (!check || lease[OWNER(L)] == EXPIRED) ->
#else
  :: true ->
#endif
     if
     :: PL(L, e) == 0 -> res = R_GONE
     :: else ->
        PL(L, e)--;
        if
        :: TERMINAL(P.js[e]) -> res = R_GONE
        :: else ->
           res = R_REQUEUED;
           if
           :: P.js[e] == RUNNING ->
              RELEASE_LOCK(u, P.jt[e], x);
              if
              :: reason != RS_UNCLAIM ->
                 P.jx[e]++;
                 if
                 :: P.jx[e] >= CRASHCAP -> SETSTATE(e, FAILED); P.jt[e] = 0; ON_TERMINAL(e); res = R_FAILED
                 :: else -> skip
                 fi
              :: else -> skip
              fi;
              if :: res != R_FAILED -> SETSTATE(e, QUEUED); P.jt[e] = 0 :: else -> skip fi
           :: else -> skip
           fi;
           if :: res != R_FAILED -> P.rdy[e]++ :: else -> skip fi
        fi
     fi
  fi;
  x = 0; u = 0
}

/* cancel.lua: queued/parked/delayed → taken out and cancelled; running or in a slot's hands → flag */
inline CANCEL(e) {
  u = USER(e);
  if
  :: P.js[e] == NONE -> skip
  :: TERMINAL(P.js[e]) -> skip
  :: (P.js[e] != NONE && !TERMINAL(P.js[e])) ->
     P.jc[e] = 1;
     if
     :: P.js[e] == RUNNING -> skip                                  /* signalled */
     :: else ->
        x = P.rdy[e] + P.wt[e] + P.dl[e] + P.dp[e];
        P.rdy[e] = 0; P.wt[e] = 0; P.dl[e] = 0; P.dp[e] = 0;
        if
        :: x == 0 -> skip                                           /* signalled */
        :: else ->
           SETSTATE(e, CANCELLED); P.jt[e] = 0; ON_TERMINAL(e);
           if :: WAITLEN(u) == 0 -> P.wu[u] = 0 :: else -> skip fi;
           if :: P.lk[u] == RES + e -> PROMOTE_WAITER(u, x) :: else -> skip fi
        fi
     fi
  fi;
  x = 0; u = 0
}

/* unstick.lua: nobody holds or reserved the lock, but waiters: promote the head */
inline UNSTICK(u) {
  if
  :: P.lk[u] != 0 -> skip
  :: (P.lk[u] == 0 && WAITLEN(u) == 0) -> P.wu[u] = 0
  :: (P.lk[u] == 0 && WAITLEN(u) > 0) -> PROMOTE_WAITER(u, x)
  fi;
  x = 0
}

/* promote_due.lua: due retries → ready (abstract time: every backoff may have passed) */
inline PROMOTE_DUE() {
  for (ci : 0 .. NJ - 1) {
    if :: P.dl[ci] -> P.dl[ci] = 0; P.rdy[ci]++ :: else -> skip fi
  }
}

/* stamp.lua only writes claim times (`started`), which the model replaces by abstract time: an
 * entry may be judged far past its deadline once no attempt of its job is active (see Reaper). */

/* a WAITed write: on the replica at once unless the replica lags */
#define WROTE(p) lag[p] = frozen

/* the smallest token nobody holds (canonical, so states that differ only in token names merge) */
inline NEWTOK(t) {
  t = 1;
  do
  :: (t == P.jt[0] || t == P.jt[1] || t == P.jt[2] || t == P.lk[0] || t == P.lk[1] ||
      t == R.jt[0] || t == R.jt[1] || t == R.jt[2] || t == R.lk[0] || t == R.lk[1] ||
      t == stok[0] || t == stok[1]) -> t++
  :: else -> break
  od
}

#define LISTED(j) (P.rdy[j] > 0 || P.wt[j] > 0 || P.dp[j] > 0 || P.dl[j] || INPROC(j))
#if NL == 2
#define INPROC(j) (PL(0, j) + PL(1, j) > 0)
#elif NL == 4
#define INPROC(j) (PL(0, j) + PL(1, j) + PL(2, j) + PL(3, j) > 0)
#else
#define INPROC(j) (PL(0, j) + PL(1, j) + PL(2, j) + PL(3, j) + PL(4, j) + PL(5, j) > 0)
#endif
#define INPROC_L(L) (PL(L, 0) + PL(L, 1) + PL(L, 2) > 0)
/* an attempt of job e is between start.lua's answer and its handler's end */
#define ACTIVE(e) ((win[0] && sj[0] == e) || (hrun[0] && hj[0] == e) || (win[1] && sj[1] == e) || (hrun[1] && hj[1] == e))
#if NL == 2
#define ANYPEND (pend[0] || pend[1])
#elif NL == 4
#define ANYPEND (pend[0] || pend[1] || pend[2] || pend[3])
#else
#define ANYPEND (pend[0] || pend[1] || pend[2] || pend[3] || pend[4] || pend[5])
#endif
/* the reaper's choices: list l's owner is dead (host key gone) / entry j of l, owner alive, past deadline */
#define DEADL(l) :: (jd == NOJ && je == NOJ && l < NL && lease[OWNER(l)] == EXPIRED && INPROC_L(l)) -> jd = l
#define LATE(l, j) :: (lates < LATES && jd == NOJ && je == NOJ && l < NL && lease[OWNER(l)] != EXPIRED && PL(l, j) > 0 && !ACTIVE(j)) -> jl = l; je = j; lates++
#define LATEL(l) LATE(l, 0) LATE(l, 1) LATE(l, 2)
#define HELD(j) ((sj[0] == j && !sdead[0]) || (sj[1] == j && !sdead[1]))
/* no job lost: a job that exists is terminal, in some list or zset, or in a live slot's hands */
#define KEPT(j) (P.js[j] == NONE || TERMINAL(P.js[j]) || LISTED(j) || HELD(j))
/* no lock stranded: a token lock belongs to the running attempt of one of the user's jobs; a
 * reservation names a job that can still start, or has an entry whose start passes it on */
#define TOKOWNED(u, j) (USER(j) == u && P.js[j] == RUNNING && P.jt[j] == P.lk[u])
#define LOCKOK(u) (P.lk[u] == 0 || (P.lk[u] >= RES && (!TERMINAL(P.js[P.lk[u] - RES]) || \
                     P.rdy[P.lk[u] - RES] > 0 || INPROC(P.lk[u] - RES))) || \
                   (P.lk[u] < RES && (TOKOWNED(u, 0) || TOKOWNED(u, 1) || TOKOWNED(u, 2))))
#define INVARIANT (KEPT(0) && KEPT(1) && KEPT(2) && LOCKOK(0) && LOCKOK(1))

/* ------------------------------------------------------------------------------------------- */
/* processes                                                                                    */

/* a crash before the next step: local state lost, Redis effects stay (hdead: the supervisor died,
 * PDEATHSIG ends the slot at its next step) */
#define SLOT_CRASH \
  :: hdead[s] -> goto dead \
  :: atomic { (!hdead[s] && crashes < CRASHES) -> crashes++ }; goto dead

/* a Redis call that fails without running */
#define CALL_FAILS (!hdead[s] && errs < ERRS) -> errs++

proctype Slot(byte s) {                    /* slots/slot.py: Slot.main, Slot.step */
  byte L, e, t, v, res;
  bit due, rec;                            /* reconcile_due; reconcile on this turn */
boot:                                      /* forked with its list registered (register_list) */
  atomic { L = lst[s]; due = 1; rec = 1; e = NOJ; t = 0; v = 0; res = 0 }
endloop:
  if
  SLOT_CRASH
  /* Slot.reconcile: our list must be empty between jobs; requeue.lua 'unclaim' each entry */
  :: atomic { rec && CALL_FAILS; rec = 0 }                      /* reconcile_failed: claim anyway */
  :: atomic { (rec && !hdead[s]) ->
       if
       :: PL(L, 0) > 0 -> e = 0
       :: PL(L, 1) > 0 -> e = 1
       :: PL(L, 2) > 0 -> e = 2
       :: else -> due = 0; rec = 0
       fi;
       if :: e != NOJ -> REQUEUE(L, e, RS_UNCLAIM, 0, res); e = NOJ; res = 0 :: else -> skip fi }
  /* Queue.claim: LMOVE ready:hi / BLMOVE ready:lo → our list (blocks while ready is empty) */
  :: atomic { !rec && CALL_FAILS; due = 1; rec = 1 }
  :: atomic { (!rec && !hdead[s] && (P.rdy[0] > 0 || P.rdy[1] > 0 || P.rdy[2] > 0)) ->
       if
       :: P.rdy[0] > 0 -> e = 0
       :: P.rdy[1] > 0 -> e = 1
       :: P.rdy[2] > 0 -> e = 2
       fi;
       P.rdy[e]--; PL(L, e)++;
       if
       :: sj[s] = e; goto start
       :: errs < ERRS -> errs++; e = NOJ; due = 1; rec = 1          /* moved, reply lost */
       fi }
  fi;
  goto endloop;

start:                                     /* Slot.start → Queue.start → start.lua (+ WAIT) */
  if
  SLOT_CRASH
  :: atomic { CALL_FAILS; due = 1; if :: goto start :: goto giveup fi }  /* 20 failures: raise */
  :: atomic { !hdead[s] ->
       if :: t == 0 -> NEWTOK(t); stok[s] = t :: else -> skip fi;  /* the suffix, kept for retries */
       START(L, e, t, res); WROTE(1 + s);
       win[s] = (res == R_RUN);                                    /* its claim time is now */
       if
       :: lag[1 + s] == 0 -> goto started                          /* acknowledged */
       :: errs < ERRS -> errs++; due = 1; goto start               /* reply lost: same suffix */
       :: lag[1 + s] != 0 -> skip                                  /* WAIT: the replica lags */
       fi }
     if
     SLOT_CRASH
     :: atomic { lag[1 + s] == 0 -> goto started }
     :: atomic { lag[1 + s] != 0 -> due = 1; goto start }          /* NotReplicated: retry */
     fi
  fi;
started:
  /* not run (parked / ended / stale: report_not_run); or Slot.execute → runner.spawn, only while
     the host's lease is fresh and the fence has not stopped this attempt */
  if
  SLOT_CRASH
  :: atomic { res != R_RUN -> sj[s] = NOJ; stok[s] = 0; win[s] = 0; e = NOJ; t = 0; res = 0; rec = due; goto endloop }
  :: atomic { (res == R_RUN && !hdead[s] && lease[s] == FRESH && !fk[s]) ->
       assert(running[e] == 0);           /* never two attempts of one job at once */
       running[e]++; hrun[s] = 1; hj[s] = e }
  :: atomic { (res == R_RUN && !hdead[s] && (lease[s] != FRESH || fk[s])) ->
       fk[s] = 1; win[s] = 0; v = V_REQUEUE; goto settle }
  fi;

  /* runner.run until the handler ends; kinds.conclude; Slot.verdict */
  if
  :: hdead[s] -> goto dead                 /* PDEATHSIG: the handler was killed with the host */
  :: atomic { (!hdead[s] && crashes < CRASHES) -> crashes++; goto dead }   /* handler orphaned */
  :: atomic { !hdead[s] && fk[s] -> v = V_REQUEUE; win[s] = 0 }           /* fenced: interrupted */
  :: atomic { !hdead[s] && !fk[s] ->
       if
       :: v = V_COMPLETED
       :: e == 0 -> v = V_FAILED                                       /* final, or a timeout */
       :: (retries < RETRIES && P.jr[e] + 1 < MAXTRIES) -> retries++; v = V_RETRY   /* tries left */
       :: P.jc[e] -> v = V_CANCELLED                                   /* poll_attempt: cancel */
       :: P.jt[e] != t -> v = V_REQUEUE                                /* poll_attempt: fenced */
       fi;
       hrun[s] = 0; running[e]--; win[s] = 0 }
  fi;

settle:                                    /* Slot.settle → Queue.settle → settle.lua (+ WAIT) */
  if
  SLOT_CRASH
  :: atomic { CALL_FAILS; due = 1; goto settle }
  :: atomic { !hdead[s] -> SETTLE(L, e, t, v, res); WROTE(1 + s);
       if
       :: lag[1 + s] == 0 -> goto settled                          /* acknowledged: ok or fenced */
       :: errs < ERRS -> errs++; due = 1; goto settle              /* reply lost: retry */
       :: lag[1 + s] != 0 -> skip
       fi }
     if
     SLOT_CRASH
     :: atomic { lag[1 + s] == 0 -> goto settled }
     :: atomic { lag[1 + s] != 0 -> due = 1; goto settle }         /* NotReplicated: retry */
     fi
  fi;
settled:
  atomic { sj[s] = NOJ; stok[s] = 0; fk[s] = 0; win[s] = 0; e = NOJ; t = 0; v = 0; res = 0; rec = due; goto endloop }
giveup:                                    /* start raised: the step fails, reconcile is due */
  atomic { sj[s] = NOJ; stok[s] = 0; win[s] = 0; e = NOJ; t = 0; res = 0; rec = due; goto endloop }

dead:                                      /* the process is gone; a launched handler runs on */
  atomic {
    sdead[s] = 1; sj[s] = NOJ; stok[s] = 0; win[s] = 0; fk[s] = 0; lag[1 + s] = 0;
    e = NOJ; t = 0; v = 0; res = 0; due = 0; rec = 0; L = 0
  }
enddead:
  sdead[s] == 0;                           /* respawned by its supervisor */
  goto boot
}

/* supervisor/daemon.py (on_slot_exit, the fence) + supervisor/reaper.py Housekeeper (heartbeat,
 * requeue_own) of host h, whose slot is slot h */
proctype Supervisor(byte h) {
  byte L, e, res;
end:
  do
  /* on_slot_exit: kill the dead slot's job tree, hand its list to the housekeeper */
  :: atomic { !hdead[h] && sdead[h] && !tk[h] ->
       if :: hrun[h] -> hrun[h] = 0; running[hj[h]]-- :: else -> skip fi;
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
       :: e != NOJ -> REQUEUE(L, e, RS_CRASH, 0, res)
       :: else -> skip
       fi;
       L = 0; e = 0; res = 0 }
  /* Housekeeper.heartbeat: SET host:<h> (the write can fail: then this step just does not happen) */
  :: atomic { !hdead[h] && lease[h] != FRESH -> lease[h] = FRESH }
  /* the fence: the last heartbeat write is older than the fence interval: stop the host's attempts */
  :: atomic { !hdead[h] && lease[h] == STALE && ((win[h] && !fk[h]) || hrun[h]) ->
       if :: win[h] -> fk[h] = 1 :: else -> skip fi;
       if :: hrun[h] -> hrun[h] = 0; running[hj[h]]-- :: else -> skip fi }
  /* the supervisor dies: the host's processes die with it (PDEATHSIG; the unit's cgroup) */
  :: atomic { !hdead[h] && crashes < CRASHES ->
       crashes++; hdead[h] = 1;
       if :: hrun[h] -> hrun[h] = 0; running[hj[h]]-- :: else -> skip fi;
       win[h] = 0 }
     break
  od
}

/* supervisor/reaper.py Housekeeper.reap on whichever host holds the reaper lease */
active proctype Reaper() {
  byte L, e, jd, jl, je, res;
  jd = NOJ; jl = NOJ; je = NOJ;
end:
  do
  :: atomic { (P.dl[0] || P.dl[1] || P.dl[2]) -> PROMOTE_DUE() }     /* promote_due.lua */
  :: atomic { P.wu[0] -> UNSTICK(0) }                              /* sweep: unstick.lua */
  :: atomic { P.wu[1] -> UNSTICK(1) }
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
       :: e != NOJ -> REQUEUE(jd, e, RS_CRASH, 1, res);
          if :: res == R_ALIVE -> jd = NOJ :: else -> skip fi     /* owner back: stop */
       :: else -> skip
       fi;
       e = 0; res = 0 }
  /* check_list, owner alive: stamp.lua, then an entry far past its deadline → requeue 'deadline'.
     Abstract time: an entry is far past its deadline once no attempt of its job is between
     start.lua's answer and its handler's end (the runner kills a handler at its deadline). */
  :: atomic {
       if LATEL(0) LATEL(1) LATEL(2) LATEL(3) LATEL(4) LATEL(5) fi }
  :: atomic { je != NOJ ->
#ifdef FIX_STAMP_RECHECK
       /* proposed: requeue.lua re-checks that the claim stamp is still the one judged old (a
          start.lua since then re-stamped it): ARGV stamp, HGET started <entry> */
       if :: ACTIVE(je) -> skip :: else -> REQUEUE(jl, je, RS_DEADLINE, 0, res) fi;
#else
       REQUEUE(jl, je, RS_DEADLINE, 0, res);
#endif
       jl = NOJ; je = NOJ; res = 0 }
  /* the reaper's host dies: another host's reaper takes the lease and starts over */
  :: atomic { crashes < CRASHES -> crashes++; jd = NOJ; jl = NOJ; je = NOJ }
  od
}


/* supervisor/cli.py submit → Queue.enqueue → enqueue.lua (+ WAIT); exit 4 → submitted again */
active proctype Producer() {
  byte e;
  do
  :: e < NJ ->
     if
     :: atomic { crashes < CRASHES -> crashes++; goto gone }
     :: atomic { ENQUEUE(e); WROTE(0) }
        if
        :: atomic { lag[0] == 0 -> e++ }
        :: lag[0] != 0 -> skip                                      /* NotReplicated: again */
        fi
     fi
  :: e == NJ -> break
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
inline COPY(D, S) {
  for (ci : 0 .. NJ - 1) {
    D.js[ci] = S.js[ci]; D.jt[ci] = S.jt[ci]; D.jc[ci] = S.jc[ci]; D.jw[ci] = S.jw[ci];
    D.jx[ci] = S.jx[ci]; D.jr[ci] = S.jr[ci]; D.rdy[ci] = S.rdy[ci]; D.wt[ci] = S.wt[ci];
    D.dp[ci] = S.dp[ci]; D.dl[ci] = S.dl[ci]
  }
  for (ci : 0 .. NL * NJ - 1) { D.pl[ci] = S.pl[ci] }
  for (ci : 0 .. NU - 1) { D.lk[ci] = S.lk[ci]; D.wu[ci] = S.wu[ci] }
}
inline ZERO(D) {
  for (ci : 0 .. NJ - 1) {
    D.js[ci] = 0; D.jt[ci] = 0; D.jc[ci] = 0; D.jw[ci] = 0; D.jx[ci] = 0; D.jr[ci] = 0;
    D.rdy[ci] = 0; D.wt[ci] = 0; D.dp[ci] = 0; D.dl[ci] = 0
  }
  for (ci : 0 .. NL * NJ - 1) { D.pl[ci] = 0 }
  for (ci : 0 .. NU - 1) { D.lk[ci] = 0; D.wu[ci] = 0 }
}

#define LAPSE(h) (lease[h] == FRESH && (hdead[h] || lapses < LAPSES))
#define EXPIRES(h) (lease[h] == STALE && !hrun[h] && (!win[h] || fk[h]))
active proctype Env() {
end:
  do
  /* no heartbeat write for the fence interval (partition, stall; a dead host's always lapses) */
  :: atomic { LAPSE(0) -> if :: !hdead[0] -> lapses++ :: else -> skip fi; lease[0] = STALE }
  :: atomic { LAPSE(1) -> if :: !hdead[1] -> lapses++ :: else -> skip fi; lease[1] = STALE }
  /* the key expires: fence interval + the time to stop < 3 x heartbeat, so only after the fence */
  :: atomic { EXPIRES(0) -> lease[0] = EXPIRED }
  :: atomic { EXPIRES(1) -> lease[1] = EXPIRED }
  /* replication: the replica stops taking writes here ... */
  :: atomic { !frozen && freezes < FREEZES -> freezes++; frozen = 1; COPY(R, P) }
  /* ... and catches up (the WAITs in flight are answered) */
  :: atomic { frozen -> frozen = 0; ZERO(R);
       for (ci : 0 .. NS) { if :: lag[ci] == 1 -> lag[ci] = 0 :: else -> skip fi } }
  /* ... or fails over: the primary becomes the lagging replica; unreplicated writes are lost */
  :: atomic { frozen -> COPY(P, R); frozen = 0; ZERO(R);
       for (ci : 0 .. NS) { if :: lag[ci] == 1 -> lag[ci] = 2 :: else -> skip fi } }
  od
}

active proctype Monitor() {
end:
  atomic { !INVARIANT -> assert(INVARIANT) }
}

init {
  byte i;
  atomic {
    for (i : 0 .. NS - 1) { sj[i] = NOJ; lst[i] = i; hj[i] = NOJ }
    run Slot(0); run Slot(1); run Supervisor(0); run Supervisor(1)
  }
}

/* liveness: eventually for good every job that exists has ended, no lock is held and nothing is
 * parked (so every parked job was promoted, no lock stranded, no job lost) */
#define QUIET (P.lk[0] == 0 && P.lk[1] == 0 && \
  (P.js[0] == 0 || P.js[0] >= 4) && (P.js[1] == 0 || P.js[1] >= 4) && (P.js[2] == 0 || P.js[2] >= 4) && \
  P.wt[0] + P.wt[1] + P.wt[2] + P.dp[0] + P.dp[1] + P.dp[2] == 0)
ltl settles { <> [] QUIET }
