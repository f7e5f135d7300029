"""`redlock doctor` against real servers: a clean one, an evicting one, replication,
unreachable servers, and the --json shape (parsed back with json.loads)."""

import json
import time
import unittest

from redlock_e2e import SLACK, E2ETest, RedisError, server_version, wait_until

CLEAN = ["--maxmemory-policy", "noeviction", "--appendonly", "no"]
LEVELS = {"ok", "note", "risk"}


class DoctorTest(E2ETest):
    def doctor(self, servers_or_urls, *args):
        urls = [s if isinstance(s, str) else s.url() for s in servers_or_urls]
        return self.run_redlock([a for u in urls for a in ("-s", u)] + ["doctor", *args])

    def doctor_json(self, servers, expected_status):
        r = self.doctor(servers, "--json")
        self.assertStatus(r, expected_status)
        try:
            doc = json.loads(r.stdout)
        except ValueError as e:
            self.fail(f"stdout is not one JSON document ({e}): {r!r}")
        self.assertIsInstance(doc["ok"], bool)
        self.assertIsInstance(doc["risks"], int)
        self.assertEqual(len(doc["servers"]), len(servers))
        for s in doc["servers"]:
            self.assertIsInstance(s["checks"], list)
            for c in s["checks"]:
                self.assertIsInstance(c["name"], str)
                self.assertIn(c["level"], LEVELS)
                self.assertIsInstance(c["message"], str)
                self.assertTrue(c["message"])
        return doc

    @staticmethod
    def checks(server_doc):
        """{check name: check}, each name once."""
        names = [c["name"] for c in server_doc["checks"]]
        assert len(names) == len(set(names)), names
        return {c["name"]: c for c in server_doc["checks"]}

    def assertLinesFit(self, text):
        for line in text.splitlines():
            self.assertLessEqual(len(line), 80, f"line over 80 columns in:\n{text}")

    # -----------------------------------------------------------------------------------

    def test_a_clean_server_passes_with_a_persistence_note(self):
        server = self.redis_server(extra_args=CLEAN)
        r = self.doctor([server])
        self.assertStatus(r, 0)
        self.assertEqual(r.stderr, "")
        self.assertIn(f"127.0.0.1:{server.port}", r.stdout)
        self.assertLinesFit(r.stdout)
        persistence = [l for l in r.stdout.splitlines() if "persistence" in l]
        self.assertEqual(len(persistence), 1, r.stdout)
        self.assertIn("note", persistence[0].lower())
        self.assertIn("appendonly", persistence[0])
        self.assertNotIn("RISK", r.stdout.upper().replace("RISKS", ""))

        doc = self.doctor_json([server], 0)
        self.assertIs(doc["ok"], True)
        self.assertEqual(doc["risks"], 0)
        checks = self.checks(doc["servers"][0])
        for name in ("eviction", "replication", "clock", "persistence", "scripts"):
            self.assertIn(name, checks)
        self.assertEqual(checks["eviction"]["level"], "ok")
        self.assertEqual(checks["replication"]["level"], "ok")
        self.assertEqual(checks["clock"]["level"], "ok")
        self.assertEqual(checks["scripts"]["level"], "ok")
        self.assertEqual(checks["persistence"]["level"], "note")
        self.assertIn("appendonly", checks["persistence"]["message"])
        self.assertFalse([c for c in checks.values() if c["level"] == "risk"])
        s = doc["servers"][0]
        self.assertEqual(s["server"], f"127.0.0.1:{server.port}")
        self.assertIs(s["reachable"], True)
        self.assertEqual(s["maxmemory_policy"], "noeviction")
        self.assertEqual(s["appendonly"], "no")
        self.assertEqual(s["role"], "master")
        # The software and its version as INFO says them, and every mode runs there.
        info = dict(line.split(":", 1) for line in server.command("INFO", "server").splitlines()
                    if ":" in line)
        software = info.get("server_name", "redis")
        version = info["valkey_version" if software == "valkey" else "redis_version"]
        self.assertEqual((s["software"], s["version"]), (software, version))
        self.assertEqual(checks["version"]["level"], "ok")
        self.assertTrue(checks["version"]["message"].startswith(f"{software} {version}"))
        self.assertTrue(checks["version"]["message"].endswith(": every mode's scripts run here"))
        self.assertIn(f"127.0.0.1:{server.port}  {software} {version}, master", r.stdout)
        # Doctor looks; it leaves no keys behind. (Where it has no ACL DRYRUN, on Redis 6, it
        # runs the lock scripts on its probe lock instead: that lock's counters stay.)
        if server_version() >= (7, 0):
            self.assertEqual(server.command("DBSIZE"), 0)
        else:
            counters = {"{lock:redlock-doctor-probe}:fence"}
            wait_until(lambda: set(server.command("KEYS", "*")) <= counters, 10,
                       message="only the probe lock's counters left")

    def test_an_evicting_policy_is_a_risk(self):
        server = self.redis_server(extra_args=["--maxmemory-policy", "allkeys-lru"])
        r = self.doctor([server])
        self.assertStatus(r, 1)
        self.assertLinesFit(r.stdout)
        eviction = [l for l in r.stdout.splitlines() if "eviction" in l]
        self.assertTrue(eviction, r.stdout)
        self.assertIn("RISK", eviction[0].upper())
        self.assertIn("allkeys-lru", r.stdout)

        doc = self.doctor_json([server], 1)
        self.assertIs(doc["ok"], False)
        self.assertGreaterEqual(doc["risks"], 1)
        checks = self.checks(doc["servers"][0])
        self.assertEqual(checks["eviction"]["level"], "risk")
        self.assertIn("allkeys-lru", checks["eviction"]["message"])
        self.assertEqual(checks["replication"]["level"], "ok")

    def test_volatile_policies_with_a_memory_limit_are_a_risk_too(self):
        # Lock keys carry a TTL: volatile-* policies pick exactly them.
        server = self.redis_server(extra_args=["--maxmemory-policy", "volatile-ttl",
                                               "--maxmemory", "100mb"])
        doc = self.doctor_json([server], 1)
        self.assertEqual(self.checks(doc["servers"][0])["eviction"]["level"], "risk")

    def test_one_risky_server_among_clean_ones_fails(self):
        clean = [self.redis_server(extra_args=CLEAN) for _ in range(2)]
        risky = self.redis_server(extra_args=["--maxmemory-policy", "allkeys-random"])
        doc = self.doctor_json(clean + [risky], 1)
        by_server = {s["server"]: s for s in doc["servers"]}
        self.assertEqual(self.checks(by_server[f"127.0.0.1:{risky.port}"])["eviction"]["level"],
                         "risk")
        for s in clean:
            self.assertEqual(self.checks(by_server[f"127.0.0.1:{s.port}"])["eviction"]["level"],
                             "ok")

    def test_an_unreachable_server_exits_69(self):
        dead = self.redis_server()
        dead_url, dead_name = dead.url(), f"127.0.0.1:{dead.port}"
        dead.kill()
        r = self.doctor([dead_url])
        self.assertStatus(r, 69)
        self.assertIn(dead_name, r.stdout + r.stderr)

        # Next to a healthy server: still 69, and the healthy one is still examined.
        good = self.redis_server(extra_args=CLEAN)
        r = self.doctor([good, dead_url])
        self.assertStatus(r, 69)
        self.assertIn(dead_name, r.stdout + r.stderr)
        self.assertIn(f"127.0.0.1:{good.port}", r.stdout)

        doc = self.doctor_json([good, dead_url], 69)
        self.assertIs(doc["ok"], False)
        by_server = {s["server"]: s for s in doc["servers"]}
        self.assertIs(by_server[dead_name]["reachable"], False)
        self.assertTrue(by_server[dead_name]["error"])
        self.assertIs(by_server[f"127.0.0.1:{good.port}"]["reachable"], True)
        self.assertEqual(self.checks(by_server[f"127.0.0.1:{good.port}"])["eviction"]["level"],
                         "ok")

    def test_an_unreachable_server_is_said_once_and_nothing_looks_like_a_result(self):
        dead = self.redis_server()
        dead_url = dead.url()
        dead.kill()
        for args in ([], ["--json"]):
            r = self.doctor([dead_url], *args)
            self.assertStatus(r, 69)
            self.assertEqual(r.stdout, "")
            self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
            self.assertIn(f"cannot check 127.0.0.1:{dead.port}", r.stderr)
        # Next to a healthy server: its report, no verdict over servers not checked.
        good = self.redis_server(extra_args=CLEAN)
        r = self.doctor([good, dead_url])
        self.assertStatus(r, 69)
        self.assertNotIn(f":{dead.port}", r.stdout)
        self.assertNotIn("fit for locking", r.stdout)
        self.assertNotIn("unreachable", r.stdout)

    def test_a_refused_password_is_refused_not_unreachable(self):
        locked = self.redis_server(requirepass="right", extra_args=CLEAN)
        r = self.doctor([locked.url(password="wrong")])
        self.assertStatus(r, 77)
        self.assertEqual(r.stdout, "")
        self.assertIn("authentication refused", r.stderr)
        self.assertNotIn("unreachable", r.stderr)
        good = self.redis_server(extra_args=CLEAN)
        doc = self.doctor_json([good, locked.url(password="wrong")], 77)
        self.assertEqual((doc["unreachable"], doc["refused"]), (0, 1))
        self.assertIs(doc["servers"][1]["refused"], True)

    def test_the_verdict_is_worded_for_one_server_and_for_several(self):
        one = self.redis_server(extra_args=CLEAN)
        r = self.doctor([one])
        self.assertIn("the server is fit for locking (see the note)", r.stdout)
        self.assertNotIn("-0.0ms", r.stdout)
        two = self.redis_server(extra_args=CLEAN)
        r = self.doctor([one, two])
        self.assertIn("all 2 servers are fit for locking (see the notes)", r.stdout)

    def test_a_frozen_server_costs_one_timeout_not_one_per_check(self):
        # Before: 17 checks one after another, each waiting out the 1 s command timeout.
        frozen = self.redis_server(extra_args=CLEAN)
        good = self.redis_server(extra_args=CLEAN)
        frozen.freeze()
        try:
            started = time.monotonic()
            r = self.doctor([frozen, good])
            took = time.monotonic() - started
        finally:
            frozen.thaw()
        self.assertStatus(r, 69)
        self.assertRegex(r.stdout, rf"127\.0\.0\.1:{good.port}  (redis|valkey) ")
        self.assertIn("timed out", r.stderr)
        # One connect or command timeout (1 s each) and the healthy server's checks; well
        # under two of them even on a loaded machine (the old behaviour took 17).
        self.assertLess(took, 6 * SLACK, r.stderr)

    def test_replication_is_a_risk_on_the_replica_and_on_the_master(self):
        master = self.redis_server(extra_args=CLEAN + ["--repl-diskless-sync-delay", "0"])
        replica = self.redis_server(
            extra_args=CLEAN + ["--replicaof", "127.0.0.1", str(master.port)])

        def replica_connected():
            try:
                info = master.command("INFO", "replication")
            except (OSError, RedisError):
                return False
            return "connected_slaves:1\r\n" in info
        wait_until(replica_connected, 30.0, 0.05, message="the replica to connect to the master")

        for server, role in ((replica, "slave"), (master, "master")):
            with self.subTest(role=role):
                r = self.doctor([server])
                self.assertStatus(r, 1)
                self.assertLinesFit(r.stdout)
                lines = [l for l in r.stdout.splitlines() if "replication" in l]
                self.assertTrue(lines, r.stdout)
                self.assertIn("RISK", lines[0].upper())

                doc = self.doctor_json([server], 1)
                self.assertIs(doc["ok"], False)
                s = doc["servers"][0]
                self.assertEqual(s["role"], role)
                checks = self.checks(s)
                self.assertEqual(checks["replication"]["level"], "risk",
                                 checks["replication"])
                self.assertEqual(checks["eviction"]["level"], "ok")
        self.assertEqual(self.doctor_json([master], 1)["servers"][0]["replicas"], 1)

    def test_a_replica_without_acl_dryrun_is_a_replication_risk_not_unreachable(self):
        # Where the user may not run ACL DRYRUN, the acl check runs the lock scripts on a
        # probe lock; a replica refuses its writes: it is not probed, and says so.
        master = self.redis_server(extra_args=CLEAN)
        replica = self.redis_server(
            acl_user=("locker", "pw", "on ~* +@all -acl"),
            extra_args=CLEAN + ["--replicaof", "127.0.0.1", str(master.port)])
        doc = self.doctor_json([replica.url(username="locker", password="pw")], 1)
        checks = self.checks(doc["servers"][0])
        self.assertEqual(checks["replication"]["level"], "risk")
        self.assertEqual(checks["acl"]["level"], "note")
        self.assertEqual(checks["acl"]["message"], "not checked: ACL DRYRUN is not allowed, and "
                                                   "a replica refuses the probe lock's writes")

    def test_a_lock_script_calling_what_the_server_lacks_is_a_risk_naming_the_mode(self):
        # ZRANK renamed away: the --fair scripts call it. Without ACL DRYRUN doctor runs
        # every script on its probe lock, and says which mode fails.
        server = self.redis_server(acl_user=("locker", "pw", "on ~* +@all -acl"),
                                   extra_args=CLEAN + ["--rename-command", "ZRANK", ""])
        doc = self.doctor_json([server.url(username="locker", password="pw")], 1)
        version = self.checks(doc["servers"][0])["version"]
        self.assertEqual(version["level"], "risk")
        self.assertIn(": a lock script calls a command or option this server lacks (--fair "
                      "fails: ERR ", version["message"])
        # "Unknown Redis command called from script" (Valkey: "Unknown command ...").
        self.assertRegex(version["message"], r"nknown (Redis )?command called from")
        r = self.doctor([server.url(username="locker", password="pw")])
        self.assertStatus(r, 1)
        self.assertIn("1 risk found: a mode fails where the server lacks what it needs\n",
                      r.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
