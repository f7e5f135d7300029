"""ACL users that allow less than everything: what run, the waiters and doctor do.

EVALSHA refused while EVAL is allowed (an ACL without +evalsha, or a renamed command)
must not lose the lease at the first renewal; a user without DEL is told that a failed
attempt left its key behind.
"""

import json
import unittest

from redlock_e2e import E2ETest

USER, PASSWORD = "locker", "pw-locker-1"


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

    def wait_for_key(self, server, key, proc):
        from redlock_e2e import wait_until
        wait_until(lambda: server.command("EXISTS", key), 15, message=key, proc=proc)


if __name__ == "__main__":
    unittest.main()
