"""Asks through nlproxy with psycopg2 or psycopg 3.

Usage: ask_client.py psycopg2|psycopg3 DSN QUESTION...
Prints one "label: cols=a,b rows=1,x;2,y" line per ask and one "label notices:
progress=True sql=True" line from the driver's notices (the progress NOTICEs and
the one with the SQL), then "after: 42".
"""
import sys


def show(label, cur):
    cols = ",".join(d[0] for d in cur.description)
    rows = ";".join(",".join(str(v) for v in r) for r in cur.fetchall())
    print(f"{label}: cols={cols} rows={rows}", flush=True)


def notices(label, msgs):
    progress = any("nlproxy: generating candidate" in m for m in msgs)
    sql = any("SELECT" in m for m in msgs)
    print(f"{label} notices: progress={progress} sql={sql}", flush=True)


def main():
    driver, dsn, questions = sys.argv[1], sys.argv[2], sys.argv[3:]
    if driver == "psycopg2":
        import psycopg2
        conn = psycopg2.connect(dsn)
        conn.autocommit = True
        cur = conn.cursor()
        cur.execute("-- ask: " + questions[0])
        show("execute", cur)
        notices("execute", conn.notices)
        del conn.notices[:]
        cur.execute("/* ask: " + questions[1] + " */")
        show("comment", cur)
        notices("comment", conn.notices)
    else:
        import psycopg
        conn = psycopg.connect(dsn, autocommit=True)
        got = []
        conn.add_notice_handler(lambda d: got.append(d.message_primary or ""))
        cur = conn.cursor()
        cur.execute("-- ask: " + questions[0])
        show("execute", cur)
        notices("execute", got)
        got.clear()
        cur.execute("-- ask: " + questions[1], prepare=True)
        show("prepared", cur)
        notices("prepared", got)
    cur.execute("SELECT 42")
    print(f"after: {cur.fetchone()[0]}", flush=True)
    conn.close()


main()
