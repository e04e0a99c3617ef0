"""Asks every question read from stdin ("id<TAB>question" per line) through
nlproxy with psycopg 3.

Usage: safety_client.py DSN MODE [CLIENT_ENCODING]
MODE "binary": binary cursors, autocommit (idle), each question once.
MODE "prepare": prepare=True, each question executed three times, each
question in its own transaction, which must be writable again afterwards.
Prints "id#k OK rows" or "id#k ERR sqlstate", then "after 42".
"""
import sys

import psycopg


def main():
    dsn, mode = sys.argv[1], sys.argv[2]
    enc = sys.argv[3] if len(sys.argv) > 3 else ""
    conn = psycopg.connect(dsn, autocommit=(mode == "binary"))
    if enc:
        conn.execute("SET client_encoding TO '%s'" % enc)
        if mode != "binary":
            conn.commit()
    for line in sys.stdin.read().splitlines():
        vid, q = line.split("\t", 1)
        runs = 1 if mode == "binary" else 3
        ok = True
        for k in range(1, runs + 1):
            try:
                if mode == "binary":
                    cur = conn.cursor(binary=True)
                    cur.execute("-- ask: " + q)
                else:
                    cur = conn.execute("-- ask: " + q, prepare=True)
                rows = cur.fetchall()
                print(f"{vid}#{k} OK {len(rows)}", flush=True)
            except psycopg.Error as e:
                print(f"{vid}#{k} ERR {e.sqlstate}", flush=True)
                ok = False
                break
        if mode != "binary":
            if ok:
                try:
                    conn.execute("INSERT INTO scratch VALUES (1)")
                    print(f"{vid}-write OK", flush=True)
                except psycopg.Error as e:
                    print(f"{vid}-write ERR {e.sqlstate}", flush=True)
            conn.rollback()
    conn.autocommit = True
    print("after", conn.execute("SELECT 42").fetchone()[0], flush=True)
    conn.close()


main()
