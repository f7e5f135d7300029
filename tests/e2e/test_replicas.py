"""replicas = N: a lock write counts on a
server only once N of its replicas acknowledged it (WAIT)."""

import unittest

from redlock_e2e import E2ETest, wait_until


class ReplicasTest(E2ETest):
    def setUp(self):
        super().setUp()
        self.master = self.redis_server()
        self.replica = self.redis_server(
            extra_args=("--replicaof", "127.0.0.1", str(self.master.port)))
        wait_until(lambda: b"master_link_status:up" in self.info(self.replica), 20,
                   message="the replica to sync")
        wait_until(lambda: b"connected_slaves:1" in self.info(self.master), 20,
                   message="the master to see its replica")

    def info(self, server):
        reply = server.command("INFO", "replication")
        return reply if isinstance(reply, bytes) else reply.encode()

    def config(self, text):
        return self.write_file("config.toml", text)

    def run_with(self, config_text, *run_args):
        return self.run_redlock(["-c", self.config(config_text), "-s", self.master.url(),
                                 *run_args])

    def test_a_write_acknowledged_by_the_replica_counts(self):
        r = self.run_with("replicas = 1\n", "run", "-k", "r", "--", "sh", "-c",
                          'redis-cli -p "$1" GET lock:r', "sh", str(self.replica.port))
        self.assertStatus(r, 0)
        self.assertRegex(r.stdout, r"^[0-9a-f]{32}\n$")  # on the replica before PROGRAM ran
        self.assertKeyGone(self.master, "lock:r")

    def test_more_replicas_than_the_master_has_never_acquires(self):
        r = self.run_with("replicas = 2\n", "run", "-k", "r", "--", "touch", self.path("ran"))
        self.assertStatus(r, 69)
        self.assertIn("written, but only 1 of the 2 replicas it needs (replicas = 2) "
                      "acknowledged it in time", r.stderr)
        self.assertMessages(r.stderr)
        self.assertKeyGone(self.master, "lock:r")  # the attempt was cleaned up

    def test_a_frozen_replica_fails_the_write_within_the_timeout(self):
        self.replica.freeze()
        self.addCleanup(self.replica.thaw)
        r = self.run_with('replicas = 1\ncommand_timeout = "400ms"\n', "run", "-k", "r", "--",
                          "true")
        self.assertStatus(r, 69)
        self.assertIn("only 0 of the 1 replicas", r.stderr)
        self.assertKeyGone(self.master, "lock:r")

    def test_a_per_server_value_over_redlock(self):
        # The master (replicas = 1) and two plain servers. Which servers a round waits for
        # depends on who answers first, so each case takes a server out to force the
        # majority through the one it checks.
        plain = [self.redis_server(), self.redis_server()]
        config = self.config(f'''[[servers]]
url = "{self.master.url()}"
replicas = 1
[[servers]]
url = "{plain[0].url()}"
[[servers]]
url = "{plain[1].url()}"
command_timeout = "400ms"
''')
        # One plain server frozen: the majority needs the master, whose write counts only
        # once the replica has it, so PROGRAM reads the token on the replica.
        plain[1].freeze()
        r = self.run_redlock(["-c", config, "run", "-k", "r", "--", "sh", "-c",
                              'redis-cli -p "$1" GET lock:r', "sh", str(self.replica.port)])
        plain[1].thaw()
        self.assertStatus(r, 0)
        self.assertRegex(r.stdout, r"^[0-9a-f]{32}\n$")
        self.assertKeyGone(self.master, "lock:r")

        # The replica frozen: the master cannot count, the plain servers need no replica
        # and make the majority on their own.
        self.replica.freeze()
        self.addCleanup(self.replica.thaw)
        r = self.run_redlock(["-c", config, "-v", "run", "-k", "r", "--", "true"])
        self.assertStatus(r, 0)
        for server in plain:
            self.assertKeyGone(server, "lock:r")

    def test_doctor_says_whether_replicas_covers_the_replication(self):
        def said(r):  # the text output, unwrapped
            return " ".join(r.stdout.split())

        r = self.run_redlock(["-s", self.master.url(), "doctor"])
        self.assertIn("RISK replication master with 1 replica", said(r))
        self.assertIn("set replicas = 1", said(r))
        r = self.run_with("replicas = 1\n", "doctor")
        self.assertIn("note replication master with 1 replica; replicas = 1: a lock write "
                      "counts only once that many have it", said(r))
        r = self.run_with("replicas = 3\n", "doctor")
        self.assertIn("replicas = 3, but the master has 1 replica connected", said(r))

    def test_bad_values_are_config_errors(self):
        for text in ("replicas = -1\n", 'replicas = "1"\n', "replicas = 101\n"):
            with self.subTest(text=text):
                r = self.run_with(text, "run", "-k", "r", "--", "true")
                self.assertStatus(r, 78)
                self.assertIn("'replicas' must be", r.stderr)


if __name__ == "__main__":
    unittest.main()
