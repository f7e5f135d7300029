"""Locks of an earlier boot (issue 37): `redlock reap`, and a run that takes over.

A holder's metadata names its machine (machine id and host name) and its boot
(/proc/sys/kernel/random/boot_id). A lock held by this machine under an earlier boot is
held by nobody: `reap` releases it with its own token (history entry `reaped`, waiters
woken), and a run on this machine that finds it takes it over at once. The earlier boot
is forged here by rewriting the `boot` field of a lock taken now; a lock of another
machine, of another host with the same machine id (a cloned image), of this boot, or
without metadata is never touched.
"""

import json

from redlock_e2e import SLACK, E2ETest, wait_until

EARLIER_BOOT = "00000000-0000-4000-8000-000000000000"
TTL = "300s"  # far longer than any test: a lock gone was released, not expired


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

    def forge(self, name, servers=None, meta=None, **fields):
        """Rewrites fields of NAME's metadata (default: boot = an earlier boot)."""
        fields = fields or {"boot": EARLIER_BOOT}
        for s in servers or [self.server]:
            key = meta or f"{{lock:{name}}}:meta"
            self.assertGreater(s.command("EXISTS", key), 0, f"no metadata at {key}")
            for field, value in fields.items():
                s.command("HSET", key, field, value)

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
        self.forge("elsewhere", machine="0123456789abcdef0123456789abcdef",
                   boot=EARLIER_BOOT)
        self.acquire("clone")  # another host with this machine id: a cloned image
        self.forge("clone", host="some-clone", boot=EARLIER_BOOT)
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
        self.forge("sem", meta="{lock:sem}:permit:1:meta")
        r = self.run_redlock(self.g + ["reap"])
        self.assertStatus(r, 0)
        self.assertIn("reaped 'sem' (permit 1 of 2)", r.stdout)
        self.assertEqual(self.server.command("EXISTS", "{lock:sem}:permit:1"), 0)
        self.assertEqual(self.server.command("EXISTS", "{lock:sem}:permit:2"), 1)
        self.assertEqual(self.server.command("ZCARD", "lock:sem"), 1)

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
        self.forge("theirs", machine="0123456789abcdef0123456789abcdef", boot=EARLIER_BOOT)
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
        self.forge("sem", meta="{lock:sem}:permit:2:meta")
        r = self.run_redlock(self.g + ["run", "-n", "-k", "sem", "--limit", "2", "--",
                                       "echo", "ran"])
        self.assertStatus(r, 0)
        self.assertEqual(r.stdout.strip(), "ran")
