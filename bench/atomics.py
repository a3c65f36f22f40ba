#!/usr/bin/env python3
"""Atomic read-modify-writes in a callgrind profile: how many times the
instructions that lock the memory bus (a `lock` prefix, or `xchg` with
memory) ran, and in which functions. callgrind counts such an instruction
as one, but each costs a dozen cycles or more even when no other core
wants its cache line (it waits for every store before it; a loop of locked
adds ran at 4.7 ns each on the benchmark machine, of plain adds at 0.4 ns),
so a figure of instructions alone hides them.

    bench/atomics.py PROFILE REQUESTS [TOP]

PROFILE is a callgrind profile made with --dump-instr=yes
--compress-pos=no --compress-strings=no (bench/instructions.sh makes one);
the locked instructions of each object in it are found with objdump.
Prints the count per request and the TOP (default 0) functions with most.
"""

import re
import subprocess
import sys
from collections import Counter

LOCKED = re.compile(r"^\s*([0-9a-f]+):\s+(?:lock\b|xchg\s+\S*\()")


def locked_addresses(path):
    """The addresses of the locked instructions of the object at `path`."""
    try:
        listing = subprocess.run(
            ["objdump", "-d", "--no-show-raw-insn", path],
            capture_output=True, text=True, check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return set()
    return {int(m.group(1), 16) for m in map(LOCKED.match, listing.splitlines()) if m}


def count(profile):
    """Locked instructions run, by function."""
    by_function = Counter()
    addresses = {}
    locked = set()
    function = None
    call_cost_next = False
    with open(profile) as lines:
        for line in lines:
            if line.startswith("ob="):
                path = line[3:].strip()
                if path not in addresses:
                    addresses[path] = locked_addresses(path)
                locked = addresses[path]
            elif line.startswith("fn="):
                function = line[3:].strip()
            elif line.startswith("calls="):
                # The next line is the cost of the call, not of an instruction.
                call_cost_next = True
            elif line.startswith("0x"):
                if call_cost_next:
                    call_cost_next = False
                    continue
                address, _line, ran = line.split()[:3]
                if int(address, 16) in locked:
                    by_function[function] += int(ran)
            else:
                call_cost_next = False
    return by_function


def main():
    profile, requests = sys.argv[1], int(sys.argv[2])
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    by_function = count(profile)
    print(f"{sum(by_function.values()) / requests:.1f}")
    for function, ran in by_function.most_common(top):
        print(f"  {ran / requests:6.2f}  {function[:150]}", file=sys.stderr)


if __name__ == "__main__":
    main()
