// Copyright (c) 2026, the fencing developers
//
// race_worker.js -- one racer of fencing.test.js's L4 race, in a process of
// its own: take the lock in a transaction through node-postgres, send the
// token (a string, or null) to the parent, and hold the transaction until
// the parent says every racer has tried.
//
//   argv: NAME (the spelling this racer uses), "named" or "unnamed"

'use strict';

const pg = require('pg');

async function main() {
  const [name, statement] = process.argv.slice(2);
  const client = new pg.Client();
  await client.connect();
  await client.query('BEGIN');
  const query = { text: 'SELECT fencing.try_lock($1) AS token', values: [name] };
  if (statement === 'named') query.name = 'race_try_lock';
  const { rows } = await client.query(query);
  const go = new Promise((resolve) => process.once('message', resolve));
  process.send({ token: rows[0].token });
  await go;
  await client.query('COMMIT');
  await client.end();
}

main().then(
  () => process.exit(0),
  (err) => {
    process.send({ error: String(err) });
    process.exit(1);
  }
);
