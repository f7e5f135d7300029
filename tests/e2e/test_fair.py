"""--fair: first come, first served among the --fair waiters of a name, over one
server and over five; a waiter that dies or gives up stops holding the line within
seconds; contenders without --fair are not held back."""

import os
import signal
import time
import unittest

from redlock_e2e import SLACK, E2ETest, pid_alive, wait_until

QUEUE = "{lock:job}:queue"
WAITING = "{lock:job}:waiting"


class FairTestBase(E2ETest):
    n_servers = 1

    def setUp(self):
        super().setUp()
        self.servers = [self.redis_server() for _ in range(self.n_servers)]
        self.args = []
        for s in self.servers:
            self.args += ["-s", s.url()]

    def queued(self):
        """How many waiters are in line, by the fullest server's count."""
        return max(int(s.command("ZCARD", QUEUE)) for s in self.servers)

    def start_fair(self, program, wait="60s", extra=()):
        return self.start_redlock(self.args + ["run", "-k", "job", "--fair", "-w", wait] +
                                  list(extra) + ["--"] + program)

    def enqueue(self, program, **kw):
        """Starts a --fair waiter and returns once it stands in line on every server."""
        before = self.queued()
        proc = self.start_fair(program, **kw)
        wait_until(lambda: min(int(s.command("ZCARD", QUEUE)) for s in self.servers) > before,
                   timeout=15.0, message="the waiter to join the queue", proc=proc)
        return proc

    def check_arrival_order(self, n=5):
        order = self.path("order")
        h = self.holder(["-k", "job", "-t", "1m"], global_args=self.args).wait_ready()
        waiters = []
        for i in range(n):
            waiters.append(self.enqueue(["sh", "-c", f"echo {i} >> '{order}'"]))
            time.sleep(0.15)  # started 150 ms apart, as users would
        self.assertEqual(h.release(), 0)
        for w in waiters:
            self.assertEqual(w.wait(60), 0, w.stderr)
        with open(order) as f:
            self.assertEqual(f.read().split(), [str(i) for i in range(n)])
        # Nothing left behind but the name's record, which expires: no ticket counter (a
        # ticket is one more than the queue's last).
        for s in self.servers:
            wait_until(lambda: s.command("KEYS", "*job*") == ["{lock:job}:fence"], 10,
                       message="only the record left")
            self.assertGreater(int(s.command("PTTL", "{lock:job}:fence")), 0)

    def check_a_place_seen_in_the_future_lapses(self):
        # A place whose last attempt is stamped in the future (a server's clock stepped
        # back, or a forged entry), as the scripts lay the queue out: ahead of everyone, and
        # its waiter gone. It lapses as a dead waiter's place does, within a few seconds,
        # not when the future comes.
        for s in self.servers:
            seconds, _ = s.command("TIME")
            s.command("ZADD", QUEUE, "1", "ghost")
            s.command("ZADD", WAITING, str((int(seconds) + 86400) * 1000), "ghost")
        started = time.monotonic()
        r = self.run_redlock(self.args + ["run", "-k", "job", "--fair", "-w", "30s", "--",
                                          "true"])
        self.assertEqual(r.returncode, 0, r.stderr)
        # 3 s after the place was first seen, and the heartbeat's second.
        self.assertLess(time.monotonic() - started, 3.0 + 3.0 * SLACK)
        for s in self.servers:
            self.assertEqual(int(s.command("EXISTS", QUEUE)), 0)


class FairOneServerTest(FairTestBase):
    def test_waiters_acquire_in_the_order_they_arrived(self):
        self.check_arrival_order()

    def test_the_progress_line_tells_the_place_in_line(self):
        h = self.holder(["-k", "job", "-t", "1m"], global_args=self.args).wait_ready()
        first = self.enqueue(["true"])
        second = self.enqueue(["true"])
        # Each says its place before the release (a loaded machine may print the second's
        # first line only once the first has the lock).
        wait_until(lambda: "; next in line;" in first.stderr, 15, message="first's place",
                   proc=first)
        wait_until(lambda: "; 1 ahead in line;" in second.stderr, 15, message="second's place",
                   proc=second)
        self.assertEqual(h.release(), 0)
        self.assertEqual(first.wait(30), 0)
        self.assertEqual(second.wait(30), 0)

    def test_a_killed_waiter_does_not_block_the_next(self):
        h = self.holder(["-k", "job", "-t", "1m"], global_args=self.args).wait_ready()
        dead = self.enqueue(["true"])
        alive = self.enqueue(["true"])
        dead.send_signal(signal.SIGKILL)
        dead.wait(10)
        killed_at = time.monotonic()
        self.assertEqual(h.release(), 0)
        self.assertEqual(alive.wait(30), 0, alive.stderr)
        # The dead waiter's place lapses 3 s after its last attempt (at most a heartbeat,
        # 1 s, before it was killed).
        self.assertLess(time.monotonic() - killed_at, 3.0 + 2.0 * SLACK)

    def test_a_place_seen_in_the_future_does_not_block_the_line(self):
        self.check_a_place_seen_in_the_future_lapses()

    def test_a_waiter_that_gives_up_leaves_the_line_at_once(self):
        h = self.holder(["-k", "job", "-t", "1m"], global_args=self.args).wait_ready()
        impatient = self.enqueue(["true"], wait="1s")
        patient = self.enqueue(["true"])
        self.assertEqual(impatient.wait(30), 75, impatient.stderr)
        self.assertEqual(self.queued(), 1)
        released_at = time.monotonic()
        self.assertEqual(h.release(), 0)
        self.assertEqual(patient.wait(30), 0, patient.stderr)
        # Woken by the release, not by the lapse of a dead place (3 s).
        self.assertLess(time.monotonic() - released_at, 2.0 * SLACK)

    def test_a_waiter_stopped_by_a_signal_leaves_the_line(self):
        h = self.holder(["-k", "job", "-t", "1m"], global_args=self.args).wait_ready()
        w = self.enqueue(["true"])
        w.send_signal(signal.SIGTERM)
        self.assertEqual(w.wait(30), 128 + signal.SIGTERM, w.stderr)
        self.assertEqual(self.queued(), 0)
        self.assertEqual(h.release(), 0)

    def test_contenders_without_fair_are_not_held_back(self):
        # A queued --fair waiter does not make the lock look held to a plain contender.
        h = self.holder(["-k", "job", "-t", "1m"], global_args=self.args).wait_ready()
        w = self.enqueue(["sleep", "30"])
        self.assertEqual(h.release(), 0)
        wait_until(lambda: int(self.servers[0].command("EXISTS", "lock:job")) == 1,
                   message="the fair waiter to acquire", proc=w)
        w.send_signal(signal.SIGTERM)
        w.wait(30)
        r = self.run_redlock(self.args + ["run", "-k", "job", "-n", "--", "true"])
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_acquire_takes_fair_too(self):
        h = self.holder(["-k", "job", "-t", "1m"], global_args=self.args).wait_ready()
        first = self.start_redlock(self.args + ["acquire", "-k", "job", "--fair", "-w", "30s"])
        wait_until(lambda: self.queued() == 1, message="acquire to queue", proc=first)
        second = self.enqueue(["true"])
        self.assertEqual(h.release(), 0)
        self.assertEqual(first.wait(30), 0, first.stderr)
        token = first.stdout.split()[0]
        self.assertTrue(pid_alive(second.pid))
        r = self.run_redlock(self.args + ["release", "-k", "job", "--token", token])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(second.wait(30), 0, second.stderr)

    def test_fair_and_no_wait_are_a_usage_error(self):
        r = self.run_redlock(self.args + ["run", "-k", "job", "--fair", "-n", "--", "true"])
        self.assertEqual(r.returncode, 64, r.stderr)
        self.assertIn("--fair", r.stderr)

    def test_a_fair_crowd_loses_no_update(self):
        counter = self.path("counter")
        with open(counter, "w") as f:
            f.write("0")
        script = f"n=$(cat '{counter}'); echo $((n + 1)) > '{counter}'"
        crowd = [self.start_fair(["sh", "-c", script]) for _ in range(8)]
        for p in crowd:
            self.assertEqual(p.wait(60), 0, p.stderr)
        with open(counter) as f:
            self.assertEqual(f.read().strip(), "8")


class FairFiveServersTest(FairTestBase):
    n_servers = 5

    def test_waiters_acquire_in_the_order_they_arrived(self):
        self.check_arrival_order()

    def test_a_place_seen_in_the_future_does_not_block_the_line(self):
        self.check_a_place_seen_in_the_future_lapses()

    def test_order_holds_with_a_server_down(self):
        self.servers[4].kill()
        self.servers = self.servers[:4]  # the queue as the live ones see it
        self.check_arrival_order(4)

    def test_a_killed_waiter_does_not_block_the_next(self):
        h = self.holder(["-k", "job", "-t", "1m"], global_args=self.args).wait_ready()
        dead = self.enqueue(["true"])
        alive = self.enqueue(["true"])
        os.kill(dead.pid, signal.SIGKILL)
        dead.wait(10)
        killed_at = time.monotonic()
        self.assertEqual(h.release(), 0)
        self.assertEqual(alive.wait(30), 0, alive.stderr)
        self.assertLess(time.monotonic() - killed_at, 3.0 + 2.0 * SLACK)


if __name__ == "__main__":
    unittest.main()
