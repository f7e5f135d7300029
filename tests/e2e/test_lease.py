"""The lease while PROGRAM runs: renewal, and what happens when it is lost."""

import os
import time
import unittest

from redlock_e2e import E2ETest, pid_alive, read_pid_file, wait_until

# PROGRAM for the loss tests: a shell that starts a grandchild, records both pids
# ($1 grandchild, $2 itself, each written atomically) and waits.
TREE_SCRIPT = r'''
sleep 100 &
echo $! > "$1.tmp" && mv "$1.tmp" "$1"
echo $$ > "$2.tmp" && mv "$2.tmp" "$2"
wait
'''

# GET and PTTL in one atomic step.
GET_AND_PTTL = "return {redis.call('get', KEYS[1]), redis.call('pttl', KEYS[1])}"


class LeaseTest(E2ETest):
    def setUp(self):
        super().setUp()
        self.server = self.redis_server()
        self.url = self.server.url()

    def start_tree(self, name, ttl):
        """redlock running TREE_SCRIPT under lock:NAME; returns (proc, [pids], token)."""
        gpid_file, pid_file = self.path("gpid"), self.path("pid")
        proc = self.start_redlock(["-s", self.url, "run", "-k", name, "-t", ttl, "--",
                                   "sh", "-c", TREE_SCRIPT, "sh", gpid_file, pid_file])
        gpid = read_pid_file(gpid_file, proc=proc)
        self.kill_at_cleanup(gpid)
        pid = read_pid_file(pid_file, proc=proc)
        self.kill_at_cleanup(pid)
        token = self.server.command("GET", "lock:" + name)
        self.assertRegex(token or "", r"^[0-9a-f]{32}$")
        return proc, [pid, gpid], token

    def assert_tree_gone_before(self, pids, deadline, proc):
        """Polls until every pid is gone; fails if any was seen alive at or after
        `deadline` (a monotonic time), i.e. after the lease could have expired."""
        last_alive = None
        give_up = time.monotonic() + 30.0
        while True:
            t = time.monotonic()  # taken before the check: alive means alive at >= t
            alive = [p for p in pids if pid_alive(p)]
            if not alive:
                break
            last_alive = t
            if t > give_up:
                self.fail(f"PROGRAM's processes {alive} still alive 30 s after the lease "
                          f"was lost; redlock stderr: {proc.stderr!r}")
            time.sleep(0.005)
        if last_alive is not None:
            self.assertLess(last_alive, deadline,
                            f"PROGRAM's tree was still running {last_alive - deadline:.3f}s "
                            "after the lease could have expired")

    def assert_lease_lost_exit(self, proc):
        self.assertEqual(proc.wait(30.0), 79, proc.stderr)
        self.assertMessages(proc.stderr)

    def test_the_lost_lease_is_said_before_program_reacts_to_term(self):
        ready = self.path("ready")
        proc = self.start_redlock(
            ["-s", self.url, "run", "-k", "said", "-t", "1s", "--", "sh", "-c",
             'trap "echo program got TERM >&2; exit 1" TERM; : > "$1"; '
             'while :; do sleep 0.05; done', "sh", ready])
        wait_until(lambda: os.path.exists(ready), 15, message="PROGRAM", proc=proc)
        self.server.command("SET", "lock:said", "someone-else")  # taken over
        self.assertEqual(proc.wait(30.0), 79, proc.stderr)
        err = proc.stderr
        self.assertIn("program got TERM", err)
        self.assertLess(err.index("lost the lock 'said'"), err.index("program got TERM"), err)

    def test_lease_is_renewed_while_program_runs(self):
        token_file, done = self.path("token"), self.path("done")
        proc = self.start_redlock(
            ["-s", self.url, "run", "-k", "renew", "-t", "1s", "--", "sh", "-c",
             'printf %s "$REDLOCK_TOKEN" > "$1.tmp" && mv "$1.tmp" "$1"; sleep 3; : > "$2"',
             "sh", token_file, done])
        wait_until(lambda: os.path.exists(token_file), proc=proc, message="PROGRAM to start")
        with open(token_file) as f:
            token = f.read()
        samples = 0
        with self.server.client() as c:
            while proc.poll() is None:
                finished = os.path.exists(done)  # checked before the sample
                value, pttl = c.execute("EVAL", GET_AND_PTTL, 1, "lock:renew")
                if not finished:
                    self.assertEqual(value, token, "the key lost our token while PROGRAM ran")
                    self.assertGreater(pttl, 0)
                    self.assertLessEqual(pttl, 1000, "a renewal extended beyond the ttl")
                    samples += 1
                time.sleep(0.02)
        self.assertEqual(proc.wait(), 0, proc.stderr)
        self.assertTrue(os.path.exists(done), "PROGRAM did not run to its end")
        self.assertGreater(samples, 10)
        self.assertKeyGone(self.server, "lock:renew")

    def test_frozen_server_stops_program_tree_before_the_lease_can_expire(self):
        proc, pids, _ = self.start_tree("frozen", "2s")
        self.server.freeze()
        frozen_at = time.monotonic()
        # Every renewal that reached the server did so before frozen_at.
        self.assert_tree_gone_before(pids, frozen_at + 2.0, proc)
        self.assert_lease_lost_exit(proc)

    def test_killed_server_stops_program_tree_before_the_lease_can_expire(self):
        proc, pids, _ = self.start_tree("killed", "2s")
        self.server.kill()
        killed_at = time.monotonic()
        self.assert_tree_gone_before(pids, killed_at + 2.0, proc)
        self.assert_lease_lost_exit(proc)

    def test_key_deleted_by_someone_else_stops_program(self):
        proc, pids, _ = self.start_tree("deleted", "3s")
        self.assertEqual(self.server.command("DEL", "lock:deleted"), 1)
        deleted_at = time.monotonic()
        self.assert_tree_gone_before(pids, deleted_at + 3.0, proc)
        self.assert_lease_lost_exit(proc)
        # Never re-created with SET.
        self.assertKeyGone(self.server, "lock:deleted")

    def test_key_taken_over_by_another_owner_stops_program_and_is_left_alone(self):
        proc, pids, _ = self.start_tree("stolen", "3s")
        self.server.command("SET", "lock:stolen", "othertoken", "PX", "60000")
        stolen_at = time.monotonic()
        self.assert_tree_gone_before(pids, stolen_at + 3.0, proc)
        self.assert_lease_lost_exit(proc)
        self.assertEqual(self.server.command("GET", "lock:stolen"), "othertoken")
        self.assertGreater(self.server.command("PTTL", "lock:stolen"), 3000)

    def test_server_restarted_empty_means_the_lease_is_lost(self):
        proc, pids, _ = self.start_tree("restarted", "2s")
        lost_at = time.monotonic()  # no renewal can succeed after this
        self.server.restart()
        self.assert_tree_gone_before(pids, lost_at + 2.0, proc)
        self.assert_lease_lost_exit(proc)
        self.assertKeyGone(self.server, "lock:restarted")


if __name__ == "__main__":
    unittest.main(verbosity=2)
