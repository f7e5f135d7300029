/*
 * fence.pml -- exhaustive model of redlock's fencing-token protocol.
 *
 * What is checked (assertions over ghost variables, in succeed()):
 *   1. Uniqueness: no two successful acquisitions, by any clients in any
 *      attempts, ever get the same fence.
 *   2. Order: if acquisition B sends its round 1 after acquisition A has
 *      succeeded, then fence(B) > fence(A).
 * Mutual exclusion is deliberately NOT a property: keys expire at any moment
 * (a lease running out while the holder is paused), so two holders at once are
 * reachable (see REACH_OVERLAP below); only the fences have to stay sound.
 *
 * Parameters (-D on the spin command line; defaults in brackets):
 *   NS  servers [3]        NC  clients [2]        NA  attempts per client [2], 1..3
 * Variants:
 *   ALWAYS_ROUND2 round 2 even when the yes replies agree
 *   READ_ROUND1   round 1 only reads the counter (replies counter + 1, writes
 *                 nothing): with ALWAYS_ROUND2, the earlier protocol
 * and variants, each of which MUST give an assertion violation (check.sh checks):
 *   LITERAL       count a round-2 ok from ANY server (the literal rule of the
 *                 design notes). Caught with READ_ROUND1 ALWAYS_ROUND2; with
 *                 round 1 incrementing, no violation was found in the bounded
 *                 configurations, but redlock keeps the stricter rule.
 *   SKIP_ROUND2   never send round 2: succeed with t = the largest yes reply
 *                 even when the yes replies differ
 *   READ_ROUND1   (alone) round 1 only reads, and round 2 is still skipped when
 *                 the replies agree
 *   COUNTER_LOST  one server may restart empty once (key AND counter lost)
 *   RESEED        (passes) a counter expires while its name is unused, and one
 *                 that is not there starts from the server's clock (clk, a
 *                 ghost that grows by one at every increment at least: fewer
 *                 acquisitions than microseconds), as the name's record does
 *   CLOCK_BACK    with RESEED: the clock stepped back to the start before the
 *                 reseed (a counter then starts at 1)
 *   REACH_SUCCESS2  sanity: two acquisitions do succeed (asserts nsucc < 2)
 *   REACH_OVERLAP   sanity: two clients do hold the lock at once
 * The two REACH_ ones show the positive result is not vacuous: the model does
 * reach several successes, and overlapping holders, and still keeps fences sound.
 *
 * How it maps to the implementation (src/):
 *   key[s]      the lock key on server s (SET NX PX ...). 0 = free, otherwise the
 *               owner token of one client attempt. Process Server(s) frees it at
 *               any moment (PX expiry; a pause of the holder of any length).
 *   counter[s]  the fence counter key on server s: a plain integer with no TTL,
 *               persisted (it never expires; COUNTER_LOST models a restart that
 *               loses it).
 *   Client(c)   one redlock invocation that retries: up to NA attempts, each with
 *               a fresh owner token TOKEN(c, a) (the real one is random; here it
 *               is unique by construction).
 *   Round 1     the acquire script: "if key free: key := token, counter :=
 *               counter + 1, reply (yes, counter) else reply no" (a "held" reply
 *               carries no counter). Sent to every server at once (r1pend),
 *               executed by Link(c, s) at any later moment or never (request
 *               lost), and its reply may be lost. With a majority of yes replies
 *               received, t = the largest of them; when every yes reply received
 *               is t, those servers hold t already and the attempt succeeds at
 *               once (the common case: no split votes, no server behind).
 *   Round 2     otherwise, the fence script: "if key == token: if counter <= t
 *               then counter := t, reply ok else reply fail; else reply fail".
 *   Confirmation rule: a round-2 ok counts only from a server whose round-1
 *               reply was RECEIVED and was yes (yesmask), i.e. whose counter
 *               went into t. With a majority of such confirmations the attempt
 *               succeeds with fence t.
 *   Release     compare-and-delete (if key == token: delete); each may be lost.
 *
 * The network: every request is a pending message (one bit per client, server
 * and attempt in r1pend / r2pend) that Link(c, s) executes at any later time, in
 * any order with other messages, even after the client has given up on that
 * attempt or moved on (a late request from an old connection), or never. A
 * reply reaches the client only if the client is still waiting in that round of
 * that attempt, and even then it may be lost. The client stops waiting at any
 * moment, with whatever replies have arrived (any subset). Releases are executed
 * at once or lost: a late release only deletes our own key, which expiry can do
 * at any moment anyway, so it adds no reachable state.
 *
 * Each transition is one atomic step: a server runs a script atomically (Redis
 * runs a Lua script without interleaving), a client's decision is one step.
 */

#ifndef NS
#define NS 3
#endif
#ifndef NC
#define NC 2
#endif
#ifndef NA
#define NA 2
#endif

#define MAJ (NS / 2 + 1)

/* Owner token of attempt a (1..NA) of client c: unique over all attempts. */
#define TOKEN(c, a) ((c) * NA + (a))

/* Pending-message bit of (server s, attempt a) in r1pend[c] / r2pend[c]. */
#define BIT(s, a) (1 << (((a) - 1) * NS + (s)))
#define ALLSERVERS(a) (((1 << NS) - 1) << (((a) - 1) * NS))

/* Client phases. */
#define IDLE  0   /* between attempts (or before the first) */
#define WAIT1 1   /* round 1 sent, collecting replies */
#define WAIT2 2   /* round 2 sent, collecting confirmations */
#define HOLD  3   /* acquired: the command runs under fence t */
#define DONE  4   /* no attempts left */

/* Servers. */
byte key[NS];       /* 0 = free, else TOKEN(c, a) */
byte counter[NS];   /* durable fence counter, starts 0 */
#ifdef COUNTER_LOST
bool restarted;     /* one restart in the whole run */
#endif
#ifdef RESEED
byte clk;           /* the servers' clock (TIME in microseconds), ghost-scaled */
#endif

/* Clients: what each invocation keeps for its current attempt. */
byte phase[NC];
byte att[NC];       /* current attempt, 1..NA; 0 before the first */
byte yesmask[NC];   /* servers whose round-1 reply was received and was yes */
byte maxc[NC];      /* largest counter among the round-1 yes replies received */
byte minc[NC];      /* smallest, 0 before the first */
byte conf[NC];      /* round-2 oks received that count */
byte snap[NC];      /* ghost: maxdone when this attempt sent its round 1 */
byte tval[NC * NA]; /* t of attempt a of client c, at c * NA + a - 1 (late round 2s carry it) */

/* The network: requests sent and not yet executed (or never to be). */
short r1pend[NC];
short r2pend[NC];

/* Ghosts. */
int used;           /* bit f set: some acquisition succeeded with fence f */
byte maxdone;       /* max_completed_fence: highest fence of a success so far */
byte nsucc;         /* number of successes so far (REACH_SUCCESS2 only) */

#define YESCOUNT(c) (((yesmask[c] >> 0) & 1) + ((yesmask[c] >> 1) & 1) + \
                     ((yesmask[c] >> 2) & 1) + ((yesmask[c] >> 3) & 1) + \
                     ((yesmask[c] >> 4) & 1) + ((yesmask[c] >> 5) & 1) + \
                     ((yesmask[c] >> 6) & 1))

#ifdef LITERAL
#define COUNTS(c, s) (1)
#else
#define COUNTS(c, s) ((yesmask[c] & (1 << (s))) != 0)
#endif

/* Without LATE, requests not yet executed when the client stops waiting are
 * lost; with LATE they stay in flight and may run at any later moment. */
#ifdef LATE
#define DROP_PENDING(x) skip
#else
#define DROP_PENDING(x) x = 0
#endif

#define CUR_T(c) tval[(c) * NA + att[c] - 1]

/* Once no round 2 of attempt a of client c is pending any more and the
 * attempt is over, its t is of no use: zero it (keeps states canonical). */
inline forget_t(c, a) {
    if
    :: (r2pend[c] & ALLSERVERS(a)) == 0 && !(att[c] == a && phase[c] == WAIT2) ->
        tval[c * NA + a - 1] = 0
    :: else -> skip
    fi
}

#ifdef READ_ROUND1
#define R1_REPLY(s) (counter[s] + 1)
#define R1_WRITE(s) skip
#else
#define R1_REPLY(s) (counter[s])
#ifdef RESEED
/* A counter that is not there (0: a new name, or its record expired) starts from
 * the clock, or from 1 with the clock stepped back. */
#ifdef CLOCK_BACK
#define SEED 1
#else
#define SEED (clk + 1)
#endif
#define R1_WRITE(s) if :: counter[s] == 0 -> counter[s] = SEED :: else -> counter[s]++ fi; clk++
#else
#define R1_WRITE(s) counter[s]++
#endif
#endif

/* Round 1 of attempt a of client c, executed on server s (atomically). */
inline round1(c, s, a) {
    if
    :: key[s] == 0 ->
        key[s] = TOKEN(c, a);
        R1_WRITE(s);
        if
        :: phase[c] == WAIT1 && att[c] == a ->
            /* the yes reply arrives, with the counter */
            yesmask[c] = yesmask[c] | (1 << s);
            if
            :: R1_REPLY(s) > maxc[c] -> maxc[c] = R1_REPLY(s)
            :: else -> skip
            fi;
            if
            :: minc[c] == 0 || R1_REPLY(s) < minc[c] -> minc[c] = R1_REPLY(s)
            :: else -> skip
            fi
        :: true -> skip   /* the reply is lost (or nobody waits for it any more) */
        fi
    :: else -> skip       /* held: the reply says no, whether it arrives or not */
    fi;
    r1pend[c] = r1pend[c] & ~BIT(s, a)
}

/* Round 2 of attempt a of client c, executed on server s (atomically). */
inline round2(c, s, a) {
    if
    :: key[s] == TOKEN(c, a) && counter[s] <= tval[c * NA + a - 1] ->
        counter[s] = tval[c * NA + a - 1];
        /* reply ok: counted only while the client waits in this round of this
         * attempt, only from a server whose round-1 yes it received (COUNTS),
         * and it may be lost */
        if
        :: phase[c] == WAIT2 && att[c] == a && COUNTS(c, s) -> conf[c]++
        :: true -> skip
        fi
    :: else -> skip   /* reply fail: never counts */
    fi;
    r2pend[c] = r2pend[c] & ~BIT(s, a);
    forget_t(c, a)
}

/* The network link from client c to server s: runs pending requests. */
proctype Link(byte c; byte s) {
end:
    do
    :: atomic { (r1pend[c] & BIT(s, 1)) != 0 -> round1(c, s, 1) }
    :: atomic { (r2pend[c] & BIT(s, 1)) != 0 -> round2(c, s, 1) }
#if NA >= 2
    :: atomic { (r1pend[c] & BIT(s, 2)) != 0 -> round1(c, s, 2) }
    :: atomic { (r2pend[c] & BIT(s, 2)) != 0 -> round2(c, s, 2) }
#endif
#if NA >= 3
    :: atomic { (r1pend[c] & BIT(s, 3)) != 0 -> round1(c, s, 3) }
    :: atomic { (r2pend[c] & BIT(s, 3)) != 0 -> round2(c, s, 3) }
#endif
    od
}

/* Server s: its lock key expires at any moment; with COUNTER_LOST it may also
 * restart once with nothing (no persistence: key and counter gone). */
proctype Server(byte s) {
end:
    do
    :: atomic { key[s] != 0 -> key[s] = 0 }
#ifdef COUNTER_LOST
    :: atomic { !restarted -> key[s] = 0; counter[s] = 0; restarted = true }
#endif
#ifdef RESEED
    /* The record expires once the name is unused for its age. */
    :: atomic { key[s] == 0 && counter[s] != 0 -> counter[s] = 0 }
#endif
    od
}

/* Compare-and-delete on every server; each one may be lost. */
inline release(c) {
    i = 0;
    do
    :: i < NS ->
        if
        :: key[i] == TOKEN(c, att[c]) -> key[i] = 0
        :: true -> skip   /* lost */
        fi;
        i++
    :: else -> i = 0; break
    od
}

/* End of an attempt: forget its per-attempt state (keeps states canonical; the
 * late messages still pending keep their own t in tval). */
inline end_attempt(c) {
    yesmask[c] = 0; maxc[c] = 0; minc[c] = 0; conf[c] = 0; snap[c] = 0;
    phase[c] = IDLE;
    forget_t(c, att[c])
}

/* The attempt succeeded with fence t = CUR_T(c): check the two properties. */
inline succeed(c) {
    assert((used & (1 << CUR_T(c))) == 0);   /* 1. uniqueness */
    assert(CUR_T(c) > snap[c]);              /* 2. order */
    used = used | (1 << CUR_T(c));
    if
    :: CUR_T(c) > maxdone -> maxdone = CUR_T(c)
    :: else -> skip
    fi;
#ifdef REACH_SUCCESS2
    nsucc++;
    assert(nsucc < 2);
#endif
    phase[c] = HOLD;
#ifdef REACH_OVERLAP
    assert(!(phase[0] == HOLD && phase[1] == HOLD));
#endif
    yesmask[c] = 0; maxc[c] = 0; minc[c] = 0; conf[c] = 0; snap[c] = 0
}

proctype Client(byte c) {
    byte i;   /* loop index of release(); always 0 between steps */
    do
    :: atomic { phase[c] == IDLE && att[c] < NA ->
        /* new attempt, fresh token; send round 1 to every server */
        att[c]++;
        snap[c] = maxdone;
        r1pend[c] = r1pend[c] | ALLSERVERS(att[c]);
        phase[c] = WAIT1 }
    :: atomic { phase[c] == WAIT1 ->
        /* stop waiting, with whatever round-1 replies have arrived */
        DROP_PENDING(r1pend[c]);
        if
        :: YESCOUNT(c) < MAJ -> release(c); end_attempt(c)
        :: else ->
            CUR_T(c) = maxc[c];
#ifdef SKIP_ROUND2
            succeed(c)
#else
            if
#ifndef ALWAYS_ROUND2
            :: minc[c] == maxc[c] -> succeed(c)   /* every yes reply is t */
#endif
            :: else ->
                r2pend[c] = r2pend[c] | ALLSERVERS(att[c]);
                phase[c] = WAIT2
            fi
#endif
        fi }
    :: atomic { phase[c] == WAIT2 ->
        /* stop waiting for confirmations */
        DROP_PENDING(r2pend[c]);
        if
        :: conf[c] >= MAJ -> succeed(c)
        :: else -> release(c); end_attempt(c)
        fi }
    :: atomic { phase[c] == HOLD ->
        /* the command ran; release (or let the keys expire: each release may
         * be lost); the same invocation may then acquire again if attempts
         * are left (a retrying caller) */
        release(c); end_attempt(c) }
    :: atomic { phase[c] == IDLE && att[c] == NA -> phase[c] = DONE; break }
    od
}

init {
    byte c, s;
    atomic {
        c = 0;
        do
        :: c < NC ->
            run Client(c);
            s = 0;
            do
            :: s < NS -> run Link(c, s); s++
            :: else -> break
            od;
            c++
        :: else -> break
        od;
        s = 0;
        do
        :: s < NS -> run Server(s); s++
        :: else -> break
        od;
        c = 0; s = 0
    }
}
