"""Two or more owners: no-wait, bounded and unbounded waits, foreign locks, a crowd."""

import os
import time
import unittest

from redlock_e2e import SLACK, E2ETest, wait_until


class ContentionTest(E2ETest):
    def setUp(self):
        super().setUp()
        self.server = self.redis_server()
        self.url = self.server.url()

    def hold(self, name, *run_args):
        """A redlock holding lock:NAME, with its token checked in Redis."""
        h = self.holder(["-k", name, *run_args], global_args=["-s", self.url]).wait_ready()
        self.assertEqual(self.server.command("GET", "lock:" + name), h.token)
        return h

    def contend(self, name, *run_args, marker="ran", timeout=30.0):
        """A second `run` whose PROGRAM only creates a marker file."""
        marker_path = self.path(marker)
        r = self.run_redlock(["-s", self.url, "run", "-k", name, *run_args, "--",
                              "touch", marker_path], timeout=timeout)
        return r, os.path.exists(marker_path)

    def test_no_wait_on_a_held_lock_exits_75_without_running_program(self):
        h = self.hold("busy")
        for flags in (["-n"], ["--no-wait"], ["-w", "0"], ["--wait", "0"], ["-w", "0s"]):
            with self.subTest(flags=flags):
                # -n fails at once; the bound only tells "did not wait" from "waited".
                r, ran = self.contend("busy", *flags, timeout=20.0)
                self.assertStatus(r, 75)
                self.assertFalse(ran, "PROGRAM ran without the lock")
                self.assertLess(r.elapsed, 10.0 * SLACK)
                # The loser leaves the holder's key alone.
                self.assertEqual(self.server.command("GET", "lock:busy"), h.token)
        self.assertFalse(h.done)
        self.assertEqual(h.release(), 0)
        self.assertKeyGone(self.server, "lock:busy")

    def test_conflict_exit_code_replaces_75(self):
        h = self.hold("busy")
        for flags, expected in ((["-E", "9"], 9), (["--conflict-exit-code", "0"], 0),
                                (["-E", "255"], 255)):
            with self.subTest(flags=flags):
                r, ran = self.contend("busy", "-n", *flags)
                self.assertStatus(r, expected)
                self.assertFalse(ran)
        self.assertEqual(self.server.command("GET", "lock:busy"), h.token)
        self.assertEqual(h.release(), 0)

    def test_conflict_exit_code_does_not_change_the_status_of_a_run(self):
        r = self.run_redlock(["-s", self.url, "run", "-k", "free", "-n", "-E", "9", "--",
                              "sh", "-c", "exit 3"])
        self.assertStatus(r, 3)

    def test_bounded_wait_on_a_held_lock_gives_up_after_the_wait(self):
        h = self.hold("busy")
        r, ran = self.contend("busy", "-w", "300ms")
        self.assertStatus(r, 75)
        self.assertFalse(ran)
        self.assertGreaterEqual(r.elapsed, 0.25)
        self.assertLess(r.elapsed, 20.0 * SLACK)
        r, ran = self.contend("busy", "-w", "1.2")
        self.assertStatus(r, 75)
        self.assertFalse(ran)
        self.assertGreaterEqual(r.elapsed, 1.15)
        self.assertEqual(self.server.command("GET", "lock:busy"), h.token)
        self.assertEqual(h.release(), 0)

    def _waiter(self, name, *run_args):
        """A background contender whose PROGRAM records whether the holder had finished."""
        out = self.path("waiter-out")
        return self.start_redlock(
            ["-s", self.url, "run", "-k", name, *run_args, "--", "sh", "-c",
             'if [ -e "$1" ]; then echo after-holder > "$2"; else echo OVERLAP > "$2"; fi',
             "sh", self._holder.path("done"), out]), out

    def _check_waiter_acquires_after_release(self, *run_args):
        self._holder = self.hold("handoff")
        waiter, out = self._waiter("handoff", *run_args)
        # While the holder holds, the waiter must be waiting, not running.
        wait_until(lambda: waiter.poll() is not None or time.monotonic() - waiter.started > 1.0,
                   timeout=10.0, message="the waiter to wait a while")
        self.assertIsNone(waiter.poll(), f"waiter ended while the lock was held: {waiter.stderr!r}")
        self.assertFalse(os.path.exists(out))
        self.assertEqual(self._holder.release(), 0)
        self.assertEqual(waiter.wait(30.0), 0, waiter.stderr)
        with open(out) as f:
            self.assertEqual(f.read(), "after-holder\n")
        self.assertKeyGone(self.server, "lock:handoff")

    def test_wait_acquires_when_the_holder_releases(self):
        self._check_waiter_acquires_after_release("-w", "10s")

    def test_without_wait_options_it_waits_until_acquired(self):
        self._check_waiter_acquires_after_release()

    def test_a_foreign_lock_excludes_redlock_and_is_never_deleted(self):
        # What redis-py's Lock, redsync or node-redlock would write.
        self.assertEqual(self.server.command("SET", "lock:shared", "othertoken", "NX", "PX",
                                             "60000"), "OK")
        for flags in (["-n"], ["-w", "500ms"]):
            with self.subTest(flags=flags):
                r, ran = self.contend("shared", *flags)
                self.assertStatus(r, 75)
                self.assertFalse(ran)
                self.assertEqual(self.server.command("GET", "lock:shared"), "othertoken")
                pttl = self.server.command("PTTL", "lock:shared")
                self.assertGreater(pttl, 0)
                self.assertLessEqual(pttl, 60000)

    def test_waiting_on_a_foreign_lock_acquires_once_its_owner_deletes_it(self):
        self.server.command("SET", "lock:shared", "othertoken", "PX", "60000")
        marker = self.path("ran")
        waiter = self.start_redlock(["-s", self.url, "run", "-k", "shared", "-w", "20s", "--",
                                     "touch", marker])
        wait_until(lambda: waiter.poll() is not None or time.monotonic() - waiter.started > 0.5,
                   timeout=10.0, message="the waiter to wait a while")
        self.assertIsNone(waiter.poll(), waiter.stderr)
        self.assertFalse(os.path.exists(marker))
        # The foreign owner releases with compare-and-delete.
        self.assertEqual(self.server.command(
            "EVAL", "if redis.call('get', KEYS[1]) == ARGV[1] then "
                    "return redis.call('del', KEYS[1]) else return 0 end",
            1, "lock:shared", "othertoken"), 1)
        self.assertEqual(waiter.wait(30.0), 0, waiter.stderr)
        self.assertTrue(os.path.exists(marker))
        self.assertKeyGone(self.server, "lock:shared")

    def test_waiting_on_a_foreign_lock_acquires_once_it_expires(self):
        self.server.command("SET", "lock:expiring", "othertoken", "PX", "1000")
        marker = self.path("ran")
        r = self.run_redlock(["-s", self.url, "run", "-k", "expiring", "-w", "20s", "--",
                              "touch", marker])
        self.assertStatus(r, 0)
        self.assertTrue(os.path.exists(marker))

    def test_redlock_and_a_foreign_client_exclude_each_other(self):
        h = self.hold("mutual")
        # A SET NX client cannot take it while redlock holds it...
        self.assertIsNone(self.server.command("SET", "lock:mutual", "othertoken", "NX", "PX",
                                              "60000"))
        self.assertEqual(h.release(), 0)
        # ...and can once redlock released it.
        self.assertEqual(self.server.command("SET", "lock:mutual", "othertoken", "NX", "PX",
                                             "60000"), "OK")

    def test_different_names_do_not_contend(self):
        h = self.hold("one")
        r, ran = self.contend("two", "-n")
        self.assertStatus(r, 0)
        self.assertTrue(ran)
        self.assertEqual(h.release(), 0)

    def test_many_concurrent_contenders_lose_no_update(self):
        self.assertCrowdLosesNoUpdate(["-s", self.url], n=20, wait="90s")
        self.assertKeyGone(self.server, "lock:crowd")


if __name__ == "__main__":
    unittest.main(verbosity=2)
