"""Two runs of scripts/release.sh on one checkout give the same bytes: this one builds
everything again (a fresh work dir at another path, no compiler cache; only the cached
sysroots, Debian's packages as fetched, are shared) and compares it with the fixture's."""

import filecmp
import os
import shutil
import time
import unittest

import release
import support


class Reproducible(unittest.TestCase):
    def test_a_second_release_gives_the_same_bytes(self):
        release.require_dist(self)
        again = os.path.join(support.BUILD_DIR, "release-test", "again")
        shutil.rmtree(again, ignore_errors=True)
        started = time.monotonic()
        result = support.run(["bash", release.RELEASE_SH, "--dist", os.path.join(again, "dist"),
                              "--work", os.path.join(again, "work"), "--cache", release.CACHE],
                             timeout=3000, check=False)
        self.assertEqual(result.returncode, 0, result.stdout[-5000:] + result.stderr[-5000:])
        print(f"\nsecond release.sh: {time.monotonic() - started:.0f} s")
        first = sorted(os.listdir(release.DIST))
        second = sorted(os.listdir(os.path.join(again, "dist")))
        self.assertEqual(first, second)
        match, mismatch, errors = filecmp.cmpfiles(release.DIST, os.path.join(again, "dist"),
                                                   first, shallow=False)
        self.assertEqual((mismatch, errors), ([], []),
                         "differ between two runs (diffoscope shows how)")
        self.assertEqual(match, first)
        shutil.rmtree(again, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
