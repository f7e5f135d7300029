#!/usr/bin/env python3
"""Rewrites the sha1 of every Lua script in src/lock/scripts.hpp from its source.

Run after editing a script; tests/lock/scripts_test.cpp checks the constants against
the server's SCRIPT LOAD.
"""
import hashlib
import pathlib
import re

path = pathlib.Path(__file__).resolve().parent.parent / "src/lock/scripts.hpp"
text = path.read_text()
# The source may not span an earlier R"lua( (the parts joined into the acquire scripts,
# whose SHA1s come from the unit test's failure output).
pattern = re.compile(r'(R"lua\(((?:(?!R"lua\().)*?)\)lua",\s*")([0-9a-f]{40})(")', re.S)
text, count = pattern.subn(
    lambda m: m.group(1) + hashlib.sha1(m.group(2).encode()).hexdigest() + m.group(4), text)
path.write_text(text)
print(f"{path}: {count} scripts")
