#!/usr/bin/env python3
"""Write a test SSTable with cqlite, an independent writer (cqlite-py 0.17).

cleave's tests must not build their inputs with cleave's own writer when the point is to
see how cleave handles what another implementation wrote. cqlite writes uncompressed BIG
`nb` SSTables with the Murmur3 partitioner; this script drives it with generated rows so
that a test gets a table of a chosen schema (composite partition keys, in particular,
which the corpus does not have with a known schema).

Usage:
    python3 tests/py/cqlite_write.py --schema SCHEMA.cql --keyspace KS --table T \\
        --partitions N --rows-per-partition R --out DIR

SCHEMA.cql defines exactly one table (cqlite writes one table per database). Its columns
must be of the types this script generates values for (text, ascii, blob, int, bigint,
smallint, uuid, boolean); partition `i`, row `j` gets values derived from (i, j, column),
deterministic, distinct across partitions for the partition key. The SSTable's files end
up under `DIR/data/KS/T/`; the script prints {"data_db": path, "rows": count}.

Exit status 0 on success; otherwise {"error": ...} on stdout and status 2 (bad input) or 3
(cqlite failed).
"""

import argparse
import glob
import json
import os
import re
import sys
import uuid

import cqlite


def literal(cql_type, i, j, column, in_key):
    """A CQL literal of `cql_type` for partition i, row j (j ignored for key columns)."""
    t = cql_type.strip().lower()
    n = i if in_key else i * 31 + j
    if t in ("text", "varchar", "ascii"):
        # Lengths vary with i, so keys are not all one size; other columns are longer,
        # so that a few hundred partitions span more than one 64 KiB CRC block.
        return "'" + f"{column}{n:05d}" + "x" * (n % 7) + ("" if in_key else "y" * 60) + "'"
    if t == "blob":
        return "0x" + f"{n:06x}" + "ab" * (n % 5)
    if t == "int":
        return str(n * 7 - 1000)
    if t == "bigint":
        return str(n * 1000003 - 2**40)
    if t == "smallint":
        return str(n % 30000)
    if t == "boolean":
        return "true" if n % 2 else "false"
    if t == "uuid":
        return str(uuid.UUID(int=(n * 0x9E3779B97F4A7C15) % 2**128))
    raise ValueError(f"no generator for column {column} of type {cql_type}")


def table_def(schema_text):
    """(columns [(name, type)], partition key names) of the one CREATE TABLE."""
    m = re.search(r"CREATE\s+TABLE\s+[\w.\"]+\s*\((.*)\)\s*;?", schema_text,
                  re.IGNORECASE | re.DOTALL)
    if not m:
        raise ValueError("no CREATE TABLE in the schema")
    body = m.group(1)
    pk = re.search(r"PRIMARY\s+KEY\s*\(\s*\(([^)]*)\)", body, re.IGNORECASE)
    if not pk:
        raise ValueError("the table needs a parenthesised partition key: PRIMARY KEY ((a, b), ...)")
    keys = [k.strip().lower() for k in pk.group(1).split(",")]
    columns = []
    for item in body[:pk.start()].split(","):
        item = item.strip()
        if item:
            name, typ = item.split(None, 1)
            columns.append((name.lower(), typ))
    return columns, keys


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--schema", required=True)
    p.add_argument("--keyspace", required=True)
    p.add_argument("--table", required=True)
    p.add_argument("--partitions", type=int, required=True)
    p.add_argument("--rows-per-partition", type=int, default=1)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    try:
        with open(a.schema, encoding="utf-8") as f:
            columns, keys = table_def(f.read())
        names = ", ".join(c for c, _ in columns)
        read_root = os.path.join(a.out, "empty")
        os.makedirs(read_root, exist_ok=True)
    except (OSError, ValueError) as e:
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        return 2
    try:
        db = cqlite.open(read_root, schema=a.schema, writable=True, write_dir=a.out)
        rows = 0
        for i in range(a.partitions):
            for j in range(a.rows_per_partition):
                values = ", ".join(literal(t, i, j, c, c in keys) for c, t in columns)
                db.execute(f"INSERT INTO {a.keyspace}.{a.table} ({names}) VALUES ({values})")
                rows += 1
        db.close()
    except Exception as e:  # anything cqlite raises
        print(json.dumps({"error": f"cqlite: {type(e).__name__}: {e}"}))
        return 3
    found = glob.glob(os.path.join(a.out, "data", a.keyspace, a.table, "*-Data.db"))
    if len(found) != 1:
        print(json.dumps({"error": f"cqlite wrote {len(found)} Data.db files: {found}"}))
        return 3
    print(json.dumps({"data_db": found[0], "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
