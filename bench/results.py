#!/usr/bin/env python3
"""The benchmark's bookkeeping, for run.sh: CPU time of a process tree, one
run's load-generator output turned into a JSON line, and the JSON lines of a
whole benchmark turned into markdown tables (medians over rounds, dockhand's
ratio to each peer); the requests a run completed, and dockhand's /metrics
checked against the sum of them. Standard library only.

  results.py cpu-ticks PID
  results.py record --shape S --peer P --round R --tool wrk|h2load --output FILE
                    [--log FILE] --cpu-ticks N
  results.py completed --tool wrk|h2load --output FILE
  results.py metrics-check --metrics FILE --ledger FILE --host HOST
  results.py table RAW.jsonl [--criterion DIR]
"""

import argparse
import json
import os
import re
import statistics
import sys

from idle_clients import tree_pids

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

PEERS = ["dockhand", "nginx", "haproxy", "caddy", "direct"]
PEER_NAMES = {
    "dockhand": "dockhand",
    "nginx": "nginx",
    "haproxy": "HAProxy",
    "caddy": "Caddy",
    "direct": "direct (backend alone)",
}
SHAPES = {
    "h1_c50": "HTTP/1.1 keep-alive, 50 connections (wrk -t1 -c50)",
    "h1_c500": "HTTP/1.1 keep-alive, 500 connections (wrk -t1 -c500)",
    "h2c": "HTTP/2 prior knowledge (h2c), 10 connections x 10 streams (h2load -t1 -c10 -m10)",
    "h1_close": "HTTP/1.1, new connection per request, 50 connections (wrk -t1 -c50 -H 'Connection: close')",
    "https_c50": "HTTPS (TLS 1.3, ECDSA P-256) keep-alive, 50 connections (wrk -t1 -c50)",
    "https_close": "HTTPS (TLS 1.3, ECDSA P-256), new TLS connection per request, 50 connections "
    "(wrk -t1 -c50 -H 'Connection: close'; wrk resumes the TLS session)",
}

def pairs(scale_hosts):
    """Shapes that compare instances of one proxy set up two ways: their
    title, the instances' names (the one compared first), and the pairs
    whose CPU per request is compared (each: the instance, and the one it is
    divided by)."""
    hosts = f"{scale_hosts:,} hosts"
    return {
        "scale": (
            f"Route table size: {hosts} against 1 (HTTP/1.1 keep-alive, 50 connections)",
            {"dockhand_10k": f"dockhand, {hosts}", "dockhand_1host": "dockhand, 1 host"},
            [("dockhand_10k", "dockhand_1host")],
        ),
        # nginx with 1 and 2 workers, the same way, says what a second worker
        # costs on this machine whatever the proxy.
        "workers": (
            "Workers: 2 against 1, both on both CPUs, nginx the same way beside "
            "(HTTP/1.1 keep-alive, 50 connections)",
            {
                "dockhand_w2": "dockhand, 2 workers",
                "dockhand_w1": "dockhand, 1 worker",
                "nginx_w2": "nginx, 2 workers",
                "nginx_w1": "nginx, 1 worker",
            },
            [("dockhand_w2", "dockhand_w1"), ("nginx_w2", "nginx_w1")],
        ),
    }


def cpu_ticks(root):
    """utime + stime of `root` and its descendants (each process's own
    /proc/PID/stat already sums its threads)."""
    total = 0
    for pid in tree_pids(root):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # After the command name: state is field 3, utime 14 and stime 15.
        total += int(fields[11]) + int(fields[12])
    return total


UNITS_US = {"us": 1.0, "ms": 1000.0, "s": 1_000_000.0, "m": 60_000_000.0}


def to_us(text):
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text).groups()
    return float(number) * UNITS_US[unit]


def parse_wrk(text):
    result = {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1)),
        "requests": int(re.search(r"(\d+) requests in", text).group(1)),
        "p50_us": to_us(re.search(r"^\s+50%\s+(\S+)", text, re.M).group(1)),
        "p99_us": to_us(re.search(r"^\s+99%\s+(\S+)", text, re.M).group(1)),
        "errors": 0,
    }
    socket = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text
    )
    if socket:
        result["errors"] += sum(int(n) for n in socket.groups())
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    if non_2xx:
        result["errors"] += int(non_2xx.group(1))
    return result


def completed(tool, text):
    """The requests a load generator's summary says it completed: wrk's
    "N requests in ...", h2load's "N done" (answered, whatever the status)."""
    if tool == "wrk":
        return int(re.search(r"(\d+) requests in", text).group(1))
    return int(re.search(r"requests: \d+ total, \d+ started, (\d+) done", text).group(1))


def percentile(sorted_values, fraction):
    index = min(len(sorted_values) - 1, max(0, round(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


def parse_h2load(text, log_path):
    finished = re.search(r"finished in ([\d.]+)s, ([\d.]+) req/s", text)
    counts = re.search(
        r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
        r"(\d+) failed, (\d+) errored, (\d+) timeout",
        text,
    )
    status = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", text)
    latencies = []
    with open(log_path) as log:
        for line in log:
            columns = line.split("\t")
            if len(columns) >= 3 and columns[1] == "200":
                latencies.append(int(columns[2]))
    latencies.sort()
    done = int(counts.group(3))
    if not done:
        raise ValueError("no request done")
    succeeded = int(counts.group(4))
    return {
        "rps": float(finished.group(2)),
        "requests": done,
        "p50_us": percentile(latencies, 0.50) if latencies else None,
        "p99_us": percentile(latencies, 0.99) if latencies else None,
        "errors": (done - succeeded)
        + int(counts.group(7))
        + (int(status.group(3)) + int(status.group(4)) if status else 0),
    }


def record(args):
    with open(args.output) as output:
        text = output.read()
    try:
        result = parse_wrk(text) if args.tool == "wrk" else parse_h2load(text, args.log)
    except (AttributeError, OSError, ValueError) as error:
        result = {"failed": f"unreadable {args.tool} output: {error!r}"}
    result.update(
        shape=args.shape,
        peer=args.peer,
        round=args.round,
        cpu_seconds=args.cpu_ticks / CLOCK_TICKS,
    )
    print(json.dumps(result))


def print_completed(args):
    """The count, or "?" when the output has no summary (a killed generator)."""
    try:
        with open(args.output) as output:
            print(completed(args.tool, output.read()))
    except (AttributeError, OSError):
        print("?")


def paired(args):
    """One round of bench/paired.sh: B's CPU per request over A's first,
    then what each did. A run with errors fails the round."""
    runs = []
    for output, ticks in ((args.a, args.a_ticks), (args.b, args.b_ticks)):
        with open(output) as text:
            result = parse_wrk(text.read())
        if result["errors"]:
            print(f"{output}: {result['errors']} errors", file=sys.stderr)
            return 1
        runs.append((result["requests"], ticks / CLOCK_TICKS * 1e6 / result["requests"]))
    (a, a_us), (b, b_us) = runs
    print(f"{b_us / a_us:.4f} A {a} requests {a_us:.2f} µs each, B {b} requests {b_us:.2f} µs each")
    return 0


SAMPLE = re.compile(r'^(\w+)\{(.*)\} (\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def samples(text, name):
    """(labels, value) of each sample of metric `name` in Prometheus text."""
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match and match.group(1) == name:
            yield dict(LABEL.findall(match.group(2))), float(match.group(3))


def metrics_check(args):
    """dockhand_requests_total for the bench host, summed over its codes,
    against the ledger (lines "COMPLETED IN_FLIGHT WHAT..."): it must lie
    between what the generators completed and that plus what they can have
    had in flight when they stopped (dockhand counts a request once it has
    produced the response; the generator, once it has read it), and every
    one must have been answered 200, as the backend answers (a 308 would be
    a redirect to HTTPS measured instead of the proxy). Prints markdown;
    exits 1 when the count is outside that range or unknowable, or a
    status is not 200."""
    with open(args.metrics) as metrics:
        text = metrics.read()
    by_code = {}
    for labels, value in samples(text, "dockhand_requests_total"):
        if labels.get("host") == args.host:
            code = labels.get("code", "?")
            by_code[code] = by_code.get(code, 0) + int(value)
    counted = sum(by_code.values())
    handshakes = {
        labels.get("result"): int(value)
        for labels, value in samples(text, "dockhand_tls_handshakes_total")
    }
    sent, in_flight, unknown, new_tls_requests = 0, 0, [], 0
    with open(args.ledger) as ledger:
        entries = [line.split(maxsplit=2) for line in ledger if line.strip()]
    for done, bound, what in entries:
        if done == "?":
            unknown.append(what)
            continue
        sent += int(done)
        in_flight += int(bound)
        if what.startswith("https_close"):
            new_tls_requests += int(done)
    other_codes = {code: n for code, n in by_code.items() if code != "200"}
    passed = not unknown and not other_codes and sent <= counted <= sent + in_flight
    codes = ", ".join(f"{code}: {n:,}" for code, n in sorted(by_code.items())) or "none"
    lines = [
        "### dockhand's /metrics against the load generators' totals",
        "",
        "| | requests |",
        "|---|---:|",
        f"| completed, as wrk / h2load / curl report them ({len(entries)} runs, warm-ups and checks) | {sent:,} |",
        f"| most that can have been in flight when a generator stopped | {in_flight:,} |",
        f'| `dockhand_requests_total{{host="{args.host}"}}`, all codes ({codes}) | {counted:,} |',
    ]
    if handshakes:
        lines.append(
            f'| `dockhand_tls_handshakes_total{{result="completed"}}` | {handshakes.get("completed", 0):,} |'
        )
        if new_tls_requests:
            lines.append(f"| requests of the https_close runs and warm-ups | {new_tls_requests:,} |")
    lines.append("")
    if unknown:
        lines.append(f"**Check FAILED: the totals of {', '.join(unknown)} are unknown (no summary).**")
    elif other_codes:
        lines.append(
            "**Check FAILED: dockhand answered the bench host with "
            + ", ".join(f"{n:,} × {code}" for code, n in sorted(other_codes.items()))
            + "; the backend answers only 200.**"
        )
    elif passed:
        lines.append(
            f"**Check passed: {sent:,} ≤ {counted:,} ≤ {sent:,} + {in_flight:,}**: dockhand counted "
            f"every request the generators completed, and {counted - sent:,} more that it answered "
            "after a generator had stopped reading (in flight at the end of a run)."
        )
    else:
        lines.append(
            f"**Check FAILED: dockhand counted {counted:,} requests; the generators completed "
            f"{sent:,}, with at most {in_flight:,} more in flight.**"
        )
    print("\n".join(lines) + "\n")
    return 0 if passed else 1


def fmt_latency(us):
    if us is None:
        return "–"
    if us >= 1000:
        return f"{us / 1000:.2f} ms"
    return f"{us:.0f} µs"


def fmt_ratio(ours, theirs, name):
    if not ours or not theirs:
        return "–"
    return f"{ours / theirs:.2f}× {name}"


def medians(runs):
    """Per peer: the median of each figure over that peer's successful rounds."""
    by_peer = {}
    for run in runs:
        by_peer.setdefault(run["peer"], []).append(run)
    summary = {}
    for peer, peer_runs in by_peer.items():
        good = [r for r in peer_runs if "failed" not in r]
        if not good:
            summary[peer] = {"failed": peer_runs[0].get("failed", "failed"), "rounds": 0}
            continue

        def median_of(key):
            values = [r[key] for r in good if r.get(key) is not None]
            return statistics.median(values) if values else None

        cpu_per_100k = [
            r["cpu_seconds"] / r["requests"] * 100_000 for r in good if r["requests"]
        ]
        summary[peer] = {
            "rounds": len(good),
            "rps": median_of("rps"),
            "p50_us": median_of("p50_us"),
            "p99_us": median_of("p99_us"),
            "cpu_per_100k": statistics.median(cpu_per_100k) if cpu_per_100k else None,
            "errors": sum(r.get("errors", 0) for r in good),
        }
    return summary


def load_table(shape, title, runs, peers, names):
    summary = medians(runs)
    if not summary:
        return ""
    ours_key = peers[0]
    ours = summary.get(ours_key, {})
    lines = [
        f"### {title}",
        "",
        f"| | requests/s | p50 | p99 | CPU s per 100k requests | errors | {names[ours_key]} vs this (requests/s) | p99 {names[ours_key]} ÷ this |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for peer in peers:
        row = summary.get(peer)
        if row is None:
            continue
        if "failed" in row:
            lines.append(f"| {names[peer]} | failed: {row['failed']} | | | | | | |")
            continue
        ratio = "—" if peer == ours_key else fmt_ratio(ours.get("rps"), row["rps"], names[peer])
        p99_ratio = (
            "—"
            if peer == ours_key or not ours.get("p99_us") or not row["p99_us"]
            else f"{ours['p99_us'] / row['p99_us']:.2f}"
        )
        cpu = f"{row['cpu_per_100k']:.2f}" if row["cpu_per_100k"] is not None else "–"
        lines.append(
            f"| {names[peer]} | {row['rps']:,.0f} | {fmt_latency(row['p50_us'])} | "
            f"{fmt_latency(row['p99_us'])} | {cpu} | {row['errors']} | {ratio} | {p99_ratio} |"
        )
    rounds = sorted({row["rounds"] for row in summary.values()})
    lines += ["", f"Medians of {'/'.join(map(str, rounds))} rounds."]
    if ours.get("rps"):
        headline = ", ".join(
            fmt_ratio(ours["rps"], summary[p]["rps"], names[p])
            for p in peers[1:]
            if summary.get(p, {}).get("rps")
        )
        lines.append(f"**{names[ours_key]}: {headline}** (requests/s).")
    return "\n".join(lines) + "\n"


def cpu_ratio_line(runs, names, ours, theirs):
    """How much CPU per request OURS takes against THEIRS (medians)."""
    summary = medians(runs)
    ours_cpu = summary.get(ours, {}).get("cpu_per_100k")
    theirs_cpu = summary.get(theirs, {}).get("cpu_per_100k")
    if not ours_cpu or not theirs_cpu:
        return ""
    return f"**CPU per request, {names[ours]} ÷ {names[theirs]}: {ours_cpu / theirs_cpu:.2f}**.\n"


def memory_table(runs):
    if not runs:
        return ""
    lines = [
        "### Memory per idle keep-alive client connection",
        "",
        "| | connections | still open when measured | measured after first response | RSS before | RSS after | KiB per connection |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    by_peer = {run["peer"]: run for run in runs}
    for peer in PEERS:
        run = by_peer.get(peer)
        if run is None:
            continue
        if "failed" in run:
            lines.append(f"| {PEER_NAMES[peer]} | failed: {run['failed']} | | | | | |")
            continue
        per = run["kib_per_connection"]
        lines.append(
            f"| {PEER_NAMES[peer]} | {run['connections']:,} | {run['still_open']:,} | "
            f"{run['measured_after_first_response_s']} s | {run['rss_before_kib']:,} KiB | "
            f"{run['rss_after_kib']:,} KiB | {per:.1f} |"
            if per is not None
            else f"| {PEER_NAMES[peer]} | 0 | | | | | – |"
        )
    return "\n".join(lines) + "\n"


def criterion_lines(directory):
    if not directory or not os.path.isdir(directory):
        return ""
    lines = []
    for root, _, files in sorted(os.walk(directory)):
        if root.endswith(os.path.join("new")) and "estimates.json" in files:
            with open(os.path.join(root, "estimates.json")) as estimates:
                data = json.load(estimates)
            benchmark = os.path.relpath(os.path.dirname(root), directory)
            median_ns = data["median"]["point_estimate"]
            low = data["median"]["confidence_interval"]["lower_bound"]
            high = data["median"]["confidence_interval"]["upper_bound"]
            lines.append(
                f"| {benchmark} | {median_ns / 1e6:.3f} ms | {low / 1e6:.3f} – {high / 1e6:.3f} ms |"
            )
    if not lines:
        return ""
    return "\n".join(
        [
            "### Applying one changed container among 1,000 (criterion, in-process)",
            "",
            "| benchmark | median | 95% interval |",
            "|---|---:|---:|",
            *lines,
        ]
    ) + "\n"


def table(args):
    runs = []
    with open(args.raw) as raw:
        for line in raw:
            if line.strip():
                runs.append(json.loads(line))
    sections = []
    for shape, title in SHAPES.items():
        shape_runs = [r for r in runs if r["shape"] == shape]
        if shape_runs:
            sections.append(load_table(shape, title, shape_runs, PEERS, PEER_NAMES))
    for shape, (title, names, cpu_pairs) in pairs(args.scale_hosts).items():
        pair_runs = [r for r in runs if r["shape"] == shape]
        if pair_runs:
            sections.append(
                load_table(shape, title, pair_runs, list(names), names)
                + "".join(cpu_ratio_line(pair_runs, names, *pair) for pair in cpu_pairs)
            )
    sections.append(memory_table([r for r in runs if r["shape"] == "idle_memory"]))
    sections.append(criterion_lines(args.criterion))
    print("\n".join(s for s in sections if s))


def main():
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    ticks = commands.add_parser("cpu-ticks")
    ticks.add_argument("pid", type=int)
    rec = commands.add_parser("record")
    rec.add_argument("--shape", required=True)
    rec.add_argument("--peer", required=True)
    rec.add_argument("--round", type=int, required=True)
    rec.add_argument("--tool", choices=["wrk", "h2load"], required=True)
    rec.add_argument("--output", required=True)
    rec.add_argument("--log")
    rec.add_argument("--cpu-ticks", type=int, required=True)
    done = commands.add_parser("completed")
    done.add_argument("--tool", choices=["wrk", "h2load"], required=True)
    done.add_argument("--output", required=True)
    pair = commands.add_parser("paired")
    pair.add_argument("--a", required=True, help="wrk's output for A")
    pair.add_argument("--b", required=True, help="wrk's output for B")
    pair.add_argument("--a-ticks", type=int, required=True)
    pair.add_argument("--b-ticks", type=int, required=True)
    check = commands.add_parser("metrics-check")
    check.add_argument("--metrics", required=True, help="dockhand's /metrics text")
    check.add_argument("--ledger", required=True)
    check.add_argument("--host", required=True)
    tab = commands.add_parser("table")
    tab.add_argument("raw")
    tab.add_argument("--criterion", help="criterion's output folder for route_table")
    tab.add_argument("--scale-hosts", type=int, default=10_000, help="hosts in the large route table")
    args = parser.parse_args()
    if args.command == "cpu-ticks":
        print(cpu_ticks(args.pid))
    elif args.command == "record":
        record(args)
    elif args.command == "completed":
        print_completed(args)
    elif args.command == "paired":
        return paired(args)
    elif args.command == "metrics-check":
        return metrics_check(args)
    else:
        table(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
