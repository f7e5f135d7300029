"""ACL users that allow less than everything: what run, the waiters and doctor do.

EVALSHA refused while EVAL is allowed (an ACL without +evalsha, or a renamed command)
must not lose the lease at the first renewal; a user without DEL is told that a failed
attempt left its key behind.
"""

import json
import os
import unittest

from redlock_e2e import E2ETest

USER, PASSWORD = "locker", "pw-locker-1"
README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "README.md")


def documented_acl_rules():
    """The rules of the README's `redis-cli ACL SETUSER locker ...` command (without the
    user name and the password, which the test server adds)."""
    with open(README) as f:
        text = f.read()
    start = text.index("redis-cli ACL SETUSER locker")
    command = text[start:text.index("```", start)].replace("\\\n", " ")
    words = [w.strip("'") for w in command.split()[4:]]
    return [w for w in words if w != ">PASSWORD"]


class AclTest(E2ETest):
    def server_for(self, rules):
        server = self.redis_server(acl_user=(USER, PASSWORD, rules))
        return server, server.url(username=USER, password=PASSWORD)

    def test_run_renews_and_waits_with_evalsha_refused(self):
        server, url = self.server_for("on ~lock:* ~{lock:*}:* +@all -evalsha")
        # Several renewals (ttl/3 = 100 ms) over the same connection: each an EVALSHA.
        r = self.run_redlock(["-s", url, "run", "-k", "x", "-t", "300ms", "--", "sleep", "1"])
        self.assertStatus(r, 0)
        self.assertEqual(r.stderr, "")
        self.assertKeyGone(server, "lock:x")
        # A waiter's attempts after the first go over an open connection too.
        holder = self.start_redlock(["-s", url, "run", "-k", "x", "--", "sleep", "0.6"])
        self.wait_for_key(server, "lock:x", holder)
        r = self.run_redlock(["-s", url, "run", "-k", "x", "-w", "10s", "--", "true"])
        self.assertStatus(r, 0)
        self.assertEqual(holder.wait(30), 0)

    def test_doctor_checks_what_run_sends(self):
        _, url = self.server_for("on ~lock:* ~{lock:*}:* +@all -evalsha")
        r = self.run_redlock(["-s", url, "doctor", "--json"])
        self.assertStatus(r, 0)
        checks = {c["name"]: c for c in json.loads(r.stdout)["servers"][0]["checks"]}
        self.assertEqual(checks["scripts"]["level"], "note")
        self.assertIn("EVALSHA is refused", checks["scripts"]["message"])
        _, url = self.server_for("on ~lock:* ~{lock:*}:* +@all -eval")
        r = self.run_redlock(["-s", url, "doctor", "--json"])
        self.assertStatus(r, 1)
        checks = {c["name"]: c for c in json.loads(r.stdout)["servers"][0]["checks"]}
        self.assertEqual(checks["scripts"]["level"], "risk")

    def test_a_user_without_del_is_told_the_key_stays(self):
        server, url = self.server_for("on ~lock:* ~{lock:*}:* +@all -del")
        r = self.run_redlock(["-s", url, "run", "-k", "x", "-t", "1m", "--", "true"])
        self.assertStatus(r, 77)
        self.assertIn("expires by its ttl", r.stderr)
        self.assertMessages(r.stderr, min_lines=2)

    def test_the_readme_least_privilege_user_can_do_everything(self):
        rules = documented_acl_rules()
        server, url = self.server_for(" ".join(rules))
        args = ["-s", url]
        # run, and a waiter woken by the release (channel and PUBLISH/SUBSCRIBE allowed).
        holder = self.start_redlock(args + ["run", "-k", "x", "--", "sleep", "0.8"])
        self.wait_for_key(server, "lock:x", holder)
        r = self.run_redlock(["-v"] + args + ["run", "-k", "x", "-w", "20s", "--", "true"])
        self.assertStatus(r, 0)
        self.assertRegex(r.stderr, r"after [123] attempts?")
        self.assertEqual(holder.wait(30), 0)
        # A --fair waiter: ticket, queue, place in line (ZRANK), leaving the queue.
        holder = self.start_redlock(args + ["run", "-k", "x", "--", "sleep", "0.8"])
        self.wait_for_key(server, "lock:x", holder)
        r = self.run_redlock(args + ["run", "-k", "x", "--fair", "-w", "20s", "--", "true"])
        self.assertStatus(r, 0)
        self.assertIn("next in line", r.stderr)
        self.assertEqual(holder.wait(30), 0)
        # --once-per: the slot claimed, a second run refused, the run's end recorded.
        for expected in (0, 75):
            r = self.run_redlock(args + ["run", "-k", "slot", "--once-per", "1h", "--", "true"])
            self.assertStatus(r, expected)
        r = self.run_redlock(args + ["status", "--json", "slot"])
        self.assertEqual(json.loads(r.stdout)["locks"][0]["last_run"]["exit_status"], 0)
        # --limit: permits, the holders' set, status of a semaphore, its release.
        holder = self.start_redlock(args + ["run", "-k", "pool", "--limit", "2", "--",
                                            "sleep", "0.8"])
        self.wait_for_key(server, "lock:pool", holder)
        r = self.run_redlock(args + ["run", "-k", "pool", "--limit", "2", "-t", "1s", "--",
                                     "sleep", "0.5"])
        self.assertStatus(r, 0)
        self.assertStatus(self.run_redlock(args + ["status", "pool"]), 0)
        self.assertEqual(holder.wait(30), 0)
        # acquire, extend, release; status, list; release --force; doctor.
        r = self.run_redlock(args + ["acquire", "-t", "1m", "y"])
        self.assertStatus(r, 0)
        token = r.stdout.strip()
        self.assertStatus(self.run_redlock(args + ["extend", "y", "--token", token]), 0)
        self.assertStatus(self.run_redlock(args + ["status", "y"]), 0)
        self.assertStatus(self.run_redlock(args + ["list"]), 0)
        self.assertStatus(self.run_redlock(args + ["release", "y", "--token", token]), 0)
        self.assertStatus(self.run_redlock(args + ["acquire", "z"]), 0)
        self.assertStatus(self.run_redlock(args + ["release", "z", "--force", "--yes"]), 0)
        r = self.run_redlock(args + ["doctor"])
        self.assertNotIn("NOPERM", r.stdout + r.stderr)
        self.assertNotIn("cannot read", r.stdout + r.stderr)
        for key in ("lock:x", "lock:y", "lock:z", "lock:pool"):
            self.assertKeyGone(server, key)

    def wait_for_key(self, server, key, proc):
        from redlock_e2e import wait_until
        wait_until(lambda: server.command("EXISTS", key), 15, message=key, proc=proc)


if __name__ == "__main__":
    unittest.main()
