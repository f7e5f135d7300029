#!/usr/bin/env python3
"""Sums a callgrind output file's self cost (Ir) per ELF object and per function.

Usage: callgrind_by_object.py CALLGRIND_OUT [TOP_FUNCTIONS]

Prints the total, the split by object (ld.so = dynamic loading and relocation, libstdc++,
libc, the program itself, ...) and the most expensive functions by self cost: a picture of
where an instruction count goes that callgrind_annotate does not give per object.
"""

import collections
import os
import sys


def parse(path):
    by_object = collections.Counter()
    by_function = collections.Counter()
    names = {"ob": {}, "fn": {}, "cob": {}, "cfn": {}}
    total = None
    ob = fn = "?"
    skip_next_cost = False

    def name(kind, value):
        # Name compression: "(12) /lib/x.so" defines id 12, "(12)" refers to it.
        table = names["ob" if kind in ("ob", "cob") else "fn"]
        value = value.strip()
        if value.startswith("("):
            ident, _, rest = value.partition(")")
            ident = ident[1:]
            rest = rest.strip()
            if rest:
                table[ident] = rest
            return table.get(ident, value)
        return value

    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            head = line[0]
            if head.isdigit() or head in "+-*":
                if skip_next_cost:
                    # The cost line after calls= is the callee's inclusive cost.
                    skip_next_cost = False
                    continue
                parts = line.split()
                if len(parts) >= 2:
                    cost = int(parts[1])
                    by_object[ob] += cost
                    by_function[(ob, fn)] += cost
                continue
            key, _, value = line.partition("=")
            if key == "ob":
                ob = name("ob", value)
            elif key == "fn":
                fn = name("fn", value)
            elif key in ("cob", "cfn"):
                name(key, value)
            elif key == "calls":
                skip_next_cost = True
            elif key in ("summary", "totals"):
                total = int(value.split()[0]) if value.strip() else total
    return total, by_object, by_function


def short(obj):
    return os.path.basename(obj) if obj else "?"


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    total, by_object, by_function = parse(path)
    counted = sum(by_object.values())
    total = total or counted
    print(f"total Ir: {total:,}")
    print("by object (self cost):")
    for obj, cost in by_object.most_common():
        print(f"  {cost:>12,}  {100.0 * cost / total:5.1f}%  {short(obj)}")
    print(f"top {top} functions (self cost):")
    for (obj, fn), cost in by_function.most_common(top):
        print(f"  {cost:>12,}  {100.0 * cost / total:5.1f}%  {fn}  [{short(obj)}]")


if __name__ == "__main__":
    main()
