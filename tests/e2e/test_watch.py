"""`watch` runs for weeks: a burst of notices, a frozen server, thousands of names.

It is one view of the fleet model (src/fleet/): a subscription dropped for a burst past the
reader's bound is made again (and every lock read once it is), readings wait for a majority
of the servers and never for a frozen one, and what it keeps per name is forgotten once the
name is gone (issue 36, items 6, 7 and 8).
"""

import json
import os
import signal
import unittest

from redlock_e2e import SLACK, E2ETest, Timeout, wait_until


def events_of(watch, name):
    return [e["event"] for e in (json.loads(line) for line in watch.stdout.splitlines()
                                 if line.strip()) if e["name"] == name]


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


# Publishes ARGV[2] on "{lock:<ARGV[1]><i>}:events" for i = 1..ARGV[3] (ARGV[3] names), or on
# one channel ARGV[3] times when ARGV[4] is "same": many notices in one command.
PUBLISH_MANY = """
for i = 1, tonumber(ARGV[3]) do
  local name = ARGV[1] .. (ARGV[4] == "same" and "" or i)
  redis.call("publish", "{lock:" .. name .. "}:events", ARGV[2])
end
return 1
"""


class WatchTest(E2ETest):
    def watching(self, env=None):
        """A server, the arguments naming it, and `watch --json` subscribed to it."""
        server = self.redis_server()
        args = ["-s", server.url()]
        watch = self.start_redlock(args + ["watch", "--json"], env=env)
        wait_until(lambda: int(server.command("PUBSUB", "NUMPAT")) >= 2, 10,
                   message="watch to subscribe", proc=watch)
        return server, args, watch


class WatchBurstTest(WatchTest):
    def test_a_burst_of_notices_past_the_readers_bound_does_not_stop_the_notices(self):
        server, args, watch = self.watching()
        # Stopped while 8 MB of notices (8000 of 1 KB) queue up for it: at its next read far
        # more than its reader's bound (64 reads of 4 KB) waits in the socket at once.
        os.kill(watch.pid, signal.SIGSTOP)
        try:
            for _ in range(8):
                server.command("EVAL", PUBLISH_MANY, "0", "burst", "x" * 1000, "1000", "same")
        finally:
            os.kill(watch.pid, signal.SIGCONT)
        # Subscribed again after a moment (the first retry comes after a second), where 0.3
        # dropped the subscription for good and read every lock every 5 s.
        wait_until(lambda: int(server.command("PUBSUB", "NUMPAT")) >= 2, 15,
                   message="watch to subscribe again", proc=watch)
        # A run too short for any poll is told, as each run that follows.
        for i in range(3):
            self.assertStatus(self.run_redlock(args + ["run", "-k", f"short{i}", "--", "true"]),
                              0)
            wait_until(lambda: "run recorded" in events_of(watch, f"short{i}"), 10,
                       message=f"watch to tell run {i}", proc=watch)
            self.assertIn("acquired", events_of(watch, f"short{i}"))
        watch.send_signal(signal.SIGTERM)
        self.assertEqual(watch.wait(10), 0)


class WatchFrozenServerTest(E2ETest):
    def test_a_frozen_server_of_three_delays_neither_the_events_nor_the_exit(self):
        servers = [self.redis_server() for _ in range(3)]
        # Each command waits up to 20 s: a reading that waited for the frozen server would
        # tell every event 20 s late (0.3: three counts per event, a minute).
        config = self.write_file("watch.toml", 'command_timeout = "20s"\n' + "".join(
            f'[[servers]]\nurl = "{s.url()}"\n' for s in servers))
        servers[2].freeze()
        watch = self.start_redlock(["-c", config, "watch", "--json"])
        wait_until(lambda: all(int(s.command("PUBSUB", "NUMPAT")) >= 2 for s in servers[:2]),
                   10, message="watch to subscribe", proc=watch)
        for name in ("first", "second"):
            holder = self.holder(["-k", name], global_args=["-c", config])
            holder.wait_ready()
            # Told while it still holds: the majority's answer is all that is waited for.
            wait_until(lambda: "acquired" in events_of(watch, name), 10,
                       message=f"watch to tell '{name}' acquired", proc=watch)
            self.assertEqual(holder.release(), 0)
            wait_until(lambda: "run recorded" in events_of(watch, name), 10,
                       message=f"watch to tell the run of '{name}'", proc=watch)
        # And it leaves at once, whatever the frozen server: within the wait below, not the
        # command timeout.
        self.assertStatus(self.run_redlock(["-c", config, "run", "-k", "third", "--", "true"]), 0)
        watch.send_signal(signal.SIGTERM)
        self.assertEqual(watch.wait(10), 0)


class WatchMemoryTest(WatchTest):
    def test_what_watch_keeps_does_not_grow_with_every_name_it_ever_heard_of(self):
        env = self.env()
        if "ASAN_OPTIONS" in env:
            # A sanitized build keeps what is freed in quarantine (256 MB): without it, what
            # is freed is reused, and what is kept is what grows.
            env["ASAN_OPTIONS"] += ":quarantine_size_mb=0:thread_local_quarantine_size_kb=0"
        server, _, watch = self.watching(env)

        def reads():
            # Each name heard of is read once, by one script call.
            stats = server.commandstats()
            return sum(int(stats.get(c, {}).get("calls", 0))
                       for c in ("evalsha", "evalsha_ro", "eval", "eval_ro"))

        def hear(stem, names):
            # Notices of names that have nothing on the servers (as of locks long gone),
            # 250 at a time, each lot read before the next.
            for first in range(0, names, 250):
                expected = reads() + 250
                server.command("EVAL", PUBLISH_MANY, "0", f"{stem}{first}-", "run", "250", "")
                wait_until(lambda: reads() >= expected, 30,
                           message=f"watch to read names {first} to {first + 249}", proc=watch)

        # PUBSUB NUMPAT says the server has the subscription, not that watch has read its
        # confirmation and the start's sweep: a notice until one is read, then the lots.
        def heard_one():
            expected = reads() + 1
            server.command("PUBLISH", "{lock:ready}:events", "run")
            try:
                return wait_until(lambda: reads() >= expected, 0.5, interval=0.05)
            except Timeout:
                return False
        wait_until(heard_one, 30, message="watch to read a name it heard of", proc=watch)
        hear("warm", 2000)
        before = rss_kb(watch.pid)
        hear("gone", 10000)
        grown = rss_kb(watch.pid) - before
        # 0.3 kept ~0.9 KB for every name it heard of: 9 MB more for these 10000.
        self.assertLess(grown, 2048, f"watch grew by {grown} KB for 10000 names gone")
        watch.send_signal(signal.SIGINT)
        self.assertEqual(watch.wait(10), 0)


if __name__ == "__main__":
    unittest.main()
