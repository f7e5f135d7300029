"""Servers that do not answer: releases do not sit on a server that is slow to accept a
connection (a full accept backlog, a host that drops SYNs), yet still reach it (the
release of a server still being connected to is finished by a detached process); and with
most servers down, release, extend and status report what really happened."""

import socket
import time
import unittest

from redlock_e2e import SLACK, E2ETest, wait_until


def fill_backlog(address, limit=2000):
    """Connects until the kernel stops completing handshakes for ADDRESS (the listener is
    frozen, so its accept queue only fills). Returns the sockets, to be kept open."""
    sockets = []
    for _ in range(limit):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex(address)
        sockets.append(s)
        import select
        _, writable, _ = select.select([], [s], [], 0.3)
        if not writable:
            return sockets  # the last one is stuck in SYN-SENT: the backlog is full
    raise AssertionError(f"the accept queue of {address} never filled")


class StragglerTest(E2ETest):
    def setUp(self):
        super().setUp()
        self.fast = [self.redis_server(), self.redis_server()]
        # A small backlog fills with a handful of connections.
        self.slow = self.redis_server(extra_args=["--tcp-backlog", "1"])
        servers = "".join(f'[[servers]]\nurl = "{s.url()}"\n'
                          for s in self.fast + [self.slow])
        # Long enough that waiting for it would be seen, and that the SYN retransmitted
        # one second later (after the thaw) still connects.
        self.config = self.write_file("c.toml", 'connect_timeout = "20s"\n'
                                      'command_timeout = "20s"\n' + servers)

    def stall(self):
        self.slow.freeze()
        self.addCleanup(self.slow.thaw)
        sockets = fill_backlog(self.slow.address)
        self.addCleanup(lambda: [s.close() for s in sockets])

    def test_release_returns_at_once_and_still_reaches_the_slow_server(self):
        r = self.run_redlock(["-c", self.config, "acquire", "-t", "5m", "job"])
        self.assertStatus(r, 0)
        token = r.stdout.strip()
        for s in self.fast + [self.slow]:
            self.assertEqual(s.command("GET", "lock:job"), token)
        self.stall()
        # A timeout well below the connect timeout: the release must not wait on it.
        r = self.run_redlock(["-c", self.config, "release", "job", "--token", token],
                             timeout=15.0)
        self.assertStatus(r, 0)
        self.assertEqual(r.stderr, "")
        for s in self.fast:
            self.assertKeyGone(s, "lock:job")
        self.slow.thaw()
        # The detached release connects once the server accepts again, long before the
        # five-minute TTL could have removed the key.
        wait_until(lambda: self.slow.command("EXISTS", "lock:job") == 0, timeout=30.0 * SLACK,
                   message="the release to reach the slow server")

    def test_run_and_waiters_do_not_wait_for_the_slow_server(self):
        self.stall()
        # Acquire and release while one server never completes a connection: run ends as
        # soon as PROGRAM does, not after the 20 s connect timeout.
        r = self.run_redlock(["-c", self.config, "run", "-k", "x", "--", "true"],
                             timeout=15.0)
        self.assertStatus(r, 0)
        for s in self.fast:
            self.assertKeyGone(s, "lock:x")
        # A waiter whose failed attempts each clean up does not pay the connect timeout
        # per attempt either: -w 3s gives up in about 3 s, well inside 15.
        h = self.holder(["-k", "busy", "-t", "1m"],
                        global_args=["-c", self.config]).wait_ready()
        r = self.run_redlock(["-c", self.config, "run", "-k", "busy", "-w", "3s", "--", "true"],
                             timeout=15.0)
        self.assertStatus(r, 75)
        self.assertEqual(h.release(), 0)


class MostServersDownTest(E2ETest):
    def setUp(self):
        super().setUp()
        self.servers = [self.redis_server() for _ in range(3)]
        self.global_args = []
        for s in self.servers:
            self.global_args += ["-s", s.url()]
        r = self.run_redlock(self.global_args + ["acquire", "-t", "5m", "job"])
        self.assertStatus(r, 0)
        self.token = r.stdout.strip()
        for s in self.servers[1:]:
            s.kill()

    def test_release_deletes_where_it_can_and_says_so(self):
        r = self.run_redlock(self.global_args + ["release", "job", "--token", self.token])
        self.assertStatus(r, 0)
        self.assertKeyGone(self.servers[0], "lock:job")
        self.assertIn("could not release 'job' on", r.stderr)
        self.assertIn(f"127.0.0.1:{self.servers[1].port}", r.stderr)
        # Now nobody has the token and too few servers answer to say more: an outage.
        r = self.run_redlock(self.global_args + ["release", "job", "--token", self.token])
        self.assertStatus(r, 69)
        self.assertIn("only 1 of 3 servers answered", r.stderr)

    def test_extend_says_where_it_extended(self):
        r = self.run_redlock(self.global_args + ["extend", "job", "--token", self.token,
                                                 "-t", "10m"])
        self.assertStatus(r, 69)
        self.assertIn("only 1 of 3 servers answered", r.stderr)
        self.assertIn("extended on 1 of 3", r.stderr)
        self.assertGreater(int(self.servers[0].command("PTTL", "lock:job")), 5 * 60 * 1000)

    def test_status_calls_the_only_token_held_not_other(self):
        r = self.run_redlock(self.global_args + ["status", "job"])
        self.assertIn(f"127.0.0.1:{self.servers[0].port}", r.stdout)
        line = next(l for l in r.stdout.splitlines() if f":{self.servers[0].port}" in l)
        self.assertIn("held", line)
        self.assertNotIn("other token", r.stdout)


if __name__ == "__main__":
    unittest.main()
