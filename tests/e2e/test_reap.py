"""Locks of an earlier boot (issue 37): `redlock reap`, and a run that takes over.

A holder's metadata names its machine (machine id and host name) and its boot
(/proc/sys/kernel/random/boot_id). A lock held by this machine under an earlier boot is
held by nobody: `reap` releases it with its own token (history entry `reaped`, waiters
woken), and a run on this machine that finds it takes it over at once. The earlier boot
is forged here by rewriting the metadata of a lock taken now: another boot id, a boot
begun before this one, and a lease that has not been renewed since this machine booted
(issue 46). A lock of another machine, of another host with the same machine id (a
cloned image), of this boot, or without metadata is never touched; nor one of this
machine's identity under another boot that renewed after this machine booted (a clone
not renamed, alive), which `reap` and a waiting run leave, saying why.
"""

import json
import time

from redlock_e2e import SLACK, E2ETest, wait_until

EARLIER_BOOT = "00000000-0000-4000-8000-000000000000"
TTL = "300s"  # far longer than any test: a lock gone was released, not expired
LEFT_MS = 300_000
CLONE = "another machine with the same identity?"


def uptime_ms():
    """This machine's boot clock, as redlock reads it (CLOCK_BOOTTIME)."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * 1000)


def iso(unix_ms):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(unix_ms // 1000)) + \
        ".%03dZ" % (unix_ms % 1000)


def earlier_boot_fields():
    """The metadata of a run of an earlier boot of this machine: that boot began an hour
    before this one, the run acquired when it was up a minute, and its lease, with
    LEFT_MS left, was last renewed well before this boot: by more than the drift
    allowance (1% of the lease plus 2 ms) of a lease that long."""
    up = uptime_ms()
    booted = int(time.time() * 1000) - up
    before_boot = up // 50 + 600_000
    return {"boot": EARLIER_BOOT, "acquired_at": iso(booted - 3_600_000 + 60_000),
            "process": "60000", "ttl_ms": str(up + before_boot + LEFT_MS)}


class ReapTest(E2ETest):
    def setUp(self):
        super().setUp()
        self.server = self.redis_server()
        self.g = ["-s", self.server.url()]

    def acquire(self, name, servers=None):
        args = []
        for s in servers or [self.server]:
            args += ["-s", s.url()]
        r = self.run_redlock(args + ["acquire", "-t", TTL, name])
        self.assertStatus(r, 0)
        return r.stdout.strip()

    def forge(self, name, servers=None, permit=None, **fields):
        """Rewrites NAME's metadata as a run of an earlier boot leaves it, whose lease shows
        no renewal since this machine booted (earlier_boot_fields; FIELDS on top), and sets
        the lease left on the lock (or on its permit PERMIT) to LEFT_MS."""
        fields = {**earlier_boot_fields(), **fields}
        for s in servers or [self.server]:
            key = f"lock:{name}" if permit is None else f"{{lock:{name}}}:permit:{permit}"
            meta = f"{{lock:{name}}}:meta" if permit is None else key + ":meta"
            self.assertGreater(s.command("EXISTS", meta), 0, f"no metadata at {meta}")
            for field, value in fields.items():
                s.command("HSET", meta, field, value)
            for k in (key, meta):
                s.command("PEXPIRE", k, LEFT_MS)

    def held(self, name, server=None):
        return (server or self.server).command("EXISTS", f"lock:{name}") == 1

    def history(self, name, global_args=None):
        r = self.run_redlock((global_args or self.g) + ["history", "--json", name])
        self.assertStatus(r, 0)
        return json.loads(r.stdout)["runs"]

    def outcomes(self, name, global_args=None):
        return [run["outcome"] for run in self.history(name, global_args)]

    # -- redlock reap

    def test_reap_releases_this_machines_earlier_boot_and_nothing_else(self):
        self.acquire("old")
        self.forge("old")
        self.acquire("now")  # this boot
        self.acquire("elsewhere")
        self.forge("elsewhere", machine="0123456789abcdef0123456789abcdef")
        self.acquire("clone")  # another host with this machine id: a cloned image
        self.forge("clone", host="some-clone")
        self.server.command("SET", "lock:foreign", "token-of-another-client", "PX", 300000)

        dry = self.run_redlock(self.g + ["reap", "--dry-run"])
        self.assertStatus(dry, 0)
        self.assertIn("would reap 'old'", dry.stdout)
        self.assertEqual(len(dry.stdout.splitlines()), 1, dry.stdout)
        self.assertTrue(self.held("old"), "--dry-run released")

        r = self.run_redlock(self.g + ["reap"])
        self.assertStatus(r, 0)
        self.assertIn("reaped 'old'", r.stdout)
        self.assertIn(EARLIER_BOOT, r.stdout)
        self.assertEqual(len(r.stdout.splitlines()), 1, r.stdout)
        self.assertFalse(self.held("old"))
        for name in ("now", "elsewhere", "clone", "foreign"):
            self.assertTrue(self.held(name), f"'{name}' was reaped")

        runs = self.history("old")
        self.assertEqual([run["outcome"] for run in runs], ["reaped"], runs)
        # The dead run's holder, reaped by this reap.
        self.assertGreater(runs[0]["by"]["pid"], 0, runs[0])
        self.assertIn("earlier boot", runs[0]["note"])

        again = self.run_redlock(self.g + ["reap"])
        self.assertStatus(again, 0)
        self.assertEqual(again.stdout, "")
        self.assertIn("nothing to reap", again.stderr)

    def test_reap_json_and_pattern(self):
        self.acquire("job-a")
        self.forge("job-a")
        self.acquire("other")
        self.forge("other")
        r = self.run_redlock(self.g + ["reap", "-p", "job-*", "--json"])
        self.assertStatus(r, 0)
        doc = json.loads(r.stdout)
        self.assertFalse(doc["dry_run"])
        self.assertEqual([x["name"] for x in doc["reaped"]], ["job-a"])
        self.assertEqual(doc["reaped"][0]["boot_id"], EARLIER_BOOT)
        self.assertEqual(doc["reaped"][0]["servers"], 1)
        self.assertEqual(doc["reaped"][0]["permit"], 0)
        self.assertTrue(self.held("other"), "-p reaped a name it does not match")

    def test_reap_wakes_a_waiter_at_once(self):
        self.acquire("woken")
        waiter = self.start_redlock(self.g + ["run", "-k", "woken", "-w", "120s", "--",
                                              "echo", "ran"])
        wait_until(lambda: self.server.command("ZCARD", "{lock:woken}:waiters") == 1,
                   15 * SLACK, proc=waiter, message="the waiter on the wait list")
        # Of this boot when the waiter looked; of an earlier one now (as after a reboot
        # of the holder's machine while a waiter elsewhere waits).
        self.forge("woken")
        self.assertStatus(self.run_redlock(self.g + ["reap"]), 0)
        # Woken by the release: long before the 300 s TTL.
        self.assertEqual(waiter.wait(30), 0, waiter.stderr)
        self.assertEqual(waiter.stdout.strip(), "ran")

    def test_reap_frees_only_the_permit_of_the_earlier_boot(self):
        holders = [self.holder(["-k", "sem", "--limit", "2", "-t", TTL], global_args=self.g)
                   for _ in range(2)]
        for h in holders:
            h.wait_ready()
        self.forge("sem", permit=1)
        r = self.run_redlock(self.g + ["reap"])
        self.assertStatus(r, 0)
        self.assertIn("reaped 'sem' (permit 1 of 2)", r.stdout)
        self.assertEqual(self.server.command("EXISTS", "{lock:sem}:permit:1"), 0)
        self.assertEqual(self.server.command("EXISTS", "{lock:sem}:permit:2"), 1)
        self.assertEqual(self.server.command("ZCARD", "lock:sem"), 1)

    # -- a holder of this machine's identity under another boot, alive (issue 46)

    def fake_holder(self, name, ttl_ms, left_ms):
        """A holder written into Redis directly, as a run of this machine's identity (its
        machine id and host name) under another boot leaves its lock: a lease of TTL_MS of
        which LEFT_MS are left, so last renewed TTL_MS - LEFT_MS ago. Its boot began an hour
        before this one: only its lease tells it from this machine's earlier boot."""
        if not hasattr(self, "identity"):
            self.acquire("whoami")  # this boot's: what redlock writes for this machine
            self.identity = [self.server.command("HGET", "{lock:whoami}:meta", field)
                             for field in ("machine", "host")]
        machine, host = self.identity
        up, now = uptime_ms(), int(time.time() * 1000)
        token = "c10e" * 8
        self.server.command("SET", f"lock:{name}", token, "PX", left_ms)
        meta = f"{{lock:{name}}}:meta"
        self.server.command("HSET", meta, "token", token, "host", host, "pid", "4242",
                            "user", "someone", "command", "job.sh", "acquired_at",
                            iso(now - 1000), "ttl_ms", str(ttl_ms),
                            "process", str(up + 3_600_000 - 1000), "machine", machine,
                            "boot", EARLIER_BOOT)
        self.server.command("PEXPIRE", meta, left_ms)
        return token

    def live_holder(self, name, ttl_ms=30_000):
        """A fake_holder that renews as a live run does: call again to renew."""
        return self.fake_holder(name, ttl_ms, ttl_ms)

    def assertStillHeldBy(self, name, token):
        self.assertEqual(self.server.command("GET", f"lock:{name}"), token)

    def test_reap_leaves_a_holder_that_renewed_after_this_machine_booted(self):
        token = self.live_holder("clone")
        r = self.run_redlock(self.g + ["reap"])
        self.assertStatus(r, 0)
        self.assertIn("not reaped 'clone': held by someone@", r.stdout)
        self.assertRegex(r.stdout, r"under boot 00000000-0000-4000-8000-000000000000; "
                         r"renewed \d+\.\ds ago, after this machine booted \(.* ago\): "
                         + CLONE)
        self.assertEqual(len(r.stdout.splitlines()), 1, r.stdout)
        self.assertStillHeldBy("clone", token)
        self.assertEqual(self.outcomes("clone"), [])

        self.live_holder("clone")
        j = self.run_redlock(self.g + ["reap", "--json"])
        self.assertStatus(j, 0)
        doc = json.loads(j.stdout)
        self.assertEqual(doc["reaped"], [])
        self.assertEqual([x["name"] for x in doc["not_reaped"]], ["clone"])
        self.assertIn(CLONE, doc["not_reaped"][0]["why_not"])
        self.assertLess(doc["not_reaped"][0]["renewed_ago_ms"], 30_000)
        self.assertStillHeldBy("clone", token)

    def test_a_run_does_not_take_over_a_holder_that_renewed_after_this_machine_booted(self):
        token = self.live_holder("clone")
        r = self.run_redlock(self.g + ["run", "-n", "-k", "clone", "--", "echo", "ran"])
        self.assertStatus(r, 75)
        self.assertEqual(r.stdout, "")
        self.assertIn("'clone' is held by this machine's identity under another boot "
                      "(someone@", r.stderr)
        self.assertEqual(r.stderr.count(CLONE), 1, r.stderr)
        self.assertStillHeldBy("clone", token)

        # A waiting run: says so once, and waits (here, until its --wait runs out).
        self.live_holder("clone")
        w = self.run_redlock(self.g + ["run", "-w", "2s", "-k", "clone", "--", "echo", "ran"])
        self.assertStatus(w, 75)
        self.assertEqual(w.stdout, "")
        self.assertEqual(w.stderr.count("not taken over"), 1, w.stderr)
        self.assertEqual(w.stderr.count(CLONE), 1, w.stderr)
        self.assertStillHeldBy("clone", token)
        self.assertEqual(self.outcomes("clone"), ["gave-up", "skipped-held"])

    def test_reap_and_a_run_take_over_a_holder_that_has_not_renewed_since_boot(self):
        # The same holder, its lease last renewed well before this machine booted.
        def dead(name):
            up = uptime_ms()
            return self.fake_holder(name, up + up // 50 + 600_000 + LEFT_MS, LEFT_MS)

        dead("gone")
        r = self.run_redlock(self.g + ["reap"])
        self.assertStatus(r, 0)
        self.assertRegex(r.stdout, r"^reaped 'gone': held by someone@.* under boot "
                         r"00000000-0000-4000-8000-000000000000, last renewed .* ago, before "
                         r"this machine booted \(.* ago\); released on 1 of 1 server\n$")
        self.assertFalse(self.held("gone"))

        dead("gone")
        w = self.run_redlock(self.g + ["run", "-w", "200s", "-k", "gone", "--", "echo", "ran"],
                             timeout=30)
        self.assertStatus(w, 0)
        self.assertEqual(w.stdout.strip(), "ran")
        self.assertIn("'gone' was held by this machine under an earlier boot (someone@", w.stderr)
        self.assertEqual(sorted(self.outcomes("gone")), ["ran", "reaped", "reaped"])

    def test_reap_without_servers_is_69(self):
        r = self.run_redlock(["-s", "redis://127.0.0.1:1", "reap"])
        self.assertStatus(r, 69)

    # -- a run takes over

    def test_a_run_takes_over_its_earlier_boots_lock_at_once(self):
        self.acquire("job")
        self.forge("job")
        r = self.run_redlock(self.g + ["run", "-n", "-k", "job", "--", "echo", "ran"])
        self.assertStatus(r, 0)
        self.assertEqual(r.stdout.strip(), "ran")
        self.assertIn("earlier boot", r.stderr)
        # No refusal recorded: the run was not skipped.
        self.assertEqual(self.outcomes("job"), ["reaped", "ran"])

    def test_a_waiting_run_takes_over_at_once_not_after_the_ttl(self):
        self.acquire("job")
        self.forge("job")
        r = self.run_redlock(self.g + ["run", "-w", "200s", "-k", "job", "--", "true"],
                             timeout=30)
        self.assertStatus(r, 0)

    def test_a_run_does_not_take_over_another_machines_or_this_boots_lock(self):
        self.acquire("theirs")
        self.forge("theirs", machine="0123456789abcdef0123456789abcdef")
        self.acquire("mine")
        for name in ("theirs", "mine"):
            r = self.run_redlock(self.g + ["run", "-n", "-k", name, "--", "true"])
            self.assertStatus(r, 75)
            self.assertTrue(self.held(name))
            self.assertEqual(self.outcomes(name), ["skipped-held"])

    def test_a_run_over_three_servers_takes_over(self):
        servers = [self.server, self.redis_server(), self.redis_server()]
        g = [w for s in servers for w in ("-s", s.url())]
        self.acquire("job", servers)
        self.forge("job", servers)
        r = self.run_redlock(g + ["run", "-n", "-k", "job", "--", "echo", "ran"])
        self.assertStatus(r, 0)
        self.assertEqual(r.stdout.strip(), "ran")
        for s in servers:
            self.assertFalse(self.held("job", s))

    def test_a_permit_run_takes_over_a_permit_of_the_earlier_boot(self):
        holders = [self.holder(["-k", "sem", "--limit", "2", "-t", TTL], global_args=self.g)
                   for _ in range(2)]
        for h in holders:
            h.wait_ready()
        self.forge("sem", permit=2)
        r = self.run_redlock(self.g + ["run", "-n", "-k", "sem", "--limit", "2", "--",
                                       "echo", "ran"])
        self.assertStatus(r, 0)
        self.assertEqual(r.stdout.strip(), "ran")
