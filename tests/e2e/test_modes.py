"""Modes of run (contract "Modes of run (round 2)"): --max-hold, --min-validity,
--min-hold."""

import os
import time
import unittest

from redlock_e2e import SLACK, E2ETest, pid_alive, read_pid_file, wait_until


class MaxHoldTest(E2ETest):
    def setUp(self):
        super().setUp()
        self.server = self.redis_server()
        self.url = self.server.url()

    def run_held(self, *args, timeout=30):
        return self.run_redlock(["-s", self.url, "run", "-k", "mh", *args], timeout=timeout)

    def test_a_program_that_runs_too_long_is_stopped_and_run_exits_124(self):
        pid_file = self.path("pid")
        started = time.monotonic()
        r = self.run_held("--max-hold", "500ms", "--", "sh", "-c",
                          'echo $$ > "$1.tmp" && mv "$1.tmp" "$1"; exec sleep 30', "sh",
                          pid_file)
        took = time.monotonic() - started
        self.assertStatus(r, 124)
        self.assertIn("PROGRAM ran for 500ms (--max-hold); stopping it", r.stderr)
        self.assertMessages(r.stderr)
        self.assertFalse(pid_alive(read_pid_file(pid_file)))
        self.assertLess(took, 20 * SLACK)  # not the program's 30 s
        self.assertKeyGone(self.server, "lock:mh")

    def test_a_program_that_ignores_term_is_killed_after_the_grace(self):
        # -t 1s: the grace is a third of it; KILL follows TERM by that.
        r = self.run_held("-t", "1s", "--max-hold", "300ms", "--", "sh", "-c",
                          'trap "" TERM; sleep 30 & wait; wait')
        self.assertStatus(r, 124)
        self.assertKeyGone(self.server, "lock:mh")

    def test_the_lease_is_renewed_until_the_program_is_stopped(self):
        # Held past several TTLs: the lock holds our token all along.
        tokens = self.path("tokens")
        r = self.run_held("-t", "300ms", "--max-hold", "1500ms", "--", "sh", "-c",
                          'while :; do redis-cli -p "$1" GET lock:mh >> "$2"; sleep 0.1; done',
                          "sh", str(self.server.port), tokens)
        self.assertStatus(r, 124)
        with open(tokens) as f:
            seen = [line.strip() for line in f if line.strip()]
        self.assertGreater(len(seen), 5, seen)
        self.assertEqual(len(set(seen)), 1, seen)  # one token, never lost or gone
        self.assertRegex(seen[0], r"^[0-9a-f]{32}$")

    def test_a_program_that_ends_in_time_keeps_its_own_status(self):
        r = self.run_held("--max-hold", "10s", "--", "sh", "-c", "exit 3")
        self.assertStatus(r, 3)
        self.assertEqual(r.stderr, "")

    def test_bad_values_are_usage_errors(self):
        for value in ("0", "-1s", "soon", ""):
            with self.subTest(value=value):
                r = self.run_held(f"--max-hold={value}", "--", "true")
                self.assertStatus(r, 64)
                self.assertMessages(r.stderr)


class MinValidityTest(E2ETest):
    def setUp(self):
        super().setUp()
        self.server = self.redis_server()

    def test_too_little_validity_left_is_not_acquired_and_the_lock_is_released(self):
        # 150 ms each way: an acquisition takes at least 300 ms of a 1 s lease.
        proxy = self.delay_proxy(self.server, 0.15)
        marker = self.path("ran")
        for wait in (["-n"], ["-w", "1s"]):
            with self.subTest(wait=wait):
                r = self.run_redlock(["-s", proxy.url(), "run", "-k", "mv", "-t", "1s",
                                      "--min-validity", "900ms", *wait, "--", "touch", marker],
                                     timeout=30)
                self.assertStatus(r, 75)
                self.assertIn("was not acquired with at least 900ms of validity left", r.stderr)
                self.assertFalse(os.path.exists(marker))
                self.assertKeyGone(self.server, "lock:mv")
        # -E applies as to any lock not acquired.
        r = self.run_redlock(["-s", proxy.url(), "run", "-k", "mv", "-t", "1s",
                              "--min-validity", "900ms", "-n", "-E", "3", "--", "true"])
        self.assertStatus(r, 3)

    def test_enough_validity_left_runs_program(self):
        r = self.run_redlock(["-s", self.server.url(), "run", "-k", "mv", "-t", "10s",
                              "--min-validity", "5s", "--", "sh", "-c", "exit 4"])
        self.assertStatus(r, 4)

    def test_a_min_validity_the_ttl_cannot_give_is_a_usage_error(self):
        for args in (["-t", "1s", "--min-validity", "1s"], ["--min-validity", "30s"],
                     ["--min-validity", "soon"]):
            with self.subTest(args=args):
                r = self.run_redlock(["-s", self.server.url(), "run", "-k", "mv", *args, "--",
                                      "true"])
                self.assertStatus(r, 64)
                self.assertMessages(r.stderr)


class MinHoldTest(E2ETest):
    def setUp(self):
        super().setUp()
        self.server = self.redis_server()
        self.url = self.server.url()

    def test_a_short_program_leaves_the_lock_held_for_the_rest_of_min_hold(self):
        # The cron case: host B, a little late, must not run the slot's job again.
        r = self.run_redlock(["-s", self.url, "run", "-k", "slot", "--min-hold", "2s", "--",
                              "true"])
        self.assertStatus(r, 0)
        self.assertEqual(r.stderr, "")
        pttl = int(self.server.command("PTTL", "lock:slot"))
        self.assertGreater(pttl, 0)
        self.assertLessEqual(pttl, 2000)
        late = self.run_redlock(["-s", self.url, "run", "-k", "slot", "-n", "--", "true"])
        self.assertStatus(late, 75)
        # Then it simply expires, and the lock is free again.
        wait_until(lambda: self.server.command("EXISTS", "lock:slot") == 0, 10,
                   message="the lock to expire")
        r = self.run_redlock(["-s", self.url, "run", "-k", "slot", "-n", "--", "true"])
        self.assertStatus(r, 0)

    def test_a_program_longer_than_min_hold_is_released_at_its_end(self):
        r = self.run_redlock(["-s", self.url, "run", "-k", "long", "--min-hold", "200ms", "--",
                              "sleep", "0.5"])
        self.assertStatus(r, 0)
        self.assertEqual(self.server.command("EXISTS", "lock:long"), 0)

    def test_program_status_is_kept(self):
        r = self.run_redlock(["-s", self.url, "run", "-k", "st", "--min-hold", "1s", "--",
                              "sh", "-c", "exit 5"])
        self.assertStatus(r, 5)


if __name__ == "__main__":
    unittest.main()
