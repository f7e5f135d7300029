"""Waiting well: a waiter is woken by the release itself, not by polling, on its own wake
channel, and a release wakes the first two waiters, not a crowd; a holder that dies without
releasing is noticed by expiry; lost notices (a subscription killed, a server frozen, an
ACL without channels) still converge."""

import datetime
import hashlib
import json
import re
import signal
import time
import unittest

from redlock_e2e import SLACK, E2ETest, pid_alive, wait_until
from test_signals import PtyTest

USER, PASSWORD = "locker", "pw-locker-1"


def attempts_of(stderr):
    """The attempt count of -v's "acquired 'NAME' in Xms after N attempts"."""
    m = re.search(r"acquired '[^']*' in [0-9.]+ms after (\d+) attempts?", stderr)
    assert m, stderr
    return int(m.group(1))


def wake_channels(server, name="job"):
    """How many waiters of NAME listen on their own wake channel on SERVER."""
    return len(server.command("PUBSUB", "CHANNELS", "{lock:%s}:w:*" % name))


def check_stopped_waiters_at_the_head(test, args, servers):
    """Four waiters on `servers`, the first two stopped (Ctrl-Z'd, say: still subscribed,
    never trying): the other two get the lock all the same, and the two once resumed."""
    h = test.holder(["-k", "job", "-t", "5m"], global_args=args).wait_ready()
    waiters = []
    for i in range(4):
        waiters.append(test.start_redlock(args + ["run", "-k", "job", "-w", "5m", "--",
                                                  "true"]))
        wait_until(lambda: all(wake_channels(s) >= i + 1 and
                               int(s.command("ZCARD", "{lock:job}:waiters")) >= i + 1
                               for s in servers),
                   timeout=15.0, message="the waiter to subscribe and enlist",
                   proc=waiters[-1])
    for w in waiters[:2]:
        w.send_signal(signal.SIGSTOP)
        test.addCleanup(lambda w=w: w.send_signal(signal.SIGCONT))
    # The release wakes the first two, both stopped: nobody takes the lock...
    test.assertEqual(h.release(), 0)
    # ... until the next release (a run that found it free): the first, woken before and
    # silent since, is told but not counted; the third takes the lock, then the fourth,
    # long before the minute a waiter no notice wakes sleeps at most.
    test.assertStatus(test.run_redlock(args + ["run", "-n", "-k", "job", "--", "true"]), 0)
    for w in waiters[2:]:
        test.assertEqual(w.wait(30), 0, w.stderr)
    for w in waiters[:2]:
        w.send_signal(signal.SIGCONT)
    for w in waiters[:2]:
        test.assertEqual(w.wait(60), 0, w.stderr)


def release_id(token):
    """What a release notice names the release by: 12 hex digits of SHA1(token), so that a
    waiter listening to two servers wakes once per release (and the token stays secret)."""
    return hashlib.sha1(token.strip().encode()).hexdigest()[:12]


def listening_waiters(servers, name="crowd"):
    """How many waiters of NAME listen: on their own wake channels (on the first server,
    where every waiter subscribes), or on the release channel (each on up to two servers)."""
    own = wake_channels(servers[0], name)
    on_release = sum(int(s.command("PUBSUB", "NUMSUB", "{lock:%s}:released" % name)[1])
                     for s in servers)
    return max(own, on_release // min(2, len(servers)))


def commands_per_hand_over(test, servers, n, extra=(), holders=1):
    """A crowd of n `run -w 300s EXTRA -- sleep 0.01` gathered behind `holders` holders
    (one a permit with --limit), all listening before the holders let go: the commands the
    busiest server executed from then on (INFO commandstats, scripts' calls included),
    divided by n, the hand-overs. A count, not a time."""
    args = [a for s in servers for a in ("-s", s.url())]
    gate = [test.holder(["-k", "crowd", *extra], global_args=args).wait_ready()
            for _ in range(holders)]
    procs = [test.start_redlock(args + ["run", "-k", "crowd", "-w", "300s", *extra, "--",
                                        "sleep", "0.01"]) for _ in range(n)]
    wait_until(lambda: listening_waiters(servers) >= n, 60.0 * SLACK,
               message=f"{n} waiters listening", proc=procs[-1])
    for s in servers:
        s.command("CONFIG", "RESETSTAT")
    for h in gate:
        test.assertEqual(h.release(), 0, h.proc.stderr)
    for p in procs:
        test.assertEqual(p.wait(120.0), 0, p.stderr)
    most = 0
    for s in servers:
        most = max(most, sum(int(v["calls"]) for k, v in s.commandstats().items()
                             if k not in ("info", "config|resetstat")))
    return most / n


class WaitingTest(E2ETest):
    def setUp(self):
        super().setUp()
        self.server = self.redis_server()
        self.args = ["-s", self.server.url()]

    def start_waiter(self, args=(), wait="60s"):
        return self.start_redlock(["-v"] + list(args or self.args) +
                                  ["run", "-k", "job", "-w", wait, "--", "true"])

    def wait_subscribed(self, server=None, n=1, proc=None):
        server = server or self.server
        wait_until(lambda: wake_channels(server) >= n and
                   int(server.command("ZCARD", "{lock:job}:waiters")) >= n,
                   timeout=15.0, message="the waiter to subscribe and enlist", proc=proc)

    def test_a_waiter_is_woken_by_the_release_not_by_polling(self):
        h = self.holder(["-k", "job"], global_args=self.args).wait_ready()
        waiter = self.start_waiter()
        self.wait_subscribed(proc=waiter)
        # Two seconds of polling every 20-200 ms would be ten attempts or more.
        time.sleep(2.0)
        self.assertTrue(pid_alive(waiter.pid))
        self.assertEqual(h.release(), 0)
        self.assertEqual(waiter.wait(30), 0, waiter.stderr)
        # The first attempt (which put it on the wait list) and the one the release woke;
        # one more if a release took it off the list before it had subscribed.
        self.assertLessEqual(attempts_of(waiter.stderr), 3, waiter.stderr)

    def test_a_waiter_records_when_it_acquired_not_when_it_started_waiting(self):
        h = self.holder(["-k", "job"], global_args=self.args).wait_ready()
        waiter = self.start_redlock(self.args + ["acquire", "job", "-w", "60s", "--json"])
        self.wait_subscribed(proc=waiter)
        time.sleep(1.5)
        released = datetime.datetime.now(datetime.timezone.utc)
        self.assertEqual(h.release(), 0)
        self.assertEqual(waiter.wait(30), 0, waiter.stderr)

        def when(text):
            return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))

        acquired = when(json.loads(waiter.stdout)["acquired_at"])
        self.assertGreater(acquired, released - datetime.timedelta(milliseconds=200))
        r = self.run_redlock(self.args + ["status", "--json", "job"])
        holder = json.loads(r.stdout)["locks"][0]["holder"]
        self.assertEqual(when(holder["acquired_at"]), acquired)

    def test_the_release_notice_names_the_release_and_the_acquisition_says_nothing(self):
        # Here: this client alone, on the release channel (watch, --limit waiters), and on
        # a wake channel it put on the wait list itself.
        self.server.command("ZADD", "{lock:job}:waiters", "1", "me")
        with self.server.client() as c:
            c.execute("SUBSCRIBE", "{lock:job}:released")
            c.execute("SUBSCRIBE", "{lock:job}:w:me")
            r = self.run_redlock(self.args + ["run", "-k", "job", "--", "sh", "-c",
                                              'echo "$REDLOCK_TOKEN"'])
            self.assertEqual(r.returncode, 0, r.stderr)
            notice = "released " + release_id(r.stdout)
            self.assertEqual(c._read_reply(), ["message", "{lock:job}:released", notice])
            self.assertEqual(c._read_reply(), ["message", "{lock:job}:w:me", notice])

    def test_a_holder_killed_without_release_is_noticed_by_expiry(self):
        h = self.holder(["-k", "job", "-t", "2s"], global_args=self.args).wait_ready()
        program = h.program_pid
        self.kill_at_cleanup(program)
        waiter = self.start_waiter()
        self.wait_subscribed(proc=waiter)
        killed_at = time.monotonic()
        h.proc.send_signal(signal.SIGKILL)  # no release, no notice; the watchdog stops PROGRAM
        self.assertEqual(waiter.wait(30), 0, waiter.stderr)
        # Woken when the key expired: within about the 2 s TTL, after few attempts.
        self.assertLess(time.monotonic() - killed_at, 2.0 + 3.0 * SLACK)
        self.assertLessEqual(attempts_of(waiter.stderr), 5, waiter.stderr)

    def test_a_killed_subscription_costs_nothing_but_a_new_one(self):
        h = self.holder(["-k", "job", "-t", "1m"], global_args=self.args).wait_ready()
        waiter = self.start_waiter()
        self.wait_subscribed(proc=waiter)
        self.server.command("CLIENT", "KILL", "TYPE", "pubsub")
        # The waiter subscribes again (and looks at the lock once more)...
        self.wait_subscribed(proc=waiter)
        self.assertEqual(h.release(), 0)
        # ... so the release still wakes it, long before the one-minute TTL.
        self.assertEqual(waiter.wait(20), 0, waiter.stderr)

    def test_a_large_message_on_the_channels_turns_no_waiter_into_a_poller(self):
        # Anyone who may publish can send 2 MB on a wake channel: 0.3's waiters took it for
        # junk, dropped the subscription for good and polled (20 waiters: ~9000 commands in
        # 3 s instead of none).
        h = self.holder(["-k", "job", "-t", "5m"], global_args=self.args).wait_ready()
        waiters = [self.start_redlock(self.args + ["run", "-k", "job", "-w", "5m", "--",
                                                   "true"]) for _ in range(20)]
        self.wait_subscribed(n=20, proc=waiters[-1])

        def calls():  # the commands of everyone but this test
            stats = self.server.commandstats()
            return sum(int(v["calls"]) for k, v in stats.items()
                       if k not in ("info", "publish", "pubsub|channels"))

        before = calls()
        big = "x" * (2 << 20)
        channels = self.server.command("PUBSUB", "CHANNELS", "{lock:job}:*")
        self.assertGreaterEqual(len(channels), 20)
        for channel in channels:  # every wake channel, and the holder's events channel
            self.server.command("PUBLISH", channel, big)
        time.sleep(3.0)
        self.assertLessEqual(calls() - before, 20)
        self.assertEqual(wake_channels(self.server), 20)  # all still listening
        self.assertEqual(h.release(), 0)
        for w in waiters:
            self.assertEqual(w.wait(60), 0, w.stderr)

    def test_a_release_wakes_the_first_two_waiters_and_skips_the_dead(self):
        h = self.holder(["-k", "job", "-t", "1m"], global_args=self.args).wait_ready()
        waiters = []
        for i in range(5):  # one after another: the wait list keeps their order
            waiters.append(self.start_redlock(
                ["-v"] + self.args + ["run", "-k", "job", "-w", "60s", "--", "sleep", "0.2"]))
            self.wait_subscribed(n=i + 1, proc=waiters[-1])
        # The first waiter dies: the release finds nobody on its channel, takes it off the
        # list, and wakes the next two instead.
        waiters[0].send_signal(signal.SIGKILL)
        waiters[0].wait(10)
        wait_until(lambda: wake_channels(self.server) == 4, 10, message="its channel to go")
        self.assertEqual(h.release(), 0)
        for w in waiters[1:]:
            self.assertEqual(w.wait(60), 0, w.stderr)
        # Each waiter tried once to find it held (and go on the list); then each release
        # woke two (one, for the last): 4 + 2 + 2 + 2 + 1, at most 15 with a second try
        # each where a check after subscribing finds it off the list. A crowd woken by every
        # release would have tried 4 + 3 + 2 + 1 times more, and polling many more.
        self.assertLessEqual(sum(attempts_of(w.stderr) for w in waiters[1:]), 15)
        self.assertEqual(int(self.server.command("ZCARD", "{lock:job}:waiters")), 0)

    def test_two_stopped_waiters_at_the_head_do_not_hold_up_the_others(self):
        check_stopped_waiters_at_the_head(self, self.args, [self.server])

    def test_stuck_waiters_at_the_head_do_not_hide_a_live_one_behind_them(self):
        # More stopped waiters at the head than a release looks at (32): each release that
        # finds the first it woke still silent moves it behind the others, so the live one
        # is reached after about one hand-over per stuck waiter. 0.3 told the same 32 again
        # at every release and never reached it: it waited for its own timer (a minute).
        h = self.holder(["-k", "job", "-t", "5m"], global_args=self.args).wait_ready()
        stuck = []
        for i in range(33):
            stuck.append(self.start_redlock(self.args + ["run", "-k", "job", "-w", "5m", "--",
                                                         "true"]))
            self.wait_subscribed(n=i + 1, proc=stuck[-1])
        for w in stuck:
            w.send_signal(signal.SIGSTOP)
            self.addCleanup(lambda w=w: w.send_signal(signal.SIGCONT))
        live = self.start_waiter(wait="5m")
        self.wait_subscribed(n=34, proc=live)
        self.assertEqual(h.release(), 0)
        handovers = 0
        while live.poll() is None and handovers < 60:
            r = self.run_redlock(self.args + ["run", "-n", "-k", "job", "--", "true"])
            self.assertIn(r.returncode, (0, 75), r.stderr)  # 75: the live one holds it
            handovers += r.returncode == 0
        self.assertEqual(live.wait(30), 0, live.stderr)
        self.assertLessEqual(handovers, 40)
        for w in stuck:
            w.send_signal(signal.SIGCONT)
        for w in stuck:
            self.assertEqual(w.wait(60), 0, w.stderr)

    def test_a_waiter_that_gives_up_leaves_the_wait_list(self):
        h = self.holder(["-k", "job", "-t", "1m"], global_args=self.args).wait_ready()
        waiter = self.start_waiter(wait="1s")
        self.wait_subscribed(proc=waiter)
        self.assertEqual(waiter.wait(30), 75, waiter.stderr)
        self.assertEqual(int(self.server.command("ZCARD", "{lock:job}:waiters")), 0)
        # A -n run never goes on it.
        r = self.run_redlock(self.args + ["run", "-n", "-k", "job", "--", "true"])
        self.assertStatus(r, 75)
        self.assertEqual(int(self.server.command("ZCARD", "{lock:job}:waiters")), 0)
        self.assertEqual(h.release(), 0)

    def test_without_channel_permission_waiters_still_get_the_lock(self):
        self.require_server((6, 2), "an ACL of channels")
        server = self.redis_server(acl_user=(USER, PASSWORD,
                                             "on ~lock:* ~{lock:*}:* resetchannels +@all"))
        args = ["-s", server.url(username=USER, password=PASSWORD)]
        h = self.holder(["-k", "job"], global_args=args).wait_ready()
        waiter = self.start_waiter(args)
        time.sleep(0.5)
        self.assertEqual(h.release(), 0)  # the release's PUBLISH is refused, not the release
        self.assertEqual(waiter.wait(30), 0, waiter.stderr)
        self.assertKeyGone(server, "lock:job")


class ShortenedLeaseTest(E2ETest):
    """A lease cut short (--min-hold's end, extend to a shorter ttl) ends without a release:
    waiters, sleeping by the lease they saw, are told, and get the lock when it is free,
    not when the old lease would have run out. Leases of a minute, waits of 30 s: a
    waiter that slept by the old lease gives up (75)."""

    n_servers = 1

    def setUp(self):
        super().setUp()
        self.servers = [self.redis_server() for _ in range(self.n_servers)]
        self.args = [a for s in self.servers for a in ("-s", s.url())]

    def start_waiter(self, *options):
        waiter = self.start_redlock(self.args + ["run", "-k", "job", "-w", "30s", *options,
                                                 "--", "true"])
        # The line that says it waits comes once it subscribed and looked again. Then a
        # moment more, so that it surely sleeps by the long lease it saw (over several
        # servers it may first try them all at once): only what it is told can wake it.
        wait_until(lambda: "waiting for 'job'" in waiter.stderr, timeout=15.0,
                   message="the waiter to wait", proc=waiter)
        time.sleep(0.5)
        return waiter

    def check_min_hold_end_wakes(self, *waiter_options):
        h = self.holder(["-k", "job", "-t", "60s", "--min-hold", "8s"],
                        global_args=self.args).wait_ready()
        waiter = self.start_waiter(*waiter_options)
        ended_at = time.monotonic()
        self.assertEqual(h.release(), 0)
        # Still held, by the holder, for what is left of --min-hold, on a majority (the
        # extend returns once a majority took it; the others may take it a moment later).
        def shortened(s):
            return (s.command("GET", "lock:job") == h.token and
                    int(s.command("PTTL", "lock:job")) <= 8000)
        wait_until(lambda: sum(map(shortened, self.servers)) > len(self.servers) // 2, 10,
                   message="the lease cut short on a majority")
        self.assertEqual(waiter.wait(60), 0, waiter.stderr)
        self.assertLess(time.monotonic() - ended_at, 8.0 + 6.0 * SLACK)

    def test_a_waiter_gets_the_lock_when_min_hold_ends(self):
        self.check_min_hold_end_wakes()

    def test_a_fair_waiter_gets_the_lock_when_min_hold_ends(self):
        self.check_min_hold_end_wakes("--fair")

    def test_a_waiter_gets_the_lock_soon_after_extend_shortens_the_lease(self):
        r = self.run_redlock(self.args + ["acquire", "-k", "job", "-t", "60s"])
        self.assertStatus(r, 0)
        token = r.stdout.split()[0]
        waiter = self.start_waiter()
        shortened_at = time.monotonic()
        r = self.run_redlock(self.args + ["extend", "-k", "job", "--token", token, "-t", "1s"])
        self.assertStatus(r, 0)
        self.assertEqual(waiter.wait(60), 0, waiter.stderr)
        self.assertLess(time.monotonic() - shortened_at, 1.0 + 6.0 * SLACK)

    def test_renewals_and_longer_leases_say_nothing_to_waiters(self):
        # A run renewed every 200 ms for 1.5 s, and a lock extended to a longer lease: the
        # only notices waiters hear are the releases' (and over several servers round 1's
        # "acquired"), never "shortened".
        heard = []
        listeners = []
        for s in self.servers:
            client = s.client(timeout=1.0)
            client.execute("SUBSCRIBE", "{lock:job}:released")
            listeners.append(client)
        r = self.run_redlock(self.args + ["run", "-k", "job", "-t", "600ms", "--", "sleep",
                                          "1.5"])
        self.assertStatus(r, 0)
        r = self.run_redlock(self.args + ["acquire", "-k", "job", "-t", "1m"])
        self.assertStatus(r, 0)
        token = r.stdout.split()[0]
        for ttl in ("2m", "2m"):  # longer, then the same
            self.assertStatus(self.run_redlock(self.args + ["extend", "-k", "job", "--token",
                                                            token, "-t", ttl]), 0)
        self.assertStatus(self.run_redlock(self.args + ["release", "-k", "job", "--token",
                                                        token]), 0)
        for client in listeners:
            try:
                while True:
                    message = client._read_reply()
                    heard.append(message[2] if isinstance(message, list) else message)
            except OSError:  # the timeout: nothing more to read
                pass
            client.close()
        payloads = [m.decode() if isinstance(m, bytes) else str(m) for m in heard]
        self.assertFalse([p for p in payloads if p.startswith("shortened")], payloads)
        # Per server: the run's release, acquire's release (and "acquired" twice over five).
        self.assertLessEqual(len(payloads), len(self.servers) * (2 if self.n_servers == 1 else 4))


class ShortenedLeaseOverFiveTest(ShortenedLeaseTest):
    n_servers = 5


class ProgressTest(PtyTest):
    """Who holds the lock, said while waiting: a line on a pipe, an updating line on a
    terminal, nothing with -q."""

    def hold(self):
        h = self.holder(["-k", "job", "-t", "1m"], global_args=["-s", self.url]).wait_ready()
        self.assertTrue(pid_alive(h.proc.pid))
        return h

    def test_a_line_when_waiting_starts_on_a_pipe(self):
        h = self.hold()
        waiter = self.start_redlock(["-s", self.url, "run", "-k", "job", "-w", "30s", "--",
                                     "true"])
        wait_until(lambda: wake_channels(self.server) >= 1,
                   timeout=15.0, message="the waiter to subscribe", proc=waiter)
        time.sleep(1.2)
        self.assertEqual(h.release(), 0)
        self.assertEqual(waiter.wait(30), 0)
        lines = waiter.stderr.splitlines()
        # One line (the next would come a minute later), naming the holder's redlock.
        self.assertEqual(len(lines), 1, waiter.stderr)
        self.assertRegex(lines[0], rf"^redlock: waiting for 'job', held by [^@]+@[^ ]+ "
                                   rf"\(pid {h.proc.pid}\) for [0-9.]+s, running sh -c .*; "
                                   rf"[0-9.]+s left of the wait$")

    def test_quiet_says_nothing(self):
        h = self.hold()
        waiter = self.start_redlock(["-q", "-s", self.url, "run", "-k", "job", "-w", "30s",
                                     "--", "true"])
        time.sleep(0.5)
        self.assertEqual(h.release(), 0)
        self.assertEqual(waiter.wait(30), 0)
        self.assertEqual(waiter.stderr, "")

    def test_one_updating_line_on_a_terminal_cleared_when_done(self):
        h = self.hold()
        pid, fd = self.spawn_on_pty(["-s", self.url, "run", "-k", "job", "--", "echo", "GOT"])
        self.read_until(fd, "waiting for 'job', held by")
        # Rewritten in place every second, with how long it has waited.
        self.read_until(fd, "\r\x1b[Kredlock: waiting 1")
        self.assertNotIn("left of the wait", self._pty_output.decode())  # no -w: no limit
        self.assertEqual(h.release(), 0)
        self.read_until(fd, "GOT")
        self.assertEqual(self.wait_status(pid, fd), 0)
        out = self._pty_output.decode()
        self.assertNotIn("\n", out.split("GOT")[0].replace("\r\n", ""), out)
        self.assertIn("\r\x1b[KGOT", out)


class WaitingOverFiveTest(E2ETest):
    def setUp(self):
        super().setUp()
        self.servers = [self.redis_server() for _ in range(5)]
        self.args = []
        for s in self.servers:
            self.args += ["-s", s.url()]

    def test_woken_with_a_server_frozen_and_one_killed(self):
        h = self.holder(["-k", "job", "-t", "1m"], global_args=self.args).wait_ready()
        self.servers[0].freeze()
        self.addCleanup(self.servers[0].thaw)
        self.servers[1].kill()
        waiter = self.start_redlock(["-v"] + self.args + ["run", "-k", "job", "-w", "60s",
                                                           "--", "true"])
        # It listens on its own channel on every server that answers.
        wait_until(lambda: sum(wake_channels(s) for s in self.servers[2:]) == 3,
                   timeout=15.0, message="the waiter to subscribe", proc=waiter)
        self.assertEqual(h.release(), 0)
        self.assertEqual(waiter.wait(30), 0, waiter.stderr)
        # The first attempt and the one after subscribing; then a notice may wake one
        # attempt before the release has reached a majority, and one more.
        # Polling for that long would be many more.
        self.assertLessEqual(attempts_of(waiter.stderr), 5, waiter.stderr)

    def test_a_key_left_on_one_server_costs_a_moment_not_its_ttl(self):
        # Waiters that a release wakes ask one server first, the same for all of them.
        # A key left there alone (the release failed on that server: here another token
        # sits in its place) says "held" while the other four are free; no other notice
        # comes, so the waiter soon tries every server at once. Each server in turn, since
        # any of them may be the one asked first.
        for i, stale in enumerate(self.servers):
            name = f"job{i}"
            h = self.holder(["-k", name, "-t", "1m"], global_args=self.args).wait_ready()
            waiter = self.start_redlock(["-v"] + self.args + ["run", "-k", name, "-w", "20s",
                                                               "--", "true"])
            wait_until(lambda: sum(wake_channels(s, name) for s in self.servers) == 5,
                       timeout=15.0, message="the waiter to subscribe", proc=waiter)
            self.assertEqual(stale.command("SET", f"lock:{name}", "left-behind", "XX", "PX",
                                           "60000"), "OK")
            released_at = time.monotonic()
            self.assertEqual(h.release(), 0)
            self.assertEqual(waiter.wait(30), 0, waiter.stderr)
            self.assertLess(time.monotonic() - released_at, 5.0 * SLACK, waiter.stderr)
            self.assertIn("acquired", waiter.stderr)

    def test_two_stopped_waiters_at_the_head_do_not_hold_up_the_others(self):
        # Here only the leader marks the first woken (Lock::release); the others wake the
        # first two of their lists each time.
        check_stopped_waiters_at_the_head(self, self.args, self.servers)

    def test_a_crowd_tries_about_twice_each_over_five_servers(self):
        # Marks on every server drifted apart (a woken attempt the leader refused unmarked
        # it there only), and each release told more waiters: 250 waiters tried 6 times
        # each, some 40 or more. The woken try once and win, or find it held.
        procs = [self.start_redlock(["-v"] + self.args + [
            "run", "-k", "job", "-w", "300s", "--", "sleep", "0.01"]) for _ in range(40)]
        tries = []
        for p in procs:
            self.assertEqual(p.wait(120), 0, p.stderr)
            tries.append(attempts_of(p.stderr))
        tries.sort()
        # The first attempt, and one when woken; a few more for runs that lost a race (a
        # median of 2-3 under ASan beside two busy loops; 15 with the marks drifting).
        self.assertLessEqual(tries[len(tries) // 2], 5, tries)

    def test_acquired_goes_to_the_events_channel_and_wakes_no_waiter(self):
        with self.servers[0].client() as c:
            c.execute("SUBSCRIBE", "{lock:job}:released")
            c.execute("SUBSCRIBE", "{lock:job}:events")
            r = self.run_redlock(self.args + ["run", "-k", "job", "--", "sh", "-c",
                                              'echo "$REDLOCK_TOKEN"'])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(c._read_reply(), ["message", "{lock:job}:events", "acquired"])
            self.assertEqual(c._read_reply(), ["message", "{lock:job}:released",
                                               "released " + release_id(r.stdout)])

    def test_a_crowd_of_a_hundred_loses_no_update_and_never_overlaps(self):
        # A hundred waiters, woken two by two over five servers.
        self.assertCrowdLosesNoUpdate(self.args, n=100, wait="300s", hold="0.01")

    def test_a_crowd_costs_each_server_a_bounded_number_of_commands_per_hand_over(self):
        def reset():
            for s in self.servers:
                s.command("CONFIG", "RESETSTAT")

        n = 30
        self.assertCrowdLosesNoUpdate(self.args, n=n, wait="300s", hold="0.01",
                                      gathered=(self.servers, reset))
        for s in self.servers:
            calls = sum(int(v["calls"]) for k, v in s.commandstats().items()
                        if k not in ("info", "config|resetstat"))
            # Counted from the first release on, once all are waiting: the acquisition,
            # its history, the release, two woken, and a few more on a loaded machine (tries
            # that lost a race). A crowd woken whole by each release costs each of them an
            # attempt: 0.2 cost about 150 at this size.
            self.assertLessEqual(calls / n, 60, s.commandstats())

    def test_a_subscription_killed_mid_crowd_still_converges(self):
        import threading
        stop = threading.Event()

        def killer():
            while not stop.wait(0.3):
                for s in self.servers[:2]:
                    try:
                        s.command("CLIENT", "KILL", "TYPE", "pubsub")
                    except Exception:  # noqa: BLE001 (a server busy or restarting)
                        pass

        t = threading.Thread(target=killer)
        t.start()
        try:
            self.assertCrowdLosesNoUpdate(self.args, n=20, wait="300s", hold="0.01")
        finally:
            stop.set()
            t.join()

    def test_without_wake_channel_permission_waiters_listen_to_the_release(self):
        # Rules of 0.2: no wake channels. The waiters listen to the release channel, and
        # all wake at each release; the leader still lets only one win.
        self.require_server((6, 2), "an ACL of channels")
        rules = "on ~lock:* ~{lock:*}:* &{lock:*}:released +@all"
        self.servers = [self.redis_server(acl_user=(USER, PASSWORD, rules)) for _ in range(3)]
        args = []
        for s in self.servers:
            args += ["-s", s.url(username=USER, password=PASSWORD)]
        self.assertCrowdLosesNoUpdate(args, n=6, wait="90s")


class CrowdOnOneServerTest(E2ETest):
    def test_a_crowd_of_a_hundred_on_one_server(self):
        server = self.redis_server()
        server.command("CONFIG", "RESETSTAT")
        n = 100
        self.assertCrowdLosesNoUpdate(["-s", server.url()], n=n, wait="300s", hold="0.01")
        calls = sum(int(v["calls"]) for k, v in server.commandstats().items()
                    if k not in ("info", "config|resetstat"))
        # About 27 (bench/README.md, "Crowds"); 0.2 cost about 215 at this size.
        self.assertLessEqual(calls / n, 45, server.commandstats())

    def test_a_fair_crowd_on_one_server_costs_a_bounded_number_per_hand_over(self):
        server = self.redis_server()
        server.command("CONFIG", "RESETSTAT")
        n = 40
        self.assertCrowdLosesNoUpdate(["-s", server.url()], n=n, wait="300s", hold="0.01",
                                      extra=["--fair"])
        calls = sum(int(v["calls"]) for k, v in server.commandstats().items()
                    if k not in ("info", "config|resetstat"))
        # About 48: each attempt keeps the queue alive; 0.2's heartbeats cost 560 at 100.
        self.assertLessEqual(calls / n, 100, server.commandstats())

    def test_a_limit_crowd_wakes_only_as_many_as_permits_come_free(self):
        # --limit 4, the four permits held, 30 waiters listening: each release wakes the
        # first two of the wait list, not the crowd, and the first tries the permit it
        # freed. About 30.5 (bench/README.md, "Crowds"): the winner's script 13, the
        # release 11, the history entry 6, with the four holders' releases and entries
        # (about 2 of it; 29.5 with 100 waiters); 55 before the woken tried the freed
        # permit first, and 0.3's waiters all woke at each release and tried the permits:
        # about 270 here, growing with the crowd. The bound leaves room for the attempts a
        # loaded machine makes lose (a woken waiter slower than the next release).
        cost = commands_per_hand_over(self, [self.redis_server()], 30, ["--limit", "4"], 4)
        self.assertLessEqual(cost, 34 if SLACK <= 1 else 40)


class FairCrowdOverFiveTest(E2ETest):
    def test_a_fair_crowd_over_five_servers_costs_a_bounded_number_per_hand_over(self):
        # Gathered, about 25 on the busiest server: the head's attempt that takes the lock
        # looks at the queue's head alone (no enrolment, no record, no renewal: it
        # leaves), the others renew the queue's keys only when they are new or past a
        # tenth of their TTL, and a waiter that took the lock on every server leaves no
        # queue behind. 0.3 cost 39 here, 0.4 before the head's shortcut 30-34.
        # Under the sanitizers (REDLOCK_E2E_SLACK > 1) every process is some three times
        # slower, and the queue's keep-alive attempts, which go by time, add about four a
        # hand-over, more on a loaded machine (35.5 measured with a compiler beside it):
        # the bound allows them. The plain build's 30 is the contract's.
        cost = commands_per_hand_over(self, [self.redis_server() for _ in range(5)], 30,
                                      ["--fair"])
        self.assertLessEqual(cost, 30 if SLACK <= 1 else 40)


if __name__ == "__main__":
    unittest.main()
