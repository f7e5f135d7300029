"""Modes of run (contract "Modes of run (round 2)"): --max-hold."""

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


if __name__ == "__main__":
    unittest.main()
