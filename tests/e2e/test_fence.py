"""Fencing tokens and pauses: REDLOCK_FENCE only grows, and a paused redlock cannot leave
PROGRAM running past its lease.

Over one server and Redlock over five, with servers killed and restarted empty, frozen,
and holders paused (SIGSTOP) past their TTL. The fenced register is the pattern the
docs/safety.md documents: a file guarded by flock(1) that refuses a fence not larger than the
last one it accepted.
"""

import json
import os
import random
import re
import signal
import time
import unittest

from redlock_e2e import E2ETest, SLACK, kill_quietly, pid_alive, read_pid_file, wait_until

# $1 register, $2 fence, $3 log: accept the write only with a larger fence (atomically,
# under flock), and log "accepted F" or "refused F".
REGISTER = r'''
exec 9>>"$1.lock"
flock 9
last=$(cat "$1" 2>/dev/null || echo 0)
if [ "$2" -gt "$last" ]; then
    echo "$2" > "$1"; echo "accepted $2" >> "$3"
else
    echo "refused $2" >> "$3"; exit 1
fi
'''

# PROGRAM: records its fence, then writes it to the register ($1 dir).
FENCED_JOB = r'''
d=$1
echo "$REDLOCK_FENCE" >> "$d/fences"
sh -c "$REGISTER" sh "$d/register" "$REDLOCK_FENCE" "$d/log"
'''


def proc_state(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return None
    return stat[stat.rindex(b")") + 2:][:1].decode()


def voluntary_switches(pid):
    """How often process `pid` has gone to sleep (or stopped): a count that grows once it
    has run and blocked again."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    return 0


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except FileNotFoundError:
        return []


class FenceTestBase(E2ETest):
    def servers(self, n, **options):
        self.redis = [self.redis_server(**options) for _ in range(n)]
        self.global_args = [a for s in self.redis for a in ("-s", s.url())]

    def run_fenced(self, n, wait="60s"):
        """n concurrent fenced jobs; returns the fences in the order they held the lock."""
        d = self.mkdtemp("fenced-")
        env = self.env({"REGISTER": REGISTER})
        procs = [self.start_redlock(self.global_args + [
            "run", "-k", "fenced", "-w", wait, "--", "sh", "-c", FENCED_JOB, "sh", d],
            env=env) for _ in range(n)]
        for p in procs:
            self.assertEqual(p.wait(120), 0, p.stderr)
        with open(f"{d}/fences") as f:
            fences = [int(x) for x in f.read().split()]
        with open(f"{d}/log") as f:
            log = f.read().split("\n")
        self.assertNotIn("refused", " ".join(log), log)
        return fences

    def assertIncreasing(self, fences):
        self.assertTrue(all(b > a for a, b in zip(fences, fences[1:])),
                        f"fences not strictly increasing: {fences}")
        self.assertGreaterEqual(fences[0], 1)

    def fence_of_run(self, extra=()):
        r = self.run_redlock(self.global_args + ["run", "-k", "seq", *extra, "--", "sh", "-c",
                                                 'echo "$REDLOCK_FENCE"'])
        self.assertStatus(r, 0)
        return int(r.stdout)


class SingleServerFenceTest(FenceTestBase):
    def setUp(self):
        super().setUp()
        self.servers(1)

    def test_sequential_runs_get_consecutive_fences_from_the_servers_clock(self):
        # A new name's counter starts from the server's TIME in microseconds.
        t = self.redis[0].command("TIME")
        before = int(t[0]) * 1000000 + int(t[1])
        fences = [self.fence_of_run() for _ in range(3)]
        self.assertGreaterEqual(fences[0], before)
        self.assertLess(fences[0], before + 600 * 1000000 * SLACK)
        self.assertEqual(fences, [fences[0], fences[0] + 1, fences[0] + 2])
        self.assertEqual(self.redis[0].command("HGET", "{lock:seq}:fence", "f"), str(fences[2]))
        # The record expires with the history's age (30 days and a sixteenth), never lives
        # forever.
        pttl = self.redis[0].command("PTTL", "{lock:seq}:fence")
        self.assertGreater(pttl, 30 * 86400000)
        self.assertLessEqual(pttl, 30 * 86400000 * 17 // 16)

    def test_contended_runs_hold_the_lock_in_fence_order(self):
        fences = self.run_fenced(8)
        self.assertEqual(sorted(fences), list(range(min(fences), min(fences) + 8)))
        self.assertIncreasing(fences)

    def test_acquire_prints_the_fence_and_status_shows_it(self):
        r = self.run_redlock(self.global_args + ["acquire", "--json", "-t", "1m", "a"])
        self.assertStatus(r, 0)
        doc = json.loads(r.stdout)
        one = doc["fence"]
        r = self.run_redlock(self.global_args + ["status", "--json", "a"])
        lock = json.loads(r.stdout)["locks"][0]
        self.assertEqual(lock["fence"], one)
        self.assertEqual(lock["servers"][0]["fence"], one)
        r = self.run_redlock(self.global_args + ["status", "a"])
        self.assertIn(f"fence     {one}", r.stdout)
        self.run_redlock(self.global_args + ["release", "a", "--token", doc["token"]])
        r = self.run_redlock(self.global_args + ["acquire", "--shell", "-t", "1m", "a"])
        self.assertStatus(r, 0)
        self.assertIn(f"REDLOCK_FENCE='{one + 1}'; export REDLOCK_FENCE", r.stdout)
        self.assertIn("REDLOCK_KEY='a'; export REDLOCK_KEY", r.stdout)
        r = self.run_redlock(self.global_args + ["status", "a"])
        self.assertIn(f"fence     {one + 1}", r.stdout)
        # The plain output is the token alone, as scripts capture it.
        r = self.run_redlock(self.global_args + ["acquire", "-t", "1m", "b"])
        self.assertRegex(r.stdout, r"^[0-9a-f]{32}\n$")
        # Releasing by force keeps the counter: the next fence is still larger.
        r = self.run_redlock(self.global_args + ["release", "--force", "--yes", "a"])
        self.assertStatus(r, 0)
        self.assertEqual(self.redis[0].command("HGET", "{lock:a}:fence", "f"), str(one + 1))
        r = self.run_redlock(self.global_args + ["status", "a"])
        self.assertIn(f"a: free (last fence {one + 1})", r.stdout)

    def test_a_counter_that_is_not_a_number_is_refused_and_never_restarts_at_one(self):
        self.redis[0].command("SET", "{lock:seq}:fence", "banana")
        r = self.run_redlock(self.global_args + ["run", "-k", "seq", "--", "true"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("is not a number", r.stderr)
        self.assertKeyGone(self.redis[0], "lock:seq")


class RedlockFenceTest(FenceTestBase):
    def setUp(self):
        super().setUp()
        self.servers(5)

    def test_sequential_runs_increase_over_five_servers(self):
        fences = [self.fence_of_run() for _ in range(4)]
        self.assertIncreasing(fences)
        # Written on a majority at least (stragglers are not waited for).
        counters = [s.command("HGET", "{lock:seq}:fence", "f") for s in self.redis]
        self.assertGreaterEqual(counters.count(str(fences[-1])), 3, counters)

    def test_contended_runs_over_five_servers(self):
        fences = self.run_fenced(8)
        self.assertIncreasing(fences)
        self.assertEqual(len(set(fences)), 8)

    def restart_two_empty(self):
        """Restarts two servers with their counters lost, keeping the last fence on a
        majority. The last fence is written to a majority only (those that said yes in
        time), so losing it on more than N - majority of its copies may repeat fences:
        what durable counters are for (redlock(1) SAFETY; the model's COUNTER_LOST)."""
        counters = [int(s.command("HGET", "{lock:seq}:fence", "f") or 0) for s in self.redis]
        top = max(counters)
        holders = [s for s, c in zip(self.redis, counters) if c == top]
        others = [s for s, c in zip(self.redis, counters) if c != top]
        for s in (others + holders[:max(len(holders) - 3, 0)])[:2]:
            s.restart()

    def test_two_servers_restarted_empty_do_not_send_fences_back(self):
        before = [self.fence_of_run() for _ in range(3)]
        self.restart_two_empty()
        after = [self.fence_of_run() for _ in range(3)]
        self.assertIncreasing(before + after)
        self.restart_two_empty()
        later = [self.fence_of_run() for _ in range(2)]
        self.assertIncreasing(before + after + later)

    def test_any_minority_restarted_empty_once_the_fence_reached_every_server(self):
        # Round 2 goes to every server that said yes in time: normally all five, and then
        # any two may lose their counters. Fewer copies (a server slow past the grace)
        # tolerate fewer losses, as -v and redlock(1) SAFETY say: copies - 3 of them.
        fences = []
        for _ in range(4):
            r = self.run_redlock(self.global_args + ["-v", "run", "-k", "seq", "--", "sh", "-c",
                                                     'echo "$REDLOCK_FENCE"'])
            self.assertStatus(r, 0)
            fences.append(int(r.stdout))
            m = re.search(r"fence (\d+) sent to (\d) of 5 servers", r.stderr)
            self.assertIsNotNone(m, r.stderr)
            self.assertEqual(int(m.group(1)), fences[-1])
            copies = int(m.group(2))
            self.assertGreaterEqual(copies, 3)
            key = "{lock:seq}:fence"
            wait_until(lambda: sum(s.command("HGET", key, "f") == m.group(1)
                                   for s in self.redis) >= copies, 10)
            # The worst case: the servers that hold the last fence lose it.
            holders = [s for s in self.redis if s.command("HGET", key, "f") == m.group(1)]
            for s in holders[:copies - 3]:
                s.restart()
        self.assertIncreasing(fences)

    def test_two_servers_down_and_one_frozen_still_increase(self):
        first = self.fence_of_run()
        self.redis[0].kill()
        self.redis[1].freeze()
        second = self.fence_of_run(["-w", "10s"])
        self.redis[1].thaw()
        self.redis[1].kill()
        self.redis[0].restart()
        self.redis[1].restart()
        self.redis[2].freeze()
        third = self.fence_of_run(["-w", "10s"])
        self.redis[2].thaw()
        self.assertIncreasing([first, second, third])


class StoppedRedlockTest(FenceTestBase):
    """For tests that SIGSTOP and SIGCONT redlock itself. Under ASan, LeakSanitizer's leak
    check at exit stops the world with a ptrace tracer thread, and in a process that was
    stopped and continued that tracer was seen to never report, leaving redlock spinning
    in sched_yield after it had decided its exit status (1 run in 4). So these processes
    run without the leak check; every other test keeps it, over the same code."""

    def env(self, extra=None):
        env = super().env(extra)
        if "ASAN_OPTIONS" in env:
            env["ASAN_OPTIONS"] = env["ASAN_OPTIONS"].replace("detect_leaks=1", "detect_leaks=0")
        return env


class PauseTest(StoppedRedlockTest):
    """SIGSTOP of a holder past its TTL."""

    def setUp(self):
        super().setUp()
        self.servers(1)

    def start_holder(self, name, ttl="2s"):
        d = self.mkdtemp("holder-")
        script = 'echo $$ > "$1/pid.tmp" && mv "$1/pid.tmp" "$1/pid"; exec sleep 60'
        proc = self.start_redlock(self.global_args + ["run", "-k", name, "-t", ttl, "--", "sh",
                                                      "-c", script, "sh", d])
        program = read_pid_file(f"{d}/pid", proc=proc)
        self.kill_at_cleanup(program)
        return proc, program

    def watchdog_of(self, redlock, program):
        dogs = [p for p in children(redlock) if p != program]
        self.assertEqual(len(dogs), 1, f"children of redlock: {children(redlock)}")
        return dogs[0]

    def stop(self, pid):
        os.kill(pid, signal.SIGSTOP)
        wait_until(lambda: proc_state(pid) == "T", 10, message=f"{pid} to stop")
        self.addCleanup(kill_quietly, pid, signal.SIGCONT)

    def test_a_stopped_redlock_cannot_leave_program_running_past_the_lease(self):
        proc, program = self.start_holder("pause")
        self.stop(proc.pid)

        # A second client polls until it gets the lock; by then PROGRAM must be dead.
        def second_gets_it():
            r = self.run_redlock(self.global_args + [
                "run", "-n", "-k", "pause", "--", "sh", "-c",
                f"s=$(sed 's/.*) //' /proc/{program}/stat 2>/dev/null | cut -c1); "
                '[ -z "$s" ] || [ "$s" = Z ] && echo dead || echo alive'])
            return r if r.returncode == 0 else None
        r = wait_until(second_gets_it, 20, interval=0.05, message="the second client")
        self.assertEqual(r.stdout.strip(), "dead", "first PROGRAM ran on past the lease")
        self.assertFalse(pid_alive(program))
        # Continued, redlock notices and reports the lost lease.
        os.kill(proc.pid, signal.SIGCONT)
        self.assertEqual(proc.wait(30), 79)
        self.assertIn("stopped or starved", proc.stderr)

    def test_a_stopped_redlock_leaves_no_daemon_of_program_running_past_the_lease(self):
        # A process that left PROGRAM's group and session is not reached by a kill of the
        # group: the watchdog finds it among redlock's descendants (its own /proc scan).
        d = self.mkdtemp("daemon-")
        script = ('setsid sh -c \'echo $$ > "$1/d.tmp" && mv "$1/d.tmp" "$1/daemon"; '
                  'exec sleep 60\' sh "$1" & exec sleep 60')
        proc = self.start_redlock(self.global_args + ["run", "-k", "daemon", "-t", "2s", "--",
                                                      "sh", "-c", script, "sh", d])
        daemon = read_pid_file(f"{d}/daemon", proc=proc)
        self.kill_at_cleanup(daemon)
        self.stop(proc.pid)
        wait_until(lambda: not pid_alive(daemon), 20, message="the watchdog to kill the daemon")
        os.kill(proc.pid, signal.SIGCONT)
        self.assertEqual(proc.wait(30), 79)

    def test_redlock_and_program_stopped_are_both_handled_by_the_watchdog(self):
        proc, program = self.start_holder("both")
        self.stop(proc.pid)
        self.stop(program)
        wait_until(lambda: not pid_alive(program), 20, message="the watchdog to kill PROGRAM")
        os.kill(proc.pid, signal.SIGCONT)
        self.assertEqual(proc.wait(30), 79)
        self.assertKeyGone(self.redis[0], "lock:both")

    def test_a_watchdog_stopped_past_the_lease_acts_on_the_latest_deadlines(self):
        # While the watchdog is stopped, redlock renews and sends it a deadline per
        # renewal. Continued, it must go by the latest one (the lease is healthy), not by
        # the oldest queued, whose time has long passed.
        # A 3 s lease: one of 1 s lapsed on a loaded machine (renewals late by a second),
        # and then the watchdog is right to kill.
        holder = self.holder(["-k", "dog", "-t", "3s"],
                             global_args=self.global_args).wait_ready()
        proc, program = holder.proc, holder.program_pid
        dog = self.watchdog_of(proc.pid, program)
        self.stop(dog)
        # Renewals go every third of the lease: after six of them, the deadlines the
        # watchdog had (and the first ones queued) are more than a lease in the past.
        renewals = lambda: int(self.redis[0].commandstats().get("evalsha", {}).get("calls", 0))
        first = renewals()
        wait_until(lambda: renewals() >= first + 6, 30, message="six renewals")
        switches = voluntary_switches(dog)
        os.kill(dog, signal.SIGCONT)
        # Once it has read its queue and gone back to sleep, PROGRAM must still run.
        wait_until(lambda: voluntary_switches(dog) > switches, 10,
                   message="the watchdog to run and sleep again")
        self.assertTrue(pid_alive(program), "the continued watchdog killed a healthy PROGRAM")
        self.assertEqual(holder.release(), 0, proc.stderr)

    def test_a_whole_host_pause_is_caught_by_the_fence(self):
        # Everything of the first holder stopped, watchdog included: what no local
        # mechanism can catch (a paused VM). The second holder's fence is larger, and the
        # register refuses the first one's late write.
        d = self.mkdtemp("fenced-")
        env = self.env({"REGISTER": REGISTER})
        job = ('echo $$ > "$1/pid.tmp" && mv "$1/pid.tmp" "$1/pid"; '
               'while [ ! -e "$1/go" ]; do sleep 0.02; done; ' + FENCED_JOB)
        first = self.start_redlock(self.global_args + [
            "run", "-k", "host", "-t", "1s", "--", "sh", "-c", job, "sh", d], env=env)
        program = read_pid_file(f"{d}/pid", proc=first)
        dog = self.watchdog_of(first.pid, program)
        for pid in (dog, first.pid, program):
            self.stop(pid)
        second = self.run_redlock(self.global_args + [
            "run", "-k", "host", "-w", "20s", "--", "sh", "-c", FENCED_JOB, "sh", d], env=env)
        self.assertStatus(second, 0)
        open(f"{d}/go", "w").close()
        for pid in (program, dog, first.pid):  # the host wakes up
            os.kill(pid, signal.SIGCONT)
        self.assertEqual(first.wait(30), 79)
        with open(f"{d}/log") as f:
            log = f.read().split()
        with open(f"{d}/fences") as f:
            fences = [int(x) for x in f.read().split()]
        self.assertEqual(log[:2], ["accepted", str(fences[0])])
        # The stale holder, if it got to write at all before it was stopped, was refused.
        self.assertNotIn(f"accepted 1", " ".join(log[2:]))
        if len(log) > 2:
            self.assertEqual(log[2:], ["refused", "1"])


class FencedRegisterUnderPausesTest(StoppedRedlockTest):
    """Many clients write a fenced register while servers and clients are paused: no two
    holders share a fence, every write the register accepted had a larger fence than the
    one before, and everything that was refused was older than what it had accepted."""

    def test_many_clients_with_servers_and_holders_paused(self):
        seed = int(os.environ.get("REDLOCK_SEED", random.randrange(1 << 30)))
        rnd = random.Random(seed)
        self.servers(3)
        d = self.mkdtemp("fenced-")
        env = self.env({"REGISTER": REGISTER})
        job = 'sleep 0.$(( $$ % 3 )); ' + FENCED_JOB
        procs = []
        for i in range(12):
            procs.append(self.start_redlock(self.global_args + [
                "run", "-k", "reg", "-t", "600ms", "-w", "60s", "--", "sh", "-c", job, "sh",
                d], env=env))
            # The nemesis, between starts: freeze a minority server for a while, or stop a
            # client (holder or waiter) past its TTL together with its whole tree.
            if rnd.random() < 0.5:
                victim = rnd.choice(self.redis)
                victim.freeze()
                time.sleep(rnd.uniform(0.1, 0.8))
                victim.thaw()
            else:
                p = rnd.choice(procs)
                tree = [p.pid] + children(p.pid)
                for pid in tree:
                    kill_quietly(pid, signal.SIGSTOP)
                time.sleep(rnd.uniform(0.2, 1.0))
                for pid in tree:
                    kill_quietly(pid, signal.SIGCONT)
        statuses = [p.wait(120) for p in procs]
        for st, p in zip(statuses, procs):
            self.assertIn(st, (0, 1, 79), f"seed {seed}: {p.stderr}")
        with open(f"{d}/fences") as f:
            fences = [int(x) for x in f.read().split()]
        self.assertEqual(len(fences), len(set(fences)), f"seed {seed}: shared fence {fences}")
        with open(f"{d}/log") as f:
            log = [line.split() for line in f.read().splitlines()]
        accepted = [int(f) for verdict, f in log if verdict == "accepted"]
        self.assertEqual(accepted, sorted(accepted), f"seed {seed}: {log}")
        for verdict, f in log:
            if verdict == "refused":
                self.assertLess(int(f), max(accepted), f"seed {seed}: {log}")
        # Every client that ended 0 wrote and was accepted (nothing lost); a client that
        # wrote and was accepted may still have lost its lease afterwards (stopped by the
        # nemesis past its TTL), so 79s can add accepted writes, nothing else can.
        self.assertLessEqual(statuses.count(0), len(accepted), f"seed {seed}: {log} {statuses}")
        self.assertLessEqual(len(accepted), statuses.count(0) + statuses.count(79),
                             f"seed {seed}: {log} {statuses}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
