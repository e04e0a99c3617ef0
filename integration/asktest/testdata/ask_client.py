"""Asks through nlproxy with psycopg2 or psycopg 3.

Usage: ask_client.py psycopg2|psycopg3 DSN QUESTION...
Prints one "label: cols=a,b rows=1,x;2,y" line per ask, then "after: 42".
"""
import sys


def show(label, cur):
    cols = ",".join(d[0] for d in cur.description)
    rows = ";".join(",".join(str(v) for v in r) for r in cur.fetchall())
    print(f"{label}: cols={cols} rows={rows}", flush=True)


def main():
    driver, dsn, questions = sys.argv[1], sys.argv[2], sys.argv[3:]
    if driver == "psycopg2":
        import psycopg2
        conn = psycopg2.connect(dsn)
        conn.autocommit = True
        cur = conn.cursor()
        cur.execute("-- ask: " + questions[0])
        show("execute", cur)
        cur.execute("/* ask: " + questions[1] + " */")
        show("comment", cur)
    else:
        import psycopg
        conn = psycopg.connect(dsn, autocommit=True)
        cur = conn.cursor()
        cur.execute("-- ask: " + questions[0])
        show("execute", cur)
        cur.execute("-- ask: " + questions[1], prepare=True)
        show("prepared", cur)
    cur.execute("SELECT 42")
    print(f"after: {cur.fetchone()[0]}", flush=True)
    conn.close()


main()
