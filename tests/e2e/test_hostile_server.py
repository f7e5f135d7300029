"""Servers that send what no Redis sends (hostile, or corrupted on the way): replies that
claim billions of elements or bytes, arrays nested a million deep, a reply that never ends.
Whatever redlock reads (a lock's scripts, status, list, doctor, a sentinel's answer,
release notices), it ends within its command timeout and a margin, with bounded memory and a
protocol error naming the server, status 69; and a signal ends it meanwhile.

The bounds are generous (minutes and gigabytes are what they catch): 20 s with 1 s
timeouts, 200 MB of peak resident memory. A run that goes past 1 GB is killed at once, so
that a regression cannot take the machine down with it."""

import os
import signal
import subprocess
import time
import unittest

from redlock_e2e import REDLOCK_BIN, SLACK, E2ETest, wait_until

TIME_BOUND = 20.0  # seconds, with 1 s timeouts
RSS_BOUND_KB = 200 * 1024
RSS_KILL_KB = 1024 * 1024


def huge_array(args):
    """An array header claiming 2^31-1 elements, then elements as fast as they are read."""
    yield b"*2147483647\r\n"
    chunk = b":1\r\n" * 16384
    while True:
        yield chunk


def huge_bulk(args):
    """A bulk string header claiming 2^31 bytes, then bytes as fast as they are read."""
    yield b"$2147483648\r\n"
    chunk = b"x" * 65536
    while True:
        yield chunk


def deep_nesting(args):
    return b"*1\r\n" * 1_000_000


def never_ending(args):
    """A bulk string of a million bytes, one every 10 ms: it never ends in time."""
    yield b"$1000000\r\n"
    while True:
        yield b"x"
        time.sleep(0.01)


# The hostile answers, and the failure each must end in.
CASES = {
    "array": (huge_array, "protocol error: reply too large: array of 2147483647 elements"),
    "bulk": (huge_bulk, "protocol error: reply too large: bulk string of 2147483648 bytes"),
    "nesting": (deep_nesting,
                "protocol error: No support for nested multi bulk replies with depth > 7"),
    "never-ending": (never_ending, "timed out"),
}


class Measured:
    def __init__(self, status, elapsed, maxrss_kb, stdout, stderr):
        self.returncode = status
        self.elapsed = elapsed
        self.maxrss_kb = maxrss_kb
        self.stdout = stdout
        self.stderr = stderr

    def __repr__(self):
        return (f"Measured(rc={self.returncode}, elapsed={self.elapsed:.2f}s, "
                f"maxrss={self.maxrss_kb} KB, stderr={self.stderr!r})")


class HostileServerTest(E2ETest):
    def config(self, url, timeout="1s"):
        return self.write_file("config.toml", f'connect_timeout = "{timeout}"\n'
                                              f'command_timeout = "{timeout}"\n'
                                              f'[[servers]]\nurl = "{url}"\n')

    def start(self, args):
        out = open(self.path("stdout"), "w+b")
        err = open(self.path("stderr"), "w+b")
        self.addCleanup(out.close)
        self.addCleanup(err.close)
        proc = subprocess.Popen([REDLOCK_BIN, *args], env=self.env(), cwd=self.tmp,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        return proc, out, err

    def finish(self, proc, out, err, started, timeout=60.0):
        """Waits for PROC with wait4 (its own peak memory, not the test's other children),
        killing it past RSS_KILL_KB or `timeout`."""
        deadline = time.monotonic() + timeout * SLACK
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                break
            if time.monotonic() > deadline or self.rss_kb(proc.pid) > RSS_KILL_KB:
                proc.kill()
            time.sleep(0.01)
        proc.returncode = os.waitstatus_to_exitcode(status)
        elapsed = time.monotonic() - started
        out.seek(0)
        err.seek(0)
        return Measured(proc.returncode, elapsed, usage.ru_maxrss,
                        out.read().decode("utf-8", "replace"),
                        err.read().decode("utf-8", "replace"))

    @staticmethod
    def rss_kb(pid):
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except OSError:
            pass
        return 0

    def run_measured(self, args):
        started = time.monotonic()
        proc, out, err = self.start(args)
        return self.finish(proc, out, err, started)

    def assertBounded(self, r, detail):
        self.assertEqual(r.returncode, 69, r)
        self.assertLess(r.elapsed, TIME_BOUND * SLACK, r)
        self.assertLess(r.maxrss_kb, RSS_BOUND_KB, r)
        self.assertIn(detail, r.stderr)
        self.assertMessages(r.stderr)

    def test_run_status_list_and_doctor_end_with_a_protocol_error(self):
        for case, (answer, detail) in CASES.items():
            fake = self.fake_redis(answer)
            server = f"127.0.0.1:{fake.port}"
            config = self.config(fake.url())
            for command, expected in (
                    (["run", "-k", "x", "-n", "--", "touch", self.path("ran")],
                     f"redlock: cannot lock 'x': {server}: {detail}\n"),
                    (["status", "x"], f"redlock: no server could be read ({server}: {detail})\n"),
                    (["list"], f"redlock: no server could be read ({server}: {detail})\n"),
                    (["doctor"], f"redlock: cannot check {server}: {detail}\n")):
                with self.subTest(case=case, command=command[0]):
                    r = self.run_measured(["-c", config, *command])
                    self.assertBounded(r, detail)
                    self.assertEqual(r.stderr, expected)
                    if command[0] != "doctor":  # which prints its report
                        self.assertEqual(r.stdout, "")
            self.assertFalse(os.path.exists(self.path("ran")))

    def test_a_sentinel_answering_so_is_no_sentinel(self):
        for case, (answer, detail) in CASES.items():
            with self.subTest(case=case):
                fake = self.fake_redis(answer)
                config = self.config(f"redis-sentinel://127.0.0.1:{fake.port}#mymaster")
                r = self.run_measured(["-c", config, "run", "-k", "x", "-n", "--", "true"])
                self.assertBounded(r, detail)
                self.assertEqual(r.stderr, f"redlock: cannot lock 'x': sentinel:127.0.0.1:"
                                           f"{fake.port}#mymaster: no sentinel gave the "
                                           f"address of master 'mymaster': 127.0.0.1:"
                                           f"{fake.port}: {detail}\n")

    def test_a_waiter_whose_release_notices_are_hostile_still_gives_up_in_time(self):
        # The lock is held (for 30 s more); the subscription for its release notices is
        # confirmed, then flooded with a notice claiming 2 GB. The waiter passes over it as
        # it comes, never holding it, and gives up when --wait runs out.
        def answer(args):
            command = args[0].upper()
            if command in (b"EVAL", b"EVALSHA"):
                return b":-30002\r\n"  # held, 30 s left
            if command == b"SUBSCRIBE":
                return subscribed_then_flooded(args[1])
            return b"-ERR unknown command\r\n"

        def subscribed_then_flooded(channel):
            yield b"*3\r\n$9\r\nsubscribe\r\n$%d\r\n%s\r\n:1\r\n" % (len(channel), channel)
            yield b"*3\r\n$7\r\nmessage\r\n$%d\r\n%s\r\n$2147483648\r\n" % (len(channel),
                                                                               channel)
            chunk = b"x" * 65536
            while True:
                yield chunk

        fake = self.fake_redis(answer)
        config = self.config(fake.url())
        r = self.run_measured(["-c", config, "run", "-k", "x", "-w", "3s", "--", "true"])
        self.assertEqual(r.returncode, 75, r)
        self.assertLess(r.elapsed, TIME_BOUND * SLACK, r)
        self.assertLess(r.maxrss_kb, RSS_BOUND_KB, r)
        self.assertIn("redlock: lock 'x' is still held by another owner after 3s\n", r.stderr)
        self.assertMessages(r.stderr)

    def test_a_signal_ends_redlock_while_it_reads_a_reply_that_never_ends(self):
        # A long command timeout: only the signal can end the read in time. The clean-up
        # release that follows (the acquire may have run) is answered at once.
        answered = []

        def answer(args):
            answered.append(args[0])
            return never_ending(args) if len(answered) == 1 else b":0\r\n"

        fake = self.fake_redis(answer)
        config = self.config(fake.url(), timeout="60s")
        started = time.monotonic()
        proc, out, err = self.start(["-c", config, "run", "-k", "x", "--", "true"])
        wait_until(lambda: answered, 10, message="the acquire to reach the server")
        time.sleep(0.3)
        signaled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        r = self.finish(proc, out, err, started)
        self.assertEqual(r.returncode, 128 + signal.SIGTERM, r)
        self.assertLess(time.monotonic() - signaled, 10.0 * SLACK, r)
        self.assertLess(r.maxrss_kb, RSS_BOUND_KB, r)


if __name__ == "__main__":
    unittest.main()
