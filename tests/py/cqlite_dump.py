#!/usr/bin/env python3
"""Dump Cassandra SSTables through cqlite, as an independent reference reader.

cleave's integration tests must not judge cleave's decoding with cleave's own
code. This script reads the same SSTables with a separate implementation, the
`cqlite` Python package (cqlite-py 0.17), and prints what it saw as one JSON
object, which the Rust tests compare with cleave's output:

    {"rows": [{column: value, ...}, ...],
     "partition_keys_hex": ["<partition key as serialized on disk>", ...]}

Usage:
    python3 tests/py/cqlite_dump.py --schema SCHEMA.cql --keyspace KS --table T \\
        DATA_DB_PATH [DATA_DB_PATH ...]

cqlite only finds SSTables laid out as `<root>/<ks>/<table>-<32 hex>/`, so the
components of each given `*-Data.db` are symlinked into such a layout in a
temporary directory, which is removed at exit. If two given SSTables share a
generation, the second one's links get a fresh generation number.

In the schema file, a table named with the placeholder `VV` (as in
legacy_tables_schema.DERIVED.cql: `legacy_VV_simple`) also matches `T`, with
`VV` replaced by the version it stands for. If `T` is still not defined, the
script fails: without a schema cqlite would infer one with other column names.

Values are rendered deterministically: bytes as hex, UUIDs, decimals, inet
addresses, dates and timestamps (ISO 8601) as strings, non-finite floats as
"NaN"/"Infinity"/"-Infinity", durations as {"months","days","nanos"}, UDTs as
objects, sets as lists sorted by their compact JSON text, lists and tuples as
lists, maps as lists of [key, value] pairs in the order cqlite gives them.
Counters and `time` values are integers. Rows are printed in cqlite's order.

`partition_keys_hex` lists each partition key once, in the order cqlite first
returned it, encoded as Cassandra serializes it: the column's bytes for a
one-column key, CompositeType encoding (u16 length, bytes, 0x00 per component)
for a multi-column key. cqlite 0.17 cannot select token(...) (it answers
"Function expressions not yet implemented") and has no token API, so no
tokens are reported.

Known cqlite 0.17 limits: it reads BIG na, nb, oa and BTI da SSTables but
skips others (ma..me, nc) silently, which this script turns into an error; it
returns no rows for a table that has only primary key columns; it merges
several SSTables assuming Murmur3 order, which duplicates partitions of
ByteOrderedPartitioner SSTables (such as the legacy fixtures), so this script
refuses several SSTables whose Statistics.db names another partitioner. A
single BIG SSTable comes back in on-disk order (a BTI one, in Murmur3 order).

Exit status: 0 on success; otherwise stdout holds {"error": "..."} and the
status is 2 for bad input (arguments, files, schema, a value it cannot
render) or 3 when cqlite fails, skips an SSTable or cannot be trusted.
"""

import argparse
import datetime
import decimal
import ipaddress
import json
import math
import os
import re
import signal
import struct
import sys
import tempfile
import uuid

import cqlite


class InputError(Exception):
    """Bad arguments, files or schema (exit status 2)."""


# ---------------------------------------------------------------- schema

def _split_top(text, sep=","):
    """Split on `sep` outside (), <> and quotes."""
    parts, depth, quote, cur = [], 0, None, []
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "(<":
            depth += 1
        elif ch in ")>":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur).strip())
    return [p for p in parts if p]


def _ident(tok):
    tok = tok.strip()
    return tok[1:-1].replace('""', '"') if tok.startswith('"') else tok.lower()


_TABLE_RE = re.compile(
    r'CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?("[^"]+"|\w+)\s*\.\s*("[^"]+"|\w+)\s*\(',
    re.IGNORECASE)


def _tables(schema_text):
    """Yield (keyspace, table, body) for each CREATE TABLE, names as written."""
    text = re.sub(r"--[^\n]*|//[^\n]*", "", schema_text)
    for m in _TABLE_RE.finditer(text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        yield m.group(1), m.group(2), text[m.end():i - 1]


def resolve_schema(schema_text, keyspace, table):
    """Return (schema text defining keyspace.table, {column: cql type}, [partition key columns])."""
    found = {(_ident(ks), _ident(t)): body for ks, t, body in _tables(schema_text)}
    if (keyspace, table) not in found:
        for ks, t in found if "VV" in schema_text else ():
            m = re.fullmatch(re.escape(t).replace("vv", "(.+?)"), table)
            if ks == keyspace and m:
                schema_text = schema_text.replace("VV", m.group(1))
                return resolve_schema(schema_text, keyspace, table)
        raise InputError(f"table {keyspace}.{table} is not defined in the schema")
    columns, pk = {}, None
    for item in _split_top(found[(keyspace, table)]):
        m = re.match(r"PRIMARY\s+KEY\s*\((.*)\)\s*$", item, re.IGNORECASE | re.DOTALL)
        if m:
            first = _split_top(m.group(1))[0]
            pk = [_ident(c) for c in _split_top(first.strip("() \n\t"))]
            continue
        m = re.match(r'("[^"]+"|\w+)\s+(.*?)(\s+PRIMARY\s+KEY)?(\s+STATIC)?\s*$',
                     item, re.IGNORECASE | re.DOTALL)
        if not m:
            raise InputError(f"cannot parse column definition {item!r}")
        columns[_ident(m.group(1))] = m.group(2).strip()
        if m.group(3):
            pk = [_ident(m.group(1))]
    if not pk:
        raise InputError(f"no PRIMARY KEY found for {keyspace}.{table}")
    return schema_text, columns, pk


# ---------------------------------------------------------------- layout

def sstable_components(data_db):
    """Return (directory, prefix, [component file names]) for a *-Data.db path."""
    if not data_db.endswith("Data.db") or not os.path.isfile(data_db):
        raise InputError(f"not a Data.db file: {data_db}")
    directory, name = os.path.split(os.path.abspath(data_db))
    prefix = name[:-len("Data.db")]
    return directory, prefix, sorted(f for f in os.listdir(directory) if f.startswith(prefix))


def layout(data_dbs, table_dir):
    """Symlink every component of every SSTable into table_dir."""
    parsed = [sstable_components(p) for p in data_dbs]
    used = {prefix.split("-")[1] for _, prefix, _ in parsed if prefix.count("-") >= 3}
    fresh = max([int(g) for g in used if g.isdigit()] + [0]) + 1
    seen = set()
    for directory, prefix, files in parsed:
        fields = prefix.split("-")  # e.g. ["nb", "1", "big", ""]
        if len(fields) < 4:
            raise InputError(f"unexpected SSTable file name {prefix}Data.db")
        new_prefix = prefix
        if fields[1] in seen:
            fields[1] = str(fresh)
            fresh += 1
            new_prefix = "-".join(fields)
        seen.add(fields[1])
        for f in files:
            os.symlink(os.path.join(directory, f),
                       os.path.join(table_dir, new_prefix + f[len(prefix):]))


def partitioner(data_db):
    """Partitioner class named in the SSTable's Statistics.db, or None."""
    try:
        with open(data_db[:-len("Data.db")] + "Statistics.db", "rb") as f:
            m = re.search(rb"org\.apache\.cassandra\.dht\.(\w+)", f.read())
    except OSError:
        return None
    return m.group(1).decode() if m else None


# ---------------------------------------------------------------- values

def _compact(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def render(v):
    """Render a value returned by cqlite as deterministic JSON-compatible data."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        return v if math.isfinite(v) else ("Infinity" if v > 0 else "-Infinity")
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, (uuid.UUID, decimal.Decimal, ipaddress.IPv4Address, ipaddress.IPv6Address)):
        return str(v)
    if isinstance(v, (datetime.date, datetime.time)):  # datetime is a date too
        return v.isoformat()
    if isinstance(v, cqlite.Duration):
        return {"months": v.months, "days": v.days, "nanos": v.nanos}
    if isinstance(v, cqlite.Udt):
        return {k: render(x) for k, x in v.items()}
    if isinstance(v, (set, frozenset)):
        return sorted((render(x) for x in v), key=_compact)
    if isinstance(v, (list, tuple)):
        return [render(x) for x in v]
    if isinstance(v, dict):
        return [[render(k), render(x)] for k, x in v.items()]
    raise TypeError(f"cannot render {type(v).__name__} value {v!r}")


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_FIXED = {"int": ">i", "bigint": ">q", "counter": ">q", "smallint": ">h", "tinyint": ">b",
          "float": ">f", "double": ">d", "time": ">q"}


def _varint(n):
    return n.to_bytes(max(1, (n + (n < 0)).bit_length() // 8 + 1), "big", signed=True)


def serialize(v, cql_type):
    """Serialize one partition key column value the way Cassandra stores it."""
    t = re.sub(r"\s+", "", cql_type.lower())
    if t.startswith("frozen<"):
        t = t[len("frozen<"):-1]
    if t in ("text", "varchar"):
        return v.encode("utf-8")
    if t == "ascii":
        return v.encode("ascii")
    if t == "blob":
        return bytes(v)
    if t in _FIXED:
        return struct.pack(_FIXED[t], v)
    if t == "boolean":
        return b"\x01" if v else b"\x00"
    if t in ("uuid", "timeuuid"):
        return uuid.UUID(str(v)).bytes
    if t == "inet":
        return ipaddress.ip_address(v).packed
    if t == "varint":
        return _varint(int(v))
    if t == "decimal":
        sign, digits, exp = decimal.Decimal(v).as_tuple()
        unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
        return struct.pack(">i", -exp) + _varint(unscaled)
    if t == "timestamp":
        if isinstance(v, datetime.datetime):
            v = (v if v.tzinfo else v.replace(tzinfo=datetime.timezone.utc)) - _EPOCH
            v = v // datetime.timedelta(milliseconds=1)
        return struct.pack(">q", v)
    if t == "date":
        if isinstance(v, datetime.date):
            v = (v - datetime.date(1970, 1, 1)).days
        return struct.pack(">I", v + 2**31)
    raise TypeError(f"cannot serialize a partition key of type {cql_type}")


def partition_key_hex(row, pk, columns):
    parts = [serialize(row[c], columns[c]) for c in pk]
    if len(parts) == 1:
        return parts[0].hex()
    return b"".join(struct.pack(">H", len(p)) + p + b"\x00" for p in parts).hex()


# ---------------------------------------------------------------- main

def dump(args):
    try:
        with open(args.schema, encoding="utf-8") as f:
            schema_text, columns, pk = resolve_schema(f.read(), args.keyspace, args.table)
    except OSError as e:
        raise InputError(f"cannot read schema: {e}") from e
    tokens = {}
    if args.murmur3_tokens:
        with open(args.murmur3_tokens, encoding="utf-8") as f:
            tokens = json.load(f)
    others = {partitioner(p) for p in args.data_db} - {None, "Murmur3Partitioner"}
    if len(args.data_db) > 1 and others:
        return {"error": f"cqlite merges SSTables in Murmur3 token order, so it duplicates "
                         f"partitions of several {'/'.join(sorted(others))} SSTables; "
                         "read them one at a time"}, 3
    with tempfile.TemporaryDirectory(prefix="cqlite_dump.") as root:
        data_root = os.path.join(root, "data")
        table_dir = os.path.join(data_root, args.keyspace, f"{args.table}-{uuid.uuid4().hex}")
        os.makedirs(table_dir)
        layout(args.data_db, table_dir)
        schema_path = os.path.join(root, "schema.cql")
        with open(schema_path, "w", encoding="utf-8") as f:
            f.write(schema_text)
        try:
            with cqlite.open(data_root, schema=schema_path) as db:
                opened = db.stats().storage_stats["sstable_count"]
                if opened != len(args.data_db):
                    raise cqlite.CqliteError(
                        f"cqlite opened {opened} of {len(args.data_db)} SSTables "
                        "(it skips versions it does not support)")
                query = f"SELECT * FROM {args.keyspace}.{args.table}"
                raw = [dict(r.items()) for r in db.execute_streaming(query)]
                # cqlite cannot SELECT token(...), but it evaluates token() in WHERE with
                # Murmur3: asking for each token cleave computed must return that key only.
                token_hits = {}
                for key_hex, token in tokens.items():
                    q = (f"SELECT * FROM {args.keyspace}.{args.table} "
                         f"WHERE token({', '.join(pk)}) = {int(token)}")
                    hits = dict.fromkeys(partition_key_hex(dict(r.items()), pk, columns)
                                         for r in db.execute_streaming(q))
                    token_hits[key_hex] = list(hits)
        except Exception as e:  # anything cqlite raises
            return {"error": f"cqlite: {type(e).__name__}: {e}"}, 3
    keys = dict.fromkeys(partition_key_hex(r, pk, columns) for r in raw)
    rows = [{k: render(v) for k, v in r.items()} for r in raw]
    out = {"rows": rows, "partition_keys_hex": list(keys)}
    if args.murmur3_tokens:
        out["murmur3_token_hits"] = token_hits
    return out, 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schema", required=True, help="CQL schema file")
    parser.add_argument("--keyspace", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--murmur3-tokens", metavar="JSON",
                        help="file with {key_hex: murmur3 token}; report which partitions "
                             "cqlite returns for WHERE token(pk) = each token")
    parser.add_argument("data_db", nargs="+", help="*-Data.db path of each SSTable")
    args = parser.parse_args()
    # Turn SIGTERM into SystemExit so the temporary directory is still removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        result, status = dump(args)
    except (InputError, TypeError, ValueError, OSError) as e:
        result, status = {"error": f"{type(e).__name__}: {e}"}, 2
    json.dump(result, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
