// Copyright (c) 2026, the fencing developers
//
// When the work fails: a release that did not get through keeps the lease
// for another try; a batch whose callback caught an error of its own
// transaction is rolled back by the server and must not come out as a
// success (a StaleTokenError or LeaseLostError when that error was
// fencing's, which also loses the lease); a savepoint the callback rolled
// back to leaves a batch that commits.

'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const { Lease } = require('pg-fencing');
const { unique, pool, admin } = require('./helpers');

async function held(name) {
  const { rows } = await admin((c) => c.query(
    'SELECT count(*)::int AS n FROM fencing.leases WHERE name = $1', [name]));
  return rows[0].n;
}

test('a release that did not get through keeps the lease for another try', async () => {
  const p = pool({ max: 1, connectionTimeoutMillis: 300 });
  const name = unique('release-again');
  try {
    const lease = await Lease.acquire(p, name, { ttlMs: 600000, renew: false });
    const busy = await p.connect(); // the pool's one client: the release finds none
    try {
      await assert.rejects(lease.release(), /timeout/i);
    } finally {
      busy.release();
    }
    assert.equal(await held(name), 1);
    await lease.release();
    assert.equal(await held(name), 0);
  } finally {
    await p.end();
  }
});
