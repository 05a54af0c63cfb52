// Copyright (c) 2026, the fencing developers
//
// leases.test.js -- LL4 through node-postgres: the whole life of a lease
// that outlives a transaction (acquire, a hundred batch transactions that
// each start with use_lease, renewals from another connection, release),
// every value a bound parameter, unnamed and named statements.  Tokens
// stay strings, as node-postgres returns a bigint: they are above 2^53.
// PGHOST, PGPORT and PGDATABASE name the server test/drivers/run.sh
// started.

'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const pg = require('pg');

const LIMIT = { timeout: 60000 };

async function connect() {
  const client = new pg.Client();
  await client.connect();
  return client;
}

test('LL4: a lease lives across 100 batches, renewed from another connection', LIMIT, async () => {
  const run = `node-lease-${crypto.randomBytes(6).toString('hex')}`;
  const table = `ledger_${crypto.randomBytes(6).toString('hex')}`;
  const work = await connect();
  const renew = await connect();
  try {
    await work.query(`CREATE TABLE ${table} (batch int PRIMARY KEY, amount int NOT NULL, fence bigint)`);
    await work.query('SELECT fencing.protect($1)', [table]);

    const token = (await work.query(
      'SELECT fencing.acquire_lease($1, $2::interval, NULL, $3) AS t', [run, '10 seconds', 'node'])).rows[0].t;
    assert.equal(typeof token, 'string');
    assert.ok(BigInt(token) > 2n ** 53n, 'tokens are above 2^53');

    for (let batch = 0; batch < 100; batch++) {
      await work.query('BEGIN');
      const used = await work.query(
        { name: 'use_lease', text: 'SELECT fencing.use_lease($1, $2) AS t', values: [run, token] });
      assert.equal(used.rows[0].t, token);
      await work.query(`INSERT INTO ${table} (batch, amount) VALUES ($1, $2)`, [batch, 1]);
      await work.query('COMMIT');
      if (batch % 10 === 0) {
        await renew.query('SELECT fencing.renew_lease($1, $2)', [run, BigInt(token)]);
      }
    }
    const released = await renew.query('SELECT fencing.release_lease($1, $2) AS r', [run, token]);
    assert.equal(released.rows[0].r, true);

    const { rows } = await work.query(
      `SELECT count(*)::int AS n, count(*) FILTER (WHERE fence = $1)::int AS stamped FROM ${table}`, [token]);
    assert.deepEqual(rows, [{ n: 100, stamped: 100 }]);

    // after the release the token is refused: FN004
    await work.query('BEGIN');
    let failed = null;
    try {
      await work.query('SELECT fencing.use_lease($1, $2)', [run, token]);
    } catch (err) {
      failed = err;
    }
    await work.query('ROLLBACK');
    assert.ok(failed, 'use_lease after the release fails');
    assert.equal(failed.code, 'FN004');
  } finally {
    await work.end();
    await renew.end();
  }
});
