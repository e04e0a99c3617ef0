// Runs the shared client scenario with node-postgres and prints one line per
// step; the Go test compares the lines. Settings come from PG* environment
// variables; NODE_PATH points at the node_modules holding `pg`.
const fs = require('fs');
const { Client } = require('pg');

const TYPES_SQL = "SELECT 42::int4, 'héllo wörld ✓ 日本語'::text, 12345.6789::numeric, " +
  "'2024-01-02 03:04:05.123+00'::timestamptz, '\\xdeadbeef'::bytea, NULL::text";
const MARKER_SQL = '/* ask: how many rows are in tx_t */ SELECT 1';

function fmt(v) {
  if (v === null) return 'null';
  if (Buffer.isBuffer(v)) return v.toString('hex');
  if (v instanceof Date) return String(v.getTime());
  return String(v);
}
const row = (res) => res.rows.length ? res.rows[0].map(fmt).join('|') : '<no row>';

async function main() {
  const cfg = { rowMode: 'array' };
  const conn = {};
  if (process.env.PGSSLMODE && process.env.PGSSLMODE !== 'disable') {
    conn.ssl = { ca: fs.readFileSync(process.env.PGSSLROOTCERT), servername: 'localhost' };
  } else {
    conn.ssl = false;
  }
  const c = new Client(conn);
  await c.connect();
  console.log('connect: ok');
  const q = (text, values) => c.query({ text, values, ...cfg });
  console.log('simple: ' + row(await q('SELECT 1')));
  console.log('param: ' + row(await q('SELECT $1::int + 1, $2::text', [41, 'héllo ✓ 日本'])));
  console.log('types: ' + row(await q(TYPES_SQL)));
  try { await q('SELECT 1/0'); console.log('error: none'); } catch (e) { console.log('error: ' + e.code); }
  console.log('recovered: ' + row(await q('SELECT 2')));
  await q('CREATE TEMP TABLE tx_t(x int)');
  await q('BEGIN');
  await q('INSERT INTO tx_t VALUES (1)');
  await q('ROLLBACK');
  console.log('rollback: ' + row(await q('SELECT count(*) FROM tx_t')));
  try { await q(MARKER_SQL); console.log('marker: none'); } catch (e) { console.log('marker: ' + e.code); }
  try { await q(MARKER_SQL + ' WHERE $1::int > 0', [1]); console.log('marker-extended: none'); } catch (e) { console.log('marker-extended: ' + e.code); }
  console.log('after-marker: ' + row(await q('SELECT 3')));

  // Query queue: issue everything at once; pg queues them on the one connection.
  const results = await Promise.allSettled([
    q('SELECT 10'),
    q('SELECT $1::int', [11]),
    q('SELECT 1/0'),
    q(MARKER_SQL),
    q('SELECT $1::text', ['twelve']),
  ]);
  console.log('queue: ' + results.map((r) => r.status === 'fulfilled' ? row(r.value) : 'E' + r.reason.code).join(','));
  await c.end();
}

main().catch((e) => { console.error('fatal:', e); process.exit(1); });
