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
const { Lease, StaleTokenError, LeaseLostError } = require('pg-fencing');
const { unique, pool, admin, ledger } = require('./helpers');

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

test('a lease whose release did not get through is lost at its deadline', { timeout: 30000 }, async () => {
  // the handle keeps the lease, and nothing renews it any more: its
  // deadline still loses it, the listeners before the signal
  const p = pool({ max: 1, connectionTimeoutMillis: 300 });
  const name = unique('release-failed-lapse');
  try {
    const lease = await Lease.acquire(p, name, { ttlMs: 2000 });
    const told = [];
    lease.on('lost', () => told.push(lease.signal.aborted));
    const busy = await p.connect(); // the pool's one client: the release finds none
    try {
      await assert.rejects(lease.release(), /timeout/i);
    } finally {
      busy.release();
    }
    assert.equal(lease.lost, false);
    const aborted = new Promise((resolve) => lease.signal.addEventListener('abort', resolve, { once: true }));
    let timer;
    const late = new Promise((resolve) => { timer = setTimeout(resolve, 10000, 'late'); });
    const first = await Promise.race([aborted, late]);
    clearTimeout(timer);
    assert.notEqual(first, 'late', 'the lease was not lost at its deadline');
    assert.deepEqual(told, [false]);
    assert.ok(lease.signal.reason instanceof LeaseLostError);
    const client = await p.connect();
    try {
      await assert.rejects(lease.transaction(client, async () => {}), LeaseLostError);
    } finally {
      client.release();
    }
  } finally {
    await p.end();
  }
});

async function batchTest(fn) {
  const table = await ledger();
  const p = pool();
  const client = await p.connect();
  try {
    await fn(p, client, table);
  } finally {
    client.release();
    await p.end();
  }
}

const amounts = async (table) => (await admin((c) => c.query(
  `SELECT amount FROM ${table} ORDER BY id`))).rows.map((r) => r.amount);

test('a batch whose callback caught a stale write throws StaleTokenError', () => batchTest(async (p, client, table) => {
  const lease = await Lease.acquire(p, unique('caught'));
  await admin((c) => c.query(`UPDATE ${table} SET fence = fencing.next_token() WHERE id = 2`));
  let caught = null;
  await assert.rejects(lease.transaction(client, async (c) => {
    await c.query(`UPDATE ${table} SET amount = 7 WHERE id = 1`);
    await c.query(`UPDATE ${table} SET amount = 9 WHERE id = 2`).catch((err) => { caught = err.code; });
  }), (err) => err instanceof StaleTokenError && err.code === 'FN001');
  assert.equal(caught, 'FN001');
  assert.equal(lease.lost, true);
  assert.deepEqual(await amounts(table), [0, 0]);
  assert.equal((await client.query('SELECT 1 AS one')).rows[0].one, 1); // the client is out of the batch
  await lease.release().catch(() => {});
}));

test('a batch whose callback caught the lease lost throws LeaseLostError', () => batchTest(async (p, client, table) => {
  const name = unique('caught-lost');
  const lease = await Lease.acquire(p, name);
  let caught = null;
  await assert.rejects(lease.transaction(client, async (c) => {
    await c.query(`UPDATE ${table} SET amount = 7 WHERE id = 1`);
    await admin((a) => a.query('SELECT fencing.break_lease($1)', [name]));
    await c.query('SELECT fencing.use_lease($1, $2)', [name, lease.token.toString()])
      .catch((err) => { caught = err.code; });
  }), (err) => err instanceof LeaseLostError && err.code === 'FN004');
  assert.equal(caught, 'FN004');
  assert.equal(lease.lost, true);
  assert.deepEqual(await amounts(table), [0, 0]);
  await lease.release().catch(() => {});
}));

test('a batch whose callback caught another error is not a success', () => batchTest(async (p, client, table) => {
  const lease = await Lease.acquire(p, unique('caught-other'));
  await assert.rejects(lease.transaction(client, async (c) => {
    await c.query(`UPDATE ${table} SET amount = 7 WHERE id = 1`);
    await c.query('SELECT 1/0').catch(() => {});
  }), (err) => err.code === '22012');
  assert.equal(lease.lost, false);
  assert.deepEqual(await amounts(table), [0, 0]);
  await lease.transaction(client, (c) => c.query(`UPDATE ${table} SET amount = 8 WHERE id = 1`));
  assert.deepEqual(await amounts(table), [8, 0]);
  await lease.release();
}));

test('a savepoint the callback rolled back to leaves a batch that commits', () => batchTest(async (p, client, table) => {
  const lease = await Lease.acquire(p, unique('savepoint'));
  await lease.transaction(client, async (c) => {
    await c.query(`UPDATE ${table} SET amount = 7 WHERE id = 1`);
    await c.query('SAVEPOINT s');
    await c.query('SELECT 1/0').catch(() => {});
    await c.query('ROLLBACK TO SAVEPOINT s');
  });
  assert.equal(lease.lost, false);
  assert.deepEqual(await amounts(table), [7, 0]);
  await lease.release();
}));
