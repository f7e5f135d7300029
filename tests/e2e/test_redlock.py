"""Redlock end to end: `redlock run` over five redis-servers given with repeated -s, with
faults injected for real (SIGSTOP, SIGKILL) while PROGRAM runs."""

import os
import time
import unittest

from redlock_e2e import SLACK, E2ETest, pid_alive, wait_until

N = 5


class RedlockTest(E2ETest):
    def setUp(self):
        super().setUp()
        self.servers = [self.redis_server() for _ in range(N)]
        self.global_args = []
        for s in self.servers:
            self.global_args += ["-s", s.url()]

    def name_of(self, server):
        return f"127.0.0.1:{server.port}"

    def holding(self, key, token):
        """The servers (running, not frozen) whose KEY holds TOKEN."""
        return [s for s in self.servers
                if s.proc is not None and not s.frozen and s.command("GET", key) == token]

    def test_run_over_five_servers_holds_the_lock_on_a_majority(self):
        h = self.holder(["-k", "five"], global_args=self.global_args).wait_ready()
        self.assertRegex(h.token, r"^[0-9a-f]{32}$")
        self.assertEqual(h.key, "five")
        self.assertGreaterEqual(len(self.holding("lock:five", h.token)), 3)
        # A second contender over the same five servers is refused.
        r = self.run_redlock(self.global_args + ["run", "-k", "five", "-n", "--", "true"])
        self.assertStatus(r, 75)
        self.assertEqual(h.release(), 0)
        wait_until(lambda: not self.holding("lock:five", h.token), timeout=10.0,
                   message="the lock to be released on every server")

    def test_freezing_three_servers_stops_program_within_the_ttl(self):
        h = self.holder(["-k", "frozen", "-t", "2s"],
                        global_args=self.global_args).wait_ready()
        program = h.program_pid
        self.kill_at_cleanup(program)
        frozen_at = time.monotonic()
        for s in self.servers[:3]:
            s.freeze()
        # The lease was last renewed before the freeze, so it can be trusted at most until
        # frozen_at + ttl; PROGRAM must be gone by then (plus scheduling slack).
        deadline = frozen_at + 2.0 + 0.5 * SLACK
        last_alive = None
        give_up = time.monotonic() + 30.0 * SLACK
        while pid_alive(program):
            last_alive = time.monotonic()
            self.assertLess(last_alive, give_up, f"PROGRAM still alive: {h.proc.stderr!r}")
            time.sleep(0.005)
        if last_alive is not None:
            self.assertLess(last_alive, deadline,
                            f"PROGRAM ran {last_alive - frozen_at:.3f}s after the freeze")
        self.assertEqual(h.proc.wait(30.0), 79, h.proc.stderr)
        self.assertFalse(h.done, "PROGRAM finished by itself instead of being stopped")
        self.assertMessages(h.proc.stderr)

    def test_renewal_keeps_working_when_one_server_is_killed_mid_run(self):
        started = self.path("started")
        proc = self.start_redlock(self.global_args + [
            "run", "-k", "survivor", "-t", "1s", "--", "sh", "-c",
            ': > "$1"; sleep 3', "sh", started])
        wait_until(lambda: os.path.exists(started), timeout=15.0, proc=proc,
                   message="PROGRAM to start")
        self.servers[1].kill()
        # Three seconds is three TTLs: without renewals on the four survivors it would be
        # lost.
        self.assertEqual(proc.wait(30.0), 0, proc.stderr)

    def test_three_servers_killed_exits_69_without_running_program(self):
        dead = self.servers[0::2]  # 0, 2, 4
        for s in dead:
            s.kill()
        marker = self.path("ran")
        r = self.run_redlock(self.global_args + ["run", "-k", "down", "-w", "60s", "--",
                                                 "touch", marker])
        self.assertStatus(r, 69)
        self.assertFalse(os.path.exists(marker), "PROGRAM ran without a quorum")
        # Unreachable servers are not waited on, even with -w.
        self.assertLess(r.elapsed, 20.0 * SLACK)
        self.assertMessages(r.stderr)
        for s in dead:
            self.assertIn(self.name_of(s), r.stderr)
        # Whatever the attempt set on the two live servers was released, well before its TTL.
        for s in self.servers[1::2]:
            wait_until(lambda: s.command("EXISTS", "lock:down") == 0, timeout=10.0,
                       message="lock:down to be gone on the live servers")

    def test_many_concurrent_runs_over_five_servers_lose_no_update(self):
        self.assertCrowdLosesNoUpdate(self.global_args, n=10, wait="60s")
        for s in self.servers:
            wait_until(lambda: s.command("EXISTS", "lock:crowd") == 0, timeout=10.0,
                       message="lock:crowd to be gone")


if __name__ == "__main__":
    unittest.main(verbosity=2)
