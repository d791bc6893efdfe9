#!/usr/bin/env python3
"""Recompute a seckill room's draw from its published record, apart from the Go code.

usage: verify_draw.py RECORD.json [--sale SALE_ID (--users FILE | USER_ID ...)]

RECORD.json is the JSON of GET /v1/sales/{sale}/queue/draw. From its secret and
entries this recomputes the commitment, the digest, the seed and the order; with
--sale, it also recomputes the entries from the sale's id and the user ids (given
on the command line, or in FILE, one per line, UTF-8). It prints one JSON object:
{"commitment", "digest", "seed", "order"} and, with --sale, "entries".

Every hash is SHA-256 over the UTF-8 text shown, as 64 lowercase hex characters.
"""
import hashlib
import json
import sys


def sha256hex(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def main(argv):
    if not argv or argv[0].startswith("-"):
        sys.exit(__doc__)
    with open(argv[0], encoding="utf-8") as f:
        record = json.load(f)
    secret, entries = record["secret"], record.get("entries") or []

    out = {"commitment": sha256hex(secret)}
    out["digest"] = sha256hex("\n".join(entries))
    out["seed"] = sha256hex(secret + "\n" + out["digest"])
    out["order"] = sorted(entries, key=lambda e: sha256hex(out["seed"] + "\n" + e))

    rest = argv[1:]
    if rest:
        if rest[0] != "--sale" or len(rest) < 2:
            sys.exit(__doc__)
        sale, users = rest[1], rest[2:]
        if users[:1] == ["--users"]:
            with open(users[1], encoding="utf-8", newline="") as f:
                users = [u for u in f.read().split("\n") if u != ""]
        out["entries"] = sorted(sha256hex(sale + "\n" + u) for u in users)

    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main(sys.argv[1:])
