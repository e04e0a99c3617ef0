// Asks through nlproxy with node-postgres: a simple query and a named
// (extended-protocol) one. Prints "label: cols=a,b rows=1,x;2,y", then "after: 42".
// Usage: node ask_client.js CONNECTION_STRING QUESTION1 QUESTION2
const { Client } = require('pg');

function show(label, res) {
  const cols = res.fields.map((f) => f.name).join(',');
  const rows = res.rows.map((r) => res.fields.map((f) => String(r[f.name])).join(',')).join(';');
  console.log(`${label}: cols=${cols} rows=${rows}`);
}

(async () => {
  const [conn, q1, q2] = process.argv.slice(2);
  const client = new Client({ connectionString: conn });
  await client.connect();
  show('simple', await client.query('-- ask: ' + q1));
  show('extended', await client.query({ name: 'ask2', text: '-- ask: ' + q2 }));
  const after = await client.query('SELECT 42 AS x');
  console.log(`after: ${after.rows[0].x}`);
  await client.end();
})().catch((err) => {
  console.error(`error: ${err.code || ''} ${err.message}`);
  process.exit(1);
});
