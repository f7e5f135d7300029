"""Redis Cluster: a server entry that is a
cluster node is one lock server; MOVED and ASK are followed, the slot's owner is learned,
and a slot migrated while a lock is held does not lose it."""

import os
import re
import shutil
import unittest

from redlock_e2e import E2ETest, RedisCluster, wait_until
from test_tls import make_certs


class ClusterTest(E2ETest):
    @classmethod
    def setUpClass(cls):
        cls.cluster = RedisCluster()

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()

    def setUp(self):
        super().setUp()
        self.entry = self.cluster.nodes[0]  # the node redlock is given
        self.args = ["-s", self.entry.url()]

    def test_locks_whose_keys_live_on_each_node(self):
        for node in self.cluster.nodes:
            name = self.cluster.name_on(node)
            r = self.run_redlock(["-v", *self.args, "run", "-k", name, "--", "redis-cli", "-p",
                                  str(node.port), "GET", f"lock:{name}"])
            self.assertStatus(r, 0)
            self.assertRegex(r.stdout, r"^[0-9a-f]{32}\n$")  # on the slot's owner meanwhile
            self.assertKeyGone(node, f"lock:{name}")
            self.assertGreater(int(node.command("HGET", f"{{lock:{name}}}:fence", "f")), 1)
            if node is not self.entry:
                self.assertIn(f"MOVED {self.cluster.slot_of('lock:' + name)} 127.0.0.1:"
                              f"{node.port} (following the cluster's redirection)", r.stderr)
                # Learned once: the release went straight to the owner.
                self.assertEqual(r.stderr.count("MOVED"), 1, r.stderr)

    def test_a_second_contender_and_a_waiter_on_another_node(self):
        far = self.cluster.nodes[2]
        name = self.cluster.name_on(far, stem="w")
        holder = self.holder(["-k", name], global_args=self.args).wait_ready()
        r = self.run_redlock([*self.args, "run", "-n", "-k", name, "--", "true"])
        self.assertStatus(r, 75)
        self.assertIn("held by", r.stderr)
        waiter = self.start_redlock(["-v", *self.args, "run", "-w", "30s", "-k", name, "--",
                                     "true"])
        # Subscribed (pub/sub reaches every node of a cluster), then released.
        wait_until(lambda: any(n.command("PUBSUB", "CHANNELS", f"{{lock:{name}}}:w:*")
                               for n in self.cluster.nodes), 15, proc=waiter,
                   message="the waiter to subscribe")
        self.assertEqual(holder.release(), 0)
        self.assertEqual(waiter.wait(30), 0, waiter.stderr)
        attempts = re.search(r"after (\d+) attempts?", waiter.stderr)
        self.assertLessEqual(int(attempts.group(1)), 3, waiter.stderr)

    def test_status_list_and_release_force_reach_every_master(self):
        names = [self.cluster.name_on(node, stem="l") for node in self.cluster.nodes]
        holders = [self.holder(["-k", name], global_args=self.args).wait_ready()
                   for name in names]
        r = self.run_redlock([*self.args, "list"])
        self.assertStatus(r, 0)
        for name in names:
            self.assertIn(name, r.stdout)
        r = self.run_redlock([*self.args, "status", "-k", names[1]])
        self.assertStatus(r, 0)
        self.assertIn("held by", r.stdout)
        r = self.run_redlock([*self.args, "release", "--force", "--yes", "-k", names[2]])
        self.assertStatus(r, 0)
        self.assertKeyGone(self.cluster.nodes[2], f"lock:{names[2]}")
        for h in holders[:2]:
            self.assertEqual(h.release(), 0)

    def test_a_slot_migrated_while_the_lock_is_held(self):
        self.require_server((6, 2), "INFO errorstats (counting TRYAGAIN)")
        source, target = self.cluster.nodes[1], self.cluster.nodes[2]
        name = self.cluster.name_on(source, stem="m")
        key = f"lock:{name}"
        slot = self.cluster.slot_of(key)
        go = self.path("go")
        proc = self.start_redlock(["-v", *self.args, "run", "-t", "3s", "-k", name, "--", "sh",
                                   "-c", f'touch {self.path("started")}; '
                                   f'while [ ! -e {go} ]; do sleep 0.05; done'])
        wait_until(lambda: os.path.exists(self.path("started")), 15, proc=proc,
                   message="PROGRAM to start")
        token = source.command("GET", key)

        # Keys moved, the slot still the source's: requests are sent on by ASK.
        self.cluster.migrate(slot, source, target, finish=False)
        self.assertEqual(self.asking(target, "GET", key), token)
        self.assertRenewedOn(target, key, proc, asking=True)
        # status reads the lock, its metadata and the name's record, which all moved: the
        # importing node answers it (0.4 also read a --once-per record that did not exist
        # there, a multi-key request answered TRYAGAIN until the migration ended).
        status = self.run_redlock(["-v", *self.args, "status", "-k", name])
        self.assertStatus(status, 0)
        self.assertIn(f"  token     {token[:8]}...\n", status.stdout)

        # The target owns the slot: MOVED from then on.
        self.cluster.finish_migration(slot, target)
        self.assertRenewedOn(target, key, proc)
        open(go, "w").close()
        proc.wait(30)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn(f"ASK {slot} 127.0.0.1:{target.port}", proc.stderr)
        self.assertIn(f"MOVED {slot} 127.0.0.1:{target.port}", proc.stderr)
        self.assertNotIn("lost", proc.stderr)
        self.assertKeyGone(target, key)

    @staticmethod
    def asking(node, *command):
        """COMMAND on NODE as a client sent there by ASK."""
        with node.client() as c:
            c.execute("ASKING")
            return c.execute(*command)

    def assertRenewedOn(self, node, key, proc, asking=False):
        """Waits for a renewal on NODE: the key's PTTL, falling, goes up."""
        pttl = (lambda: self.asking(node, "PTTL", key)) if asking else \
            (lambda: node.command("PTTL", key))
        last = [pttl()]

        def renewed():
            now = pttl()
            went_up, last[0] = now > last[0], now
            return went_up

        wait_until(renewed, 10, interval=0.02, proc=proc, message=f"a renewal on {node.port}")

    def test_nodes_of_one_cluster_listed_as_a_redlock_are_refused(self):
        # Each lock key lives on one node: the entries would vote with one key, and the run
        # would wait on itself forever. Said at once, as a configuration error.
        name = self.cluster.name_on(self.cluster.nodes[2], stem="r")
        args = [a for n in self.cluster.nodes for a in ("-s", n.url())]
        r = self.run_redlock([*args, "run", "-k", name, "--", "touch", self.path("ran")])
        self.assertStatus(r, 78)
        self.assertIn(f"both lead to 127.0.0.1:{self.cluster.nodes[2].port} (nodes of one Redis "
                      "Cluster, or one master named by sentinels): they are one lock server, "
                      "not two", r.stderr)
        self.assertFalse(os.path.exists(self.path("ran")))
        self.assertKeyGone(self.cluster.nodes[2], f"lock:{name}")

    def test_doctor_says_it_checked_one_node_of_a_cluster(self):
        r = self.run_redlock([*self.args, "doctor"])
        self.assertStatus(r, 0)
        self.assertRegex(r.stdout, r"note  cluster +a Redis Cluster node: a lock lives on the "
                                   r"master of its")
        self.assertIn("acl ", r.stdout)  # the probe lock was followed to its slot's owner

    def test_semaphore_fair_and_once_per_keys_share_the_slot(self):
        node = self.cluster.nodes[2]
        name = self.cluster.name_on(node, stem="x")
        for extra in (["--limit", "2"], ["--fair"], ["--once-per", "1h"]):
            r = self.run_redlock([*self.args, "run", "-k", name, *extra, "--", "true"])
            self.assertStatus(r, 0)
        r = self.run_redlock([*self.args, "status", "-k", name])
        self.assertIn("last run", r.stdout)



class TlsClusterTest(E2ETest):
    """A cluster reached over rediss://: redirections name TLS ports, and each node's
    certificate is checked against the address the redirection gave."""

    @classmethod
    def setUpClass(cls):
        if not shutil.which("openssl"):
            raise unittest.SkipTest("openssl is not installed (scripts/setup.sh installs it)")
        cls.certs = make_certs()
        cert = lambda name: os.path.join(cls.certs, name)
        cls.cluster = RedisCluster(tls_args=[
            "--tls-cert-file", cert("server.pem"), "--tls-key-file", cert("server.key"),
            "--tls-ca-cert-file", cert("ca.pem"), "--tls-auth-clients", "no"])

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()
        shutil.rmtree(cls.certs, True)

    def test_moved_over_tls_goes_to_the_owners_tls_port(self):
        config = self.write_file("tls.toml",
                                 f'tls_ca_file = "{os.path.join(self.certs, "ca.pem")}"\n')
        entry = self.cluster.nodes[0]
        for node in self.cluster.nodes[1:]:
            name = self.cluster.name_on(node, stem="t")
            r = self.run_redlock(["-v", "-c", config, "-s", f"rediss://127.0.0.1:{entry.tls_port}",
                                  "run", "-k", name, "--", "redis-cli", "-p", str(node.port),
                                  "GET", f"lock:{name}"])
            self.assertStatus(r, 0)
            self.assertRegex(r.stdout, r"^[0-9a-f]{32}\n$")
            self.assertIn(f"127.0.0.1:{node.tls_port} (following the cluster's redirection)",
                          r.stderr)
            self.assertKeyGone(node, f"lock:{name}")


class RedirectionLimitTest(E2ETest):
    def test_endless_redirections_are_cut_short(self):
        # A "node" that sends every request to itself again.
        fake = self.fake_redis(lambda args: f"-MOVED 42 127.0.0.1:{fake.port}\r\n".encode())
        r = self.run_redlock(["-s", fake.url(), "run", "-k", "x", "--", "touch",
                              self.path("ran")])
        self.assertStatus(r, 69)
        self.assertIn(f"more than 5 cluster redirections (the last: MOVED 42 127.0.0.1:"
                      f"{fake.port})", r.stderr)
        self.assertFalse(os.path.exists(self.path("ran")))
        self.assertMessages(r.stderr)


if __name__ == "__main__":
    unittest.main()
