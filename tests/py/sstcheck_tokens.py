#!/usr/bin/env python3
"""Every partition key of an SSTable with its token, as the independent checker computes it.

`../shared/tools/sstcheck.py` (written by someone who did not write cleave) only prints the
first and last token; this loads it as a module from where it lies (it is not copied) and
applies its own Index.db walk, partitioner lookup and token functions to every key, so that
cleave's tokens can be compared key by key.

usage: sstcheck_tokens.py SSTCHECK_PY DATA_DB  ->  {"partitioner": ..., "keys": [[hex, token], ...]}
"""
import importlib.util
import json
import struct
import sys


def load(path):
    spec = importlib.util.spec_from_file_location("sstcheck", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(sstcheck_path, data_path):
    sc = load(sstcheck_path)
    version = data_path.rsplit("/", 1)[-1].split("-")[0]
    partitioner = sc.read_partitioner(data_path, version)
    with open(sc.component(data_path, "Index.db"), "rb") as f:
        idx = f.read()
    keys, p = [], 0
    while p < len(idx):
        (kl,) = struct.unpack_from(">H", idx, p)
        p += 2
        key = idx[p:p + kl]
        p += kl
        _, p = sc.read_uvint(idx, p)
        size, p = sc.read_uvint(idx, p)
        p += size
        t = sc.order_key(partitioner, key)[0]
        keys.append([key.hex(), t.hex() if isinstance(t, bytes) else str(t)])
    json.dump({"partitioner": partitioner, "keys": keys}, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
