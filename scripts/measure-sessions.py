#!/usr/bin/env python3
"""Measures what MCP sessions cost the gateway and whether the memory comes back (issue 13,
finding 6): starts `mcpgw serve` (release build) on a free loopback port with no upstream,
[limits] session_idle_s = 10 and caps high enough for the run, reads VmRSS idle, opens
N sessions with bare `initialize` requests (16 threads, keep-alive connections), reads VmRSS
at the peak, waits for the idle expiry plus a margin, reads VmRSS again, then checks that the
default caps refuse: a fresh gateway with max_sessions_per_principal = 100 answers the 101st
`initialize` 429.

Usage: scripts/measure-sessions.py [N]   (default 10000)
Env:   CARGO_TARGET_DIR (where target/release/mcpgw is), MCPGW_BIN (another binary),
       MEASURE_WAIT_S (default 25)
Linux only (/proc). Build first: cargo build --release --bin mcpgw
"""
import concurrent.futures
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target"))
BIN = os.environ.get("MCPGW_BIN", os.path.join(TARGET, "release", "mcpgw"))
INIT = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "measure", "version": "0"}}})


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def start(limits):
    d = tempfile.mkdtemp(prefix="mcpgw-sessions-")
    port = free_port()
    config = os.path.join(d, "mcpgw.toml")
    with open(config, "w") as f:
        f.write(f'[gateway]\nlisten = "127.0.0.1:{port}"\n\n[store]\npath = "{d}/mcpgw.db"\n\n[limits]\n{limits}\n')
    log = open(os.path.join(d, "log"), "w")
    proc = subprocess.Popen([BIN, "serve", "--config", config], stdout=log, stderr=log,
                            start_new_session=True)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/healthz")
            if c.getresponse().status == 200:
                return proc, port
        except OSError:
            time.sleep(0.1)
    raise SystemExit("mcpgw did not start; log in " + d)


def open_sessions(port, count):
    def worker(n):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        codes = {}
        for _ in range(n):
            c.request("POST", "/mcp", INIT, {"content-type": "application/json",
                                             "accept": "application/json, text/event-stream"})
            r = c.getresponse()
            r.read()
            codes[r.status] = codes.get(r.status, 0) + 1
        return codes
    threads = 16
    per = [count // threads + (1 if i < count % threads else 0) for i in range(threads)]
    total = {}
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        for codes in pool.map(worker, per):
            for k, v in codes.items():
                total[k] = total.get(k, 0) + v
    return total


def stop(proc):
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=20)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
    wait = float(os.environ.get("MEASURE_WAIT_S", "25"))
    proc, port = start(f"session_idle_s = 10\nmax_sessions = {n}\nmax_sessions_per_principal = {n}")
    try:
        time.sleep(1)
        idle = rss_mib(proc.pid)
        started = time.time()
        codes = open_sessions(port, n)
        took = time.time() - started
        peak = rss_mib(proc.pid)
        time.sleep(wait)
        after = rss_mib(proc.pid)
    finally:
        stop(proc)
    print(f"{n} sessions opened in {took:.1f} s, answers {codes}")
    print(f"RSS idle {idle:.1f} MiB, with {n} sessions {peak:.1f} MiB "
          f"({(peak - idle) * 1024 / n:.1f} KiB per session), {wait:.0f} s after their 10 s idle "
          f"expiry {after:.1f} MiB ({after / idle:.2f}x idle)")
    proc, port = start("")
    try:
        codes = open_sessions(port, 101)
    finally:
        stop(proc)
    print(f"default caps, 101 sessions from one principal: answers {codes}")


if __name__ == "__main__":
    main()
