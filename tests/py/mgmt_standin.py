#!/usr/bin/env python3
"""A stand-in for the management API (k8ssandra management-api-for-apache-cassandra), for
the maintenance-window tests: only the paths, methods, status codes and shapes of its
OpenAPI document, and every exchange checked against that document.

What it stands for: the agent in the Cassandra container. "Cassandra" is a child process
(`sleep`) that holds one of the table's files open, as a JVM holds its sstables, so that
cleave's Replace guard sees it; `/lifecycle/stop` kills it, `/lifecycle/start` spawns a new
one and readiness turns 200 after `--ready-after` seconds.

Every call is appended to `--log` as one JSON line: method, path, query, status, time, and
the table's Data.db files at that moment (so a test can tell when the Replace happened
relative to the stop and the start). A request or an answer that the document does not
allow is logged with `"violation"`; a test asserts there is none.

Usage: mgmt_standin.py --openapi FILE --port-file F --log F --hold FILE --table DIR
       [--start-fails] [--cluster-unhealthy] [--rf N] [--dc NAME] [--ready-after S]
       [--cassandra-stopped] [--ring FILE]
       [--drain-delay S] [--stop-fails N] [--stop-lingers S] [--start-script SCRIPT]
       [--outage-at-start S]

Faults (issue 31): a drained Cassandra is never ready again until it is restarted, as
`StorageService.drain` is one-way; `--drain-delay` makes the drain take S seconds;
`--stop-fails N` makes the first N stops answer 500 ("Killing Cassandra Failed", a documented
answer) and leave Cassandra running; `--stop-lingers S` makes a stop answer 200 while the
process dies only S seconds later (the agent's SIGTERMs not yet taken); `--start-script` is
a comma-separated list `CODE:DELAY` (CODE 201, 420 or 500, or `hang` for an answer that never
comes) that the successive starts follow before the normal behaviour;
`--outage-at-start S` makes the agent unreachable (each connection closed unanswered) for
S seconds from the first start request (which is itself unanswered): an outage after the
stop, as cleave meets it when it starts Cassandra again.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


class Spec:
    def __init__(self, path):
        with open(path) as f:
            self.doc = json.load(f)

    def resolve(self, schema):
        while "$ref" in schema:
            name = schema["$ref"].rsplit("/", 1)[-1]
            schema = self.doc["components"]["schemas"][name]
        return schema

    def check(self, schema, value, where):
        """Problems of `value` against a JSON schema (the subset the document uses)."""
        s = self.resolve(schema)
        t = s.get("type")
        out = []
        if t == "object":
            if not isinstance(value, dict):
                return [f"{where}: expected an object, got {type(value).__name__}"]
            for k in s.get("required", []):
                if k not in value:
                    out.append(f"{where}: required property {k!r} missing")
            props = s.get("properties", {})
            for k, v in value.items():
                if k in props:
                    out += self.check(props[k], v, f"{where}.{k}")
                elif isinstance(s.get("additionalProperties"), dict):
                    out += self.check(s["additionalProperties"], v, f"{where}.{k}")
        elif t == "array":
            if not isinstance(value, list):
                return [f"{where}: expected an array"]
            for i, v in enumerate(value):
                out += self.check(s.get("items", {}), v, f"{where}[{i}]")
        elif t == "integer":
            if not isinstance(value, int) or isinstance(value, bool):
                out.append(f"{where}: expected an integer")
        elif t == "string":
            if not isinstance(value, str):
                out.append(f"{where}: expected a string")
        return out

    def operation(self, method, path):
        p = self.doc["paths"].get(path)
        if p is None:
            return None, f"{path}: not a path of the document"
        op = p.get(method.lower())
        if op is None:
            return None, f"{method} {path}: not a method of this path"
        return op, None

    def check_request(self, op, query, body):
        out = []
        allowed = {x["name"] for x in op.get("parameters", []) if x.get("in") == "query"}
        for k in query:
            if k not in allowed:
                out.append(f"query parameter {k!r} is not in the document")
        for x in op.get("parameters", []):
            if x.get("required") and x["name"] not in query:
                out.append(f"required query parameter {x['name']!r} missing")
        rb = op.get("requestBody")
        if rb is not None:
            schema = rb.get("content", {}).get("application/json", {}).get("schema")
            if schema is not None:
                try:
                    value = json.loads(body or b"null")
                except ValueError as e:
                    return out + [f"request body is not JSON: {e}"]
                out += self.check(schema, value, "request")
        elif body:
            out.append("a request body where the document has none")
        return out

    def check_answer(self, op, status, ctype, body):
        r = op["responses"].get(str(status))
        if r is None:
            return [f"status {status} is not among {sorted(op['responses'])}"]
        content = r.get("content")
        if not content:
            return ["a body where the document has none"] if body else []
        if ctype not in content:
            return [f"content type {ctype} is not among {sorted(content)}"]
        schema = content[ctype].get("schema", {})
        if ctype == "application/json":
            try:
                value = json.loads(body)
            except ValueError as e:
                return [f"answer is not JSON: {e}"]
            # The document types some JSON answers as `string` while the agent sends the
            # object (replication, cluster probe): a string schema admits any JSON here.
            if self.resolve(schema).get("type") == "string":
                return []
            return self.check(schema, value, "answer")
        return []


class Node:
    """The stand-in's Cassandra: a process holding a table file, or none."""

    def __init__(self, hold, running):
        self.hold = hold
        self.proc = None
        self.drained = False
        self.ready_at = 0.0
        self.lock = threading.Lock()
        if running:
            self.spawn(0)

    def spawn(self, ready_after):
        # Like a JVM, it holds the table's sstables: the first Data.db there, else --hold.
        table = os.path.dirname(self.hold)
        live = sorted(n for n in os.listdir(table) if n.endswith("-Data.db"))
        f = open(os.path.join(table, live[0]) if live else self.hold, "rb")
        self.proc = subprocess.Popen(["sleep", "100000"], stdin=f, start_new_session=True)
        f.close()
        self.drained = False
        self.ready_at = time.monotonic() + ready_after

    def kill(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--openapi", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--hold", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--start-fails", action="store_true")
    ap.add_argument("--cluster-unhealthy", action="store_true")
    ap.add_argument("--rf", type=int, default=3)
    ap.add_argument("--dc", default="dc1")
    # The agent's getReleaseVersion; 5.0.9 by default, whose rules are the unknown release's.
    ap.add_argument("--release", default="5.0.9")
    ap.add_argument("--ready-after", type=float, default=1.0)
    ap.add_argument("--cassandra-stopped", action="store_true")
    # JSON {"endpoints": [{ENDPOINT_IP, STATUS, IS_LOCAL, ...}], "ranges": [{tokens, endpoints}],
    # "keyspaces": [...]}, read at every call so that a test can change the ring mid-run.
    ap.add_argument("--ring")
    ap.add_argument("--drain-delay", type=float, default=0.0)
    ap.add_argument("--stop-fails", type=int, default=0)
    ap.add_argument("--stop-lingers", type=float, default=0.0)
    ap.add_argument("--start-script", default="")
    ap.add_argument("--outage-at-start", type=float, default=0.0)
    a = ap.parse_args()
    script = [x.split(":") for x in a.start_script.split(",") if x]
    faults = {"stops": 0, "outage_until": None}
    faults_lock = threading.Lock()
    spec = Spec(a.openapi)
    node = Node(a.hold, not a.cassandra_stopped)
    log_lock = threading.Lock()

    def data_files():
        try:
            return sorted(n for n in os.listdir(a.table) if n.endswith("-Data.db"))
        except OSError:
            return []

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def answer(self, op, method, path, query, body, violations):
            scripted = None
            if (method, path) == ("POST", "/api/v0/lifecycle/start"):
                scripted = self.scripted_start()
            if (method, path) == ("POST", "/api/v0/ops/node/drain"):
                time.sleep(a.drain_delay)
            status, ctype, out = scripted or self.route(method, path, query, body)
            if op is not None:
                violations += spec.check_answer(op, status, ctype, out)
            entry = {
                "t": time.monotonic(),
                "method": method,
                "path": path,
                "query": query,
                "status": status,
                "data": data_files(),
            }
            if violations:
                entry["violation"] = violations
            with log_lock:
                with open(a.log, "a") as f:
                    f.write(json.dumps(entry) + "\n")
            self.send_response(status)
            if out:
                self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def route(self, method, path, query, body):
            text = "text/plain"
            js = "application/json"
            with node.lock:
                running = node.proc is not None
                if (method, path) == ("GET", "/api/v0/metadata/localdc"):
                    return 200, text, a.dc.encode()
                if (method, path) == ("GET", "/api/v0/metadata/versions/release"):
                    return 200, text, a.release.encode()
                if (method, path) == ("GET", "/api/v0/ops/keyspace/replication"):
                    m = {"class": "org.apache.cassandra.locator.NetworkTopologyStrategy", a.dc: str(a.rf)}
                    return 200, js, json.dumps(m).encode()
                if (method, path) == ("GET", "/api/v0/probes/cluster"):
                    if a.cluster_unhealthy:
                        m = {"[-9223372036854775808, 0]": ["2 replicas required, but only 1 nodes in the ring"]}
                        return 500, js, json.dumps(m).encode()
                    return 200, text, b""
                if (method, path) == ("POST", "/api/v0/ops/tables/flush"):
                    return 200, text, b"OK"
                if (method, path) == ("POST", "/api/v0/ops/node/drain"):
                    node.drained = True
                    return 200, text, b"OK"
                if (method, path) == ("POST", "/api/v0/lifecycle/stop"):
                    with faults_lock:
                        faults["stops"] += 1
                        n = faults["stops"]
                    if n <= a.stop_fails:
                        return 500, text, b"Killing Cassandra Failed"
                    if a.stop_lingers and node.proc is not None:
                        proc = node.proc

                        def later():
                            time.sleep(a.stop_lingers)
                            with node.lock:
                                if node.proc is proc:
                                    node.kill()

                        threading.Thread(target=later, daemon=True).start()
                        return 200, text, b"OK"
                    node.kill()
                    return 200, text, b"OK"
                if (method, path) == ("GET", "/api/v0/lifecycle/pid"):
                    if running:
                        return 200, text, str(node.proc.pid).encode()
                    return 204, text, b""
                if (method, path) == ("POST", "/api/v0/lifecycle/start"):
                    if running:
                        return 202, text, b""
                    if a.start_fails:
                        return 420, text, b"Error starting Cassandra"
                    node.spawn(a.ready_after)
                    return 201, text, b"OK"
                if (method, path) == ("GET", "/api/v0/probes/readiness"):
                    if running and not node.drained and time.monotonic() >= node.ready_at:
                        return 200, text, b"OK"
                    return 500, text, b""
                if a.ring and (method, path) == ("GET", "/api/v0/metadata/endpoints"):
                    with open(a.ring) as f:
                        ring = json.load(f)
                    return 200, js, json.dumps({"entity": ring["endpoints"]}).encode()
                if a.ring and (method, path) == ("GET", "/api/v2/tokens/rangetoendpoint"):
                    with open(a.ring) as f:
                        ring = json.load(f)
                    if query.get("keyspaceName") not in ring.get("keyspaces", []):
                        return 404, text, b"keyspace not found"
                    m = {"token_range_to_endpoints": ring["ranges"]}
                    return 200, js, json.dumps(m).encode()
                if (method, path) == ("GET", "/api/v0/probes/liveness"):
                    return 200, text, b"OK"
            return 404, text, b"not handled by the stand-in"

        def scripted_start(self):
            """The next entry of --start-script: its delay is taken outside the node's lock."""
            with faults_lock:
                step = script.pop(0) if script else None
            if step is None:
                return None
            code, delay = step[0], float(step[1])
            if code == "hang":
                time.sleep(3600)
            time.sleep(delay)
            text = "text/plain"
            with node.lock:
                if int(code) == 201:
                    if node.proc is not None:
                        return 202, text, b""
                    node.spawn(a.ready_after)
                    return 201, text, b"OK"
            return int(code), text, b"Error starting Cassandra"

        def handle_any(self, method):
            u = urlsplit(self.path)
            with faults_lock:
                if (a.outage_at_start and faults["outage_until"] is None
                        and (method, u.path) == ("POST", "/api/v0/lifecycle/start")):
                    faults["outage_until"] = time.monotonic() + a.outage_at_start
                until = faults["outage_until"]
            if until is not None and time.monotonic() < until:
                # Unreachable: the connection is closed without an answer.
                with log_lock:
                    with open(a.log, "a") as f:
                        f.write(json.dumps({"t": time.monotonic(), "method": method, "path": u.path, "status": None, "outage": True}) + "\n")
                self.close_connection = True
                return
            query = {k: v[0] for k, v in parse_qs(u.query, keep_blank_values=True).items()}
            n = int(self.headers.get("Content-Length") or 0)
            if n > 1 << 20:
                self.send_error(413)
                return
            body = self.rfile.read(n) if n else b""
            op, problem = spec.operation(method, u.path)
            violations = [problem] if problem else spec.check_request(op, query, body)
            self.answer(op, method, u.path, query, body, violations)

        def do_GET(self):
            self.handle_any("GET")

        def do_POST(self):
            self.handle_any("POST")

        def do_PUT(self):
            self.handle_any("PUT")

        def do_DELETE(self):
            self.handle_any("DELETE")

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    srv.daemon_threads = True

    def stop(*_):
        node.kill()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    tmp = a.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(tmp, a.port_file)
    try:
        srv.serve_forever()
    finally:
        node.kill()


if __name__ == "__main__":
    sys.exit(main())
