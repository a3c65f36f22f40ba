#!/usr/bin/env python3
"""Resident memory a proxy spends per idle keep-alive client connection.

Opens N HTTP/1.1 connections to the proxy, sends one request on each and reads
the whole response (so the proxy has set up its per-connection state and its
upstream pool), then keeps them all open and idle while it reads the resident
memory of the proxy's process tree (every process under --pid, summed). The
difference from the figure read before opening them, divided by the number of
connections, is the cost of one idle connection.

Requests go out at most --concurrency at a time, so the upstream pool stays
the size a moderate load gives it: what is measured is client connections,
not thousands of upstream ones.

Prints one JSON object on stdout. Standard library only.
"""

import argparse
import asyncio
import json
import os
import sys
import time


def tree_pids(root):
    """`root` and all its descendants, from /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    pids, pending = [], [root]
    while pending:
        pid = pending.pop()
        pids.append(pid)
        pending.extend(children.get(pid, []))
    return pids


def tree_rss_kib(root):
    total = 0
    for pid in tree_pids(root):
        try:
            with open(f"/proc/{pid}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            continue
    return total


async def open_one(args, request, gate, first_response):
    async with gate:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(args.address, args.port), args.timeout
        )
        writer.write(request)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), args.timeout)
        status = head.split(b" ", 2)[1]
        length = 0
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        if length:
            await asyncio.wait_for(reader.readexactly(length), args.timeout)
        if status != b"200":
            raise RuntimeError(f"status {status.decode()}")
        if first_response[0] is None:
            first_response[0] = time.monotonic()
        return reader, writer


async def main(args):
    request = (
        f"GET / HTTP/1.1\r\nHost: {args.host}\r\nUser-Agent: idle-clients\r\n\r\n"
    ).encode()
    before_kib = tree_rss_kib(args.pid)
    gate = asyncio.Semaphore(args.concurrency)
    first_response = [None]
    started = time.monotonic()
    results = await asyncio.gather(
        *(open_one(args, request, gate, first_response) for _ in range(args.connections)),
        return_exceptions=True,
    )
    connections = [r for r in results if not isinstance(r, BaseException)]
    errors = sorted({repr(r) for r in results if isinstance(r, BaseException)})
    opened = time.monotonic()
    # Let the proxy finish any bookkeeping it does once a connection goes idle.
    await asyncio.sleep(args.settle)
    after_kib = tree_rss_kib(args.pid)
    measured = time.monotonic()
    # Connections the proxy closed before the measurement would not count.
    await asyncio.sleep(0.2)
    still_open = sum(1 for reader, _ in connections if not reader.at_eof())
    for _, writer in connections:
        writer.close()
    since_first = measured - first_response[0] if first_response[0] else None
    report = {
        "connections": len(connections),
        "failed_connections": args.connections - len(connections),
        "errors": errors[:3],
        "still_open": still_open,
        "rss_before_kib": before_kib,
        "rss_after_kib": after_kib,
        "kib_per_connection": (after_kib - before_kib) / len(connections) if connections else None,
        "open_seconds": round(opened - started, 2),
        "measured_after_first_response_s": round(since_first, 2) if since_first else None,
    }
    json.dump(report, sys.stdout)
    print()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pid", type=int, required=True, help="the proxy's (main) process")
    parser.add_argument("--address", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="bench.test", help="Host header")
    parser.add_argument("--connections", type=int, default=10000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--timeout", type=float, default=10.0, help="per step, seconds")
    parser.add_argument("--settle", type=float, default=1.0, help="seconds idle before measuring")
    asyncio.run(main(parser.parse_args()))
