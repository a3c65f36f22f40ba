#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets from the project's own examples.

Run from anywhere: `fuzz/seed_corpus.py`. It adds to fuzz/corpus/<target>/:
- labels: the labels of every container of the golden cases (tests/labels/cases);
- routes_file: examples/routes.json, the golden cases' expected hosts written
  as routes files, and the routes files the core tests write out as literals;
- rewrite: every rewrite of those examples and cases, against request targets
  taken from the tests;
- srv: the record sets of the SRV ordering tests, in the target's input format;
- request_head: every raw request the core tests send, and the smuggling shapes
  of RFC 9112 the issue lists.
The committed corpus is these seeds and what fuzzing found beyond them,
minimised with `cargo fuzz cmin` (see README).
"""

import hashlib
import json
import pathlib
import re
import struct
import warnings

# Rust escapes Python does not know (`\`` and the like) are kept as written.
warnings.filterwarnings("ignore", category=DeprecationWarning)

ROOT = pathlib.Path(__file__).resolve().parent.parent
SEEDS = ROOT / "fuzz" / "corpus"


def write(target, data):
    if isinstance(data, str):
        data = data.encode()
    folder = SEEDS / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / hashlib.sha1(data).hexdigest()).write_bytes(data)


def golden_cases():
    for path in sorted((ROOT / "tests/labels/cases").glob("*.json")):
        yield json.loads(path.read_text())


def rust_string_literals(text):
    """The text of every (byte) string literal, raw or not, escapes decoded."""
    for raw in re.finditer(r'b?r(#+)"(.*?)"\1', text, re.S):
        yield raw.group(2)
    for plain in re.finditer(r'(?<![#\w])b?"((?:[^"\\]|\\.)*)"', text, re.S):
        body = re.sub(r"\\\n\s*", "", plain.group(1))
        try:
            yield body.encode("latin-1", "backslashreplace").decode("unicode_escape")
        except UnicodeDecodeError:
            continue


def test_sources():
    for path in sorted((ROOT / "tests").rglob("*.rs")):
        yield path.read_text()
    for path in sorted((ROOT / "src").rglob("*.rs")):
        yield path.read_text()


def labels_seeds():
    for case in golden_cases():
        containers = case.get("containers", [])
        texts = [
            "\n".join(f"{k}={v}" for k, v in c.get("labels", {}).items())
            for c in containers
        ]
        if texts:
            write("labels", "\n---\n".join(texts))


def routes_file_seeds(literals):
    write("routes_file", (ROOT / "examples/routes.json").read_text())
    for literal in literals:
        if '"host"' in literal and "{{" not in literal:
            write("routes_file", literal)
    for case in golden_cases():
        hosts = case.get("expected", {}).get("hosts")
        if isinstance(hosts, dict) and hosts:
            write("routes_file", json.dumps({"host": hosts}))


def rewrites_in(value):
    """Every rewrite object (routes file) or rewrite label set (golden case)."""
    if isinstance(value, dict):
        if "rewrite" in value and isinstance(value["rewrite"], dict):
            yield value["rewrite"]
        labels = {
            k.rsplit("rewrite.", 1)[1]: v
            for k, v in value.items()
            if isinstance(v, str) and ".rewrite." in k
        }
        if labels:
            yield labels
        for inner in value.values():
            yield from rewrites_in(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from rewrites_in(inner)


def rewrite_seeds():
    documents = [json.loads((ROOT / "examples/routes.json").read_text())]
    documents.extend(golden_cases())
    paths = [
        "/",
        "/api",
        "/api/",
        "/api/users?id=1",
        "/apix",
        "/v1/a/b",
        "/users/42/profile",
        "/items/7/rest?x=%2F",
        "/api%2Fx",
    ]
    seen = set()
    for document in documents:
        for rewrite in rewrites_in(document):
            if "match" in rewrite and "replace" in rewrite:
                rule = f"regex\n{rewrite['match']}\n{rewrite['replace']}"
            else:
                rule = "prefix\n{}\n{}".format(
                    rewrite.get("strip_prefix", ""), rewrite.get("add_prefix", "")
                )
            if rule in seen:
                continue
            seen.add(rule)
            for path in paths:
                write("rewrite", f"{rule}\n{path}")


def srv_seeds():
    """Records as (priority, weight, port, target byte): see fuzz_targets/srv.rs."""
    record_sets = [
        [(20, 1, 80, 0), (10, 1, 81, 2), (30, 0, 82, 4), (10, 1, 83, 5)],
        [(1, 1, 80, 0), (1, 3, 81, 0x82)],
        [(1, 0, 80, 0), (1, 10, 81, 1), (1, 10, 80, 0x82)],
        [(1, 0, 80, 0), (1, 0, 82, 4), (1, 0, 84, 5)],
        [(0, 0, 0, 3), (5, 1, 443, 0)],
        [(0, 0, 0, 3)],
        [],
    ]
    for kind in (0, 1, 2):
        for records in record_sets:
            data = bytes([kind, 0, 7])
            for priority, weight, port, target in records:
                data += struct.pack(">HHHB", priority, weight, port, target)
            write("srv", data)


SMUGGLING = [
    # CL.TE and TE.CL (RFC 9112 §6.1, §6.3).
    "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nG",
    "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n8\r\nSMUGGLED\r\n0\r\n\r\n",
    # TE.TE with an obfuscated coding.
    "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: x\r\n\r\n0\r\n\r\n",
    "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n",
    "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
    # Repeated and signed lengths (§6.3), bad chunk sizes and extensions (§7.1).
    "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\na",
    "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n\r\n",
    "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1;ext=\"x\r\na\r\n0\r\n\r\n",
    # Bare CR and LF, obs-fold, NUL (§2.2, §5.2).
    "GET / HTTP/1.1\rHost: a\r\n\r\n",
    "GET / HTTP/1.1\nHost: a\n\n",
    "GET / HTTP/1.1\r\nHost: a\r\nX-Folded: a\r\n b\r\n\r\n",
    "GET / HTTP/1.1\r\nHost: a\x00b\r\n\r\n",
    # Repeated Host (§3.2), absolute form, HTTP/0.9 and 1.0, pipelining.
    "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    "GET http://only.example/x HTTP/1.1\r\nHost: only.example\r\n\r\n",
    "GET /\r\n",
    "GET /api/x HTTP/1.0\r\nHost: a\r\n\r\n",
    "GET /users/1 HTTP/1.1\r\nHost: a\r\n\r\nGET /refused HTTP/1.1\r\nHost: a\r\n\r\n",
    # Claimed identity and h2c (RFC 7239; RFC 9113 §3.1).
    "GET / HTTP/1.1\r\nHost: a\r\nForwarded: for=1.2.3.4\r\nX-Forwarded-For: 1.2.3.4\r\n"
    "X-Real-IP: 1.2.3.4\r\nX-Client-IP: 1.2.3.4\r\nX-Dockhand-Route: x\r\n\r\n",
    "GET / HTTP/1.1\r\nHost: only.example\r\nConnection: Upgrade, HTTP2-Settings\r\n"
    "Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n",
    "GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
    "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    "GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx",
]


def request_head_seeds(literals):
    methods = ("GET ", "POST ", "PUT ", "HEAD ", "OPTIONS ", "DELETE ", "CONNECT ")
    for literal in literals:
        if literal.startswith(methods) and "HTTP/1." in literal and "{" not in literal:
            write("request_head", literal.encode("latin-1", "replace"))
    for request in SMUGGLING:
        write("request_head", request)


def main():
    literals = [lit for source in test_sources() for lit in rust_string_literals(source)]
    labels_seeds()
    routes_file_seeds(literals)
    rewrite_seeds()
    srv_seeds()
    request_head_seeds(literals)
    for folder in sorted(SEEDS.iterdir()):
        print(f"{folder.name}: {len(list(folder.iterdir()))} seeds")


if __name__ == "__main__":
    main()
