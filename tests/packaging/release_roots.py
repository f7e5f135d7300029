"""The Debian 11 and 13 roots release_portability runs the x86_64 binary in, made with
debootstrap (or found in the cache). A fixture of its own (`release: roots`), so that the
download overlaps the compiler's work in `release: build`."""

import unittest

import release


class Roots(unittest.TestCase):
    def test_debian_roots_are_made(self):
        for suite, include in release.ROOTS.items():
            with self.subTest(suite):
                root = release.debian_root(self, suite, include)
                r = release.chroot_run(root, ["dpkg-query", "-W", *include])
                self.assertEqual(r.returncode, 0, r.stderr)


if __name__ == "__main__":
    unittest.main()
