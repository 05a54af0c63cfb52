// Copyright (c) 2026, the fencing developers
//
// A lease's whole life through PgBouncer in transaction pooling mode: each
// transaction may run on another server connection, so nothing may live in
// the session.

'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const { Lease, LeaseLostError } = require('pg-fencing');
const { unique, bouncerPool, admin, ledger } = require('./helpers');

test('a lease through PgBouncer', async () => {
  const table = await ledger();
  const name = unique('bouncer');
  const p = bouncerPool();
  try {
    const lease = await Lease.acquire(p, name, { ttlMs: 3000 });
    for (let i = 0; i < 8; i++) {
      const client = await p.connect();
      try {
        const seen = await lease.transaction(client, async (c) => {
          await c.query(`UPDATE ${table} SET amount = amount + 1 WHERE id = $1`, [1 + (i % 2)]);
          return (await c.query("SELECT current_setting('fencing.token') AS t")).rows[0].t;
        });
        assert.equal(seen, lease.token.toString());
      } finally {
        client.release();
      }
    }
    for (let i = 0; i < 4; i++) {
      const { rows } = await p.query("SELECT current_setting('fencing.token', true) AS t");
      assert.ok(rows[0].t === null || rows[0].t === '');
    }
    await new Promise((resolve) => setTimeout(resolve, 4000));
    assert.equal(lease.lost, false);
    assert.equal(await Lease.acquire(p, name), null);
    await lease.release();
    const { rows } = await admin((c) => c.query(`SELECT amount, fence FROM ${table} ORDER BY id`));
    assert.deepEqual(rows.map((r) => [r.amount, BigInt(r.fence)]), [[4, lease.token], [4, lease.token]]);

    const old = await Lease.acquire(p, name, { ttlMs: 1000, renew: false });
    const newer = await Lease.acquire(p, name, { ttlMs: 30000, timeoutMs: 10000 });
    const client = await p.connect();
    try {
      await newer.transaction(client, (c) => c.query(`UPDATE ${table} SET amount = 0 WHERE id = 1`));
      await assert.rejects(old.transaction(client, (c) =>
        c.query(`UPDATE ${table} SET amount = 1 WHERE id = 1`)), LeaseLostError);
    } finally {
      client.release();
    }
    await newer.release();
  } finally {
    await p.end();
  }
});
