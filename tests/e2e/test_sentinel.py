"""Redis Sentinel: a
redis-sentinel://HOST[:PORT][,...]#MASTER server is the master the sentinels name, checked
with ROLE, and followed after a real failover (kill -9 of the master)."""

import os
import unittest

from redlock_e2e import E2ETest, FakeRedis, SentinelServer, server_version, wait_until


def resp_array(*items):
    out = f"*{len(items)}\r\n"
    for item in items:
        out += f"${len(item)}\r\n{item}\r\n"
    return out.encode()


class SentinelTest(E2ETest):
    def setUp(self):
        super().setUp()
        self.master = self.redis_server()
        self.replica = self.redis_server(
            extra_args=("--replicaof", "127.0.0.1", str(self.master.port)))
        wait_until(lambda: b"master_link_status:up" in self.info(self.replica), 20,
                   message="the replica to sync")
        self.sentinel = SentinelServer(self.master)
        self.addCleanup(self.sentinel.stop)
        # A failover needs the sentinel to know the replica (it learns it from the master).
        wait_until(lambda: self.sentinel.command("SENTINEL", "replicas", "mymaster"), 20,
                   interval=0.1, message="the sentinel to find the replica")

    def info(self, server):
        reply = server.command("INFO", "replication")
        return reply if isinstance(reply, bytes) else reply.encode()

    def test_a_run_locks_the_master_the_sentinel_names(self):
        r = self.run_redlock(["-v", "-s", self.sentinel.url(), "run", "-k", "s", "--",
                              "redis-cli", "-p", str(self.master.port), "GET", "lock:s"])
        self.assertStatus(r, 0)
        self.assertRegex(r.stdout, r"^[0-9a-f]{32}\n$")  # held on the master while it ran
        self.assertIn(f"sentinel 127.0.0.1:{self.sentinel.port} names "
                      f"127.0.0.1:{self.master.port} as master 'mymaster'", r.stderr)
        self.assertKeyGone(self.master, "lock:s")

    def test_a_sentinel_managed_master_is_one_server_of_a_redlock(self):
        others = [self.redis_server(), self.redis_server()]
        servers = ["-s", self.sentinel.url()] + [a for o in others for a in ("-s", o.url())]
        # The third frozen: the majority is the master and the other, whichever is quicker
        # (reaching the master costs a question to the sentinel first).
        others[1].freeze()
        self.addCleanup(others[1].thaw)
        r = self.run_redlock(["-v", *servers, "run", "-k", "rl", "--", "sh", "-c",
                              f"redis-cli -p {self.master.port} GET lock:rl; "
                              f"redis-cli -p {others[0].port} GET lock:rl"])
        self.assertStatus(r, 0)
        tokens = r.stdout.split()
        self.assertEqual(len(tokens), 2, r.stdout)
        self.assertEqual(tokens[0], tokens[1])  # one lock, on the master and the other
        self.assertIn("fence 1", r.stderr)
        for server in (self.master, others[0]):
            self.assertKeyGone(server, "lock:rl")

    def test_a_dead_sentinel_is_skipped_for_the_next(self):
        dead = self.redis_server()
        dead_port = dead.port
        dead.stop()
        url = f"redis-sentinel://127.0.0.1:{dead_port},127.0.0.1:{self.sentinel.port}#mymaster"
        r = self.run_redlock(["-s", url, "run", "-k", "s", "--", "true"])
        self.assertStatus(r, 0)
        r = self.run_redlock(["-s", url, "status", "-k", "s"])
        self.assertStatus(r, 0)
        self.assertIn("free", r.stdout)

    def test_an_unknown_master_name_or_no_sentinel_is_unavailable(self):
        url = f"redis-sentinel://127.0.0.1:{self.sentinel.port}#nosuch"
        r = self.run_redlock(["-s", url, "run", "-k", "s", "--", "touch", self.path("ran")])
        self.assertStatus(r, 69)
        self.assertIn(f"no sentinel gave the address of master 'nosuch': 127.0.0.1:"
                      f"{self.sentinel.port}: does not know master 'nosuch'", r.stderr)
        self.assertMessages(r.stderr)
        self.assertFalse(os.path.exists(self.path("ran")))
        dead = self.redis_server()
        dead_port = dead.port
        dead.stop()
        r = self.run_redlock(["-s", f"redis-sentinel://127.0.0.1:{dead_port}#mymaster", "run",
                              "-k", "s", "--", "true"])
        self.assertStatus(r, 69)
        self.assertIn(f"no sentinel gave the address of master 'mymaster': 127.0.0.1:"
                      f"{dead_port}: Connection refused", r.stderr)

    def test_a_sentinel_naming_a_replica_is_not_believed(self):
        fake = FakeRedis(lambda args: resp_array("127.0.0.1", str(self.replica.port)))
        self.addCleanup(fake.stop)
        r = self.run_redlock(["-s", f"redis-sentinel://127.0.0.1:{fake.port}#mymaster", "run",
                              "-k", "s", "--", "touch", self.path("ran")])
        self.assertStatus(r, 69)
        self.assertIn(f"master 127.0.0.1:{self.replica.port}: the sentinels name it master "
                      "'mymaster', but it is a slave (ROLE); a failover in progress?", r.stderr)
        self.assertFalse(os.path.exists(self.path("ran")))
        self.assertKeyGone(self.master, "lock:s")

    def test_a_user_without_role_is_told_so(self):
        channels = ["&*"] if server_version() >= (6, 2) else []  # 6.0 has no channel rules
        self.master.command("ACL", "SETUSER", "locker", "on", ">pw", "~*", *channels, "+@all",
                            "-role")
        url = f"redis-sentinel://locker:pw@127.0.0.1:{self.sentinel.port}#mymaster"
        r = self.run_redlock(["-s", url, "run", "-k", "s", "--", "true"])
        self.assertStatus(r, 77)
        self.assertIn("ROLE refused (a master behind redis-sentinel:// is checked with ROLE): "
                      "NOPERM", r.stderr)
        self.assertNotIn("pw", r.stderr.replace("pwd", ""))

    def test_the_sentinels_own_password_is_sent_to_them_only(self):
        fake = FakeRedis(lambda args: b"+OK\r\n" if args[0].upper() == b"AUTH" else
                         resp_array("127.0.0.1", str(self.master.port)))
        self.addCleanup(fake.stop)
        config = self.write_file("config.toml", f'''[[servers]]
url = "redis-sentinel://127.0.0.1:{fake.port}#mymaster"
sentinel_username = "watcher"
sentinel_password_env = "SENTINEL_PW"
''')
        r = self.run_redlock(["-c", config, "run", "-k", "s", "--", "true"],
                             env=self.env({"SENTINEL_PW": "sekrit"}))
        self.assertStatus(r, 0)
        self.assertIn([b"AUTH", b"watcher", b"sekrit"], fake.commands)
        r = self.run_redlock(["-c", self.write_file("bad.toml", f'''[[servers]]
url = "{self.master.url()}"
sentinel_password_env = "SENTINEL_PW"
'''), "run", "-k", "s", "--", "true"], env=self.env({"SENTINEL_PW": "x"}))
        self.assertStatus(r, 78)
        self.assertIn("bad.toml:3:25: sentinel_* keys apply to a redis-sentinel:// url", r.stderr)

    def test_a_run_follows_a_failover_and_releases_on_the_new_master(self):
        # A master killed while PROGRAM runs: renewals fail until the sentinel has promoted
        # the replica, then go there (the lock came with the replication: replicas = 1 made
        # sure of it before PROGRAM started), and the release ends it there.
        config = self.write_file("config.toml", f'''ttl = "10s"
replicas = 1
[[servers]]
url = "{self.sentinel.url()}"
''')
        go = self.path("go")
        proc = self.start_redlock(["-v", "-c", config, "run", "-k", "fo", "--", "sh", "-c",
                                   f'touch {self.path("started")}; '
                                   f'while [ ! -e {go} ]; do sleep 0.05; done'])
        wait_until(lambda: os.path.exists(self.path("started")), 15, proc=proc,
                   message="PROGRAM to start")
        self.assertIsNotNone(self.replica.command("GET", "lock:fo"))
        self.master.kill()
        wait_until(lambda: self.sentinel.master_address() == ("127.0.0.1", self.replica.port),
                   30, interval=0.1, message="the sentinel to promote the replica")
        # Renewed on the new master: its lease starts again from the full TTL.
        # Renewed on the new master: its PTTL, falling since the promotion, goes up.
        last = [self.replica.command("PTTL", "lock:fo")]

        def renewed():
            now = self.replica.command("PTTL", "lock:fo")
            went_up, last[0] = now > last[0], now
            return went_up

        wait_until(renewed, 15, interval=0.05, proc=proc, message="a renewal on the new master")
        open(go, "w").close()
        proc.wait(30)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn(f"names 127.0.0.1:{self.replica.port} as master 'mymaster'", proc.stderr)
        self.assertKeyGone(self.replica, "lock:fo")

    def test_status_and_doctor_read_through_the_sentinel(self):
        holder = self.holder(["-k", "held"], global_args=["-s", self.sentinel.url()])
        holder.wait_ready()
        r = self.run_redlock(["-s", self.sentinel.url(), "status", "-k", "held"])
        self.assertStatus(r, 0)
        self.assertIn("held", r.stdout)
        r = self.run_redlock(["-s", self.sentinel.url(), "doctor"])
        self.assertIn(self.sentinel.url().removeprefix("redis-sentinel://"), r.stdout)
        self.assertIn("replicat", r.stdout)  # the master has a replica: doctor says so
        self.assertRegex(r.stdout, f"master 127.0.0.1:{self.master.port}, named by the "
                                   r"sentinels for\s+'mymaster'")
        self.assertEqual(holder.release(), 0)


class SentinelAnswerTest(E2ETest):
    """What a sentinel answers is checked before it is used (no real sentinel needed)."""

    def test_a_port_out_of_range_is_refused_not_wrapped_around(self):
        # 65536 + P reaches port P once cut to 16 bits: a server there must never be asked.
        target = self.fake_redis(lambda args: b"-ERR should not be asked\r\n")
        for port in (str(65536 + target.port), "0", "-1", "6379x"):
            with self.subTest(port=port):
                sentinel = self.fake_redis(lambda args, port=port: resp_array("127.0.0.1", port))
                r = self.run_redlock(["-s", f"redis-sentinel://127.0.0.1:{sentinel.port}#mymaster",
                                      "run", "-k", "s", "--", "touch", self.path("ran")])
                self.assertStatus(r, 69)
                self.assertEqual(r.stderr, f"redlock: cannot lock 's': sentinel:127.0.0.1:"
                                           f"{sentinel.port}#mymaster: no sentinel gave the "
                                           f"address of master 'mymaster': 127.0.0.1:"
                                           f"{sentinel.port}: unexpected port {port}\n")
                self.assertFalse(os.path.exists(self.path("ran")))
        self.assertEqual(target.commands, [])


if __name__ == "__main__":
    unittest.main()
