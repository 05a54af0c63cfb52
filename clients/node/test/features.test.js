// Copyright (c) 2026, the fencing developers
//
// What users of node-redlock, Curator and ShedLock expect of a lease: an
// AbortSignal that stops a waiting acquire and never leaves the lease
// taken; locked(); 'suspended' and 'resumed' around a failing renewal;
// atMostMs and atLeastMs; and the round trips: BEGIN with use_lease in
// one, a job that fits one batch in one (Lease.runOnce).

'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const { Client } = require('pg');
const { Lease, LeaseLostError } = require('pg-fencing');
const { unique, pool, admin, ledger, sleep, stallingProxy } = require('./helpers');

async function heldBy(name) {
  const { rows } = await admin((c) => c.query(
    'SELECT token::text AS t FROM fencing.leases WHERE name = fencing.normalize_name($1)', [name]));
  return rows.length > 0 ? rows[0].t : null;
}

async function secondsLeft(name) {
  const { rows } = await admin((c) => c.query(
    'SELECT extract(epoch FROM expires_at - clock_timestamp())::float8 AS s FROM fencing.leases' +
    ' WHERE name = fencing.normalize_name($1)', [name]));
  return rows[0].s;
}

async function waitingAcquires(name) {
  const { rows } = await admin((c) => c.query(
    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE state = 'active' AND query LIKE $1" +
    ' AND pid <> pg_backend_pid()', [`%acquire_lease('${name}'%`]));
  return rows[0].n;
}

async function until(condition, ms, what) {
  for (const end = Date.now() + ms; !(await condition());) {
    assert.ok(Date.now() < end, `${what}: not within ${ms} ms`);
    await sleep(50);
  }
}

test('an AbortSignal stops a waiting acquire', { timeout: 30000 }, async () => {
  const p = pool();
  const name = unique('abort');
  const holder = await Lease.acquire(p, name);
  try {
    const controller = new AbortController();
    const waiting = Lease.acquire(p, name, { timeoutMs: null, signal: controller.signal });
    await until(async () => (await waitingAcquires(name)) === 1, 10000, 'the acquire waiting in the server');
    controller.abort();
    await assert.rejects(waiting, (err) => err.name === 'AbortError');
    assert.equal(await waitingAcquires(name), 0);
    await assert.rejects(Lease.acquire(p, name, { signal: controller.signal }), (err) => err.name === 'AbortError');
  } finally {
    await holder.release();
  }
  assert.equal(await heldBy(name), null);
  await p.end();
});

test('an abort that comes after the grant releases it', async () => {
  // the server granted the lease before the cancel reached it: the
  // acquire must not leave it taken
  const p = pool();
  const name = unique('abort-late');
  const controller = new AbortController();
  const query = p.Client.prototype.query;
  p.on('connect', (client) => {
    client.query = function granted(text, ...rest) {
      const result = query.call(this, text, ...rest);
      if (typeof text === 'string' && text.includes('acquire_lease')) {
        return result.then((r) => {
          controller.abort();
          return r;
        });
      }
      return result;
    };
  });
  try {
    await assert.rejects(Lease.acquire(p, name, { signal: controller.signal }), (err) => err.name === 'AbortError');
    assert.equal(await heldBy(name), null);
  } finally {
    await p.end();
  }
});

test('an abort while the acquire waits for a client of the pool stops it', { timeout: 30000 }, async () => {
  // the pool's one client is busy: the acquire waits for it, and the
  // abort comes before anything is sent
  const p = pool({ max: 1 });
  const name = unique('abort-pool');
  const busy = await p.connect();
  const controller = new AbortController();
  const acquiring = Lease.acquire(p, name, { timeoutMs: null, signal: controller.signal });
  acquiring.catch(() => {});
  try {
    await until(async () => p.waitingCount === 1, 10000, 'the acquire waiting for the pool');
    controller.abort();
    busy.release();
    const outcome = await acquiring.then((lease) => lease, (err) => err);
    if (outcome instanceof Lease) await outcome.release();
    assert.ok(!(outcome instanceof Lease), 'an aborted acquire returned a lease');
    assert.equal(outcome.name, 'AbortError');
    assert.equal(await heldBy(name), null);
  } finally {
    await p.end();
  }
});

test('locked() says whether anybody holds the name', async () => {
  const p = pool();
  const name = unique('locked');
  try {
    assert.equal(await Lease.locked(p, name), false);
    const lease = await Lease.acquire(p, name);
    assert.equal(await Lease.locked(p, name), true);
    assert.equal(await lease.locked(), true);
    await lease.release();
    assert.equal(await Lease.locked(p, name), false);
  } finally {
    await p.end();
  }
});

test('a failing renewal suspends the lease and the next one resumes it', { timeout: 30000 }, async () => {
  // the pool's one client is busy, so the renewal at 2 s finds none; the
  // test gives it back before the deadline (6 s)
  const p = pool({ max: 1, connectionTimeoutMillis: 300 });
  const events = [];
  try {
    const lease = await Lease.acquire(p, unique('suspend'), { ttlMs: 6000 });
    lease.on('renewalError', () => {});
    const resumed = new Promise((resolve) => lease.on('resumed', () => {
      events.push(['resumed', lease.suspended]);
      resolve();
    }));
    lease.on('suspended', (err) => events.push(['suspended', /timeout/i.test(err.message), lease.lost]));
    const busy = await p.connect();
    await until(() => lease.suspended, 5000, 'the suspension');
    busy.release();
    await resumed;
    assert.deepEqual(events, [['suspended', true, false], ['resumed', false]]);
    assert.equal(lease.lost, false);
    assert.equal(await lease.owned(), true);
    await lease.release();
  } finally {
    await p.end();
  }
});

test('atMostMs caps the lease however often it is renewed', { timeout: 30000 }, async () => {
  const p = pool();
  const name = unique('at-most');
  const started = performance.now();
  const lease = await Lease.acquire(p, name, { ttlMs: 1500, atMostMs: 3000 });
  const client = await p.connect();
  const spans = [];
  try {
    while (!lease.lost && performance.now() - started < 8000) {
      const { rows } = await p.query('SELECT extract(epoch FROM expires_at - acquired_at)::float8 AS s' +
        ' FROM fencing.leases WHERE name = $1 AND token = $2', [name, lease.token.toString()]);
      if (rows.length > 0) spans.push(rows[0].s);
      if (performance.now() - started > 2000) {
        // a batch near the ceiling renews only up to it
        await lease.transaction(client, async () => {}).catch((err) => assert.ok(err instanceof LeaseLostError));
      }
      await sleep(200);
    }
    const lostAfter = performance.now() - started;
    assert.equal(lease.lost, true);
    assert.ok(lostAfter >= 2500 && lostAfter <= 4500, `lost ${lostAfter} ms after the acquisition`);
    assert.ok(Math.max(...spans) <= 3.1, `the server's lease lasted ${Math.max(...spans)} s past its acquisition`);
  } finally {
    client.release();
    await lease.release().catch(() => {});
    await p.end();
  }
});

test('atLeastMs keeps the name taken after an early release', { timeout: 30000 }, async () => {
  const p = pool();
  const name = unique('at-least');
  try {
    const lease = await Lease.acquire(p, name, { ttlMs: 30000, atLeastMs: 2000 });
    await lease.release();
    const releasedAt = performance.now();
    assert.notEqual(await heldBy(name), null, 'the name was freed at once');
    const left = await secondsLeft(name);
    assert.ok(left >= 1 && left <= 2, `${left} s left`);
    const other = await Lease.acquire(p, name, { timeoutMs: 10000 });
    assert.ok(other !== null);
    assert.ok(performance.now() - releasedAt >= 1000);
    await other.release();
    const late = await Lease.acquire(p, name, { atLeastMs: 200 });
    await sleep(300);
    await late.release();
    assert.equal(await heldBy(name), null);
  } finally {
    await p.end();
  }
});

test('a batch sends BEGIN and use_lease in one round trip', async () => {
  const table = await ledger();
  const proxy = await stallingProxy();
  const p = pool();
  const client = new Client({ host: proxy.host });
  try {
    await client.connect();
    const lease = await Lease.acquire(p, unique('one-rt'));
    const before = proxy.ready;
    await lease.transaction(client, (c) => c.query(`UPDATE ${table} SET amount = 3 WHERE id = 1`));
    assert.equal(proxy.ready - before, 3); // BEGIN + use_lease, the UPDATE, COMMIT
    await lease.release();
  } finally {
    await client.end();
    await p.end();
    await proxy.close();
  }
});

test('Lease.runOnce runs the job in one round trip', async () => {
  const table = await ledger();
  const proxy = await stallingProxy();
  const p = pool({ host: proxy.host });
  const name = unique('once');
  try {
    await p.query('SELECT 1'); // the pool's client, connected
    const before = proxy.ready;
    const done = await Lease.runOnce(p, name, { ttlMs: 30000 }, `UPDATE ${table} SET amount = 4 WHERE id = 1`);
    assert.equal(proxy.ready - before, 1);
    assert.equal(typeof done.token, 'bigint');
    assert.equal(done.results.length, 1);
    assert.equal(done.results[0].rowCount, 1);
    const { rows } = await admin((c) => c.query(`SELECT amount, fence::text AS f FROM ${table} WHERE id = 1`));
    assert.deepEqual(rows[0], { amount: 4, f: done.token.toString() });
    assert.equal(await heldBy(name), null);
  } finally {
    await p.end();
    await proxy.close();
  }
});

test('Lease.runOnce is null when the name is held and releases after a failed job', async () => {
  const table = await ledger();
  const p = pool();
  const name = unique('once-busy');
  try {
    const holder = await Lease.acquire(p, name);
    assert.equal(await Lease.runOnce(p, name, {}, `UPDATE ${table} SET amount = 5 WHERE id = 1`), null);
    await holder.release();
    await assert.rejects(Lease.runOnce(p, name, {}, `UPDATE ${table} SET amount = 6 WHERE id = 1; SELECT 1/0`),
      (err) => err.code === '22012');
    assert.equal(await heldBy(name), null);
    const { rows } = await admin((c) => c.query(`SELECT amount FROM ${table} WHERE id = 1`));
    assert.equal(rows[0].amount, 0);
  } finally {
    await p.end();
  }
});

test('a Lease.runOnce job that fails past its ttl is LeaseLostError', { timeout: 30000 }, async () => {
  // the job is busy, not idle, past the ttl: the server lets the lease
  // lapse meanwhile, and the job's error comes after the deadline
  const table = await ledger();
  const p = pool();
  const name = unique('once-late');
  try {
    const failed = await Lease.runOnce(p, name, { ttlMs: 1000 },
      `UPDATE ${table} SET amount = 8 WHERE id = 1; SELECT pg_sleep(2); SELECT 1/0`).catch((err) => err);
    assert.ok(failed instanceof LeaseLostError, `${failed}`);
    assert.match(failed.message, /ttl/);
    assert.equal(failed.cause.code, '22012', 'the cause is the error of the job');
    assert.equal(await heldBy(name), null);
    const { rows } = await admin((c) => c.query(`SELECT amount FROM ${table} WHERE id = 1`));
    assert.equal(rows[0].amount, 0);
  } finally {
    await p.end();
  }
});
