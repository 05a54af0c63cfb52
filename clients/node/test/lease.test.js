// Copyright (c) 2026, the fencing developers
//
// pg-fencing's Lease: acquire and release, BigInt tokens, use() and
// transaction(), the renewal while the client doing the work is busy (and
// the loss without it), the signal and the 'lost' event, using() and
// `await using`, the transaction locks, and the errors.

'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const { Client } = require('pg');
const {
  Lease, tryLock, lock, translate, FencingError, BusyError, LeaseLostError, StaleTokenError,
  NameCollisionError, NotPreloadedError, NotInTransactionError,
} = require('pg-fencing');
const { unique, pool, admin, ledger, sleep } = require('./helpers');

const TTL = 2500;
const BUSY = 5.5; // seconds: over two ttls

async function withPool(fn) {
  const p = pool();
  try {
    return await fn(p);
  } finally {
    await p.end();
  }
}

test('acquire, BigInt token, holder, release', () => withPool(async (p) => {
  const name = unique('basic');
  const lease = await Lease.acquire(p, name, { holder: 'test job' });
  assert.equal(typeof lease.token, 'bigint');
  assert.ok(lease.token > 2n ** 53n);
  const { rows } = await p.query('SELECT token, holder FROM fencing.leases WHERE name = $1', [name]);
  assert.deepEqual([BigInt(rows[0].token), rows[0].holder], [lease.token, 'test job']);
  assert.equal(await Lease.acquire(p, name), null);
  assert.equal(await Lease.acquire(p, `  ${name.toUpperCase()} `, { timeoutMs: 300 }), null);
  assert.equal(await lease.owned(), true);
  await lease.release();
  await assert.rejects(lease.release(), FencingError);
  const again = await Lease.acquire(p, name);
  assert.ok(again.token > lease.token);
  await again.release();
}));

test('acquire refuses a client and bad arguments', () => withPool(async (p) => {
  const client = await p.connect();
  try {
    await assert.rejects(Lease.acquire(client, 'x'), TypeError);
  } finally {
    client.release();
  }
  await assert.rejects(Lease.acquire(p, 'x', { ttlMs: 0 }), RangeError);
  await assert.rejects(Lease.acquire(p, 'x', { ttlMs: '30' }), TypeError);
}));

test('transaction() fences the batch and sets the token', () => withPool(async (p) => {
  const table = await ledger();
  const name = unique('tx');
  const lease = await Lease.acquire(p, name);
  const client = await p.connect();
  try {
    const seen = await lease.transaction(client, async (c) => {
      await c.query(`UPDATE ${table} SET amount = 5 WHERE id = 1`);
      return (await c.query("SELECT current_setting('fencing.token') AS t")).rows[0].t;
    });
    assert.equal(seen, lease.token.toString());
    await assert.rejects(lease.transaction(client, async (c) => {
      await c.query(`UPDATE ${table} SET amount = 6 WHERE id = 1`);
      throw new Error('boom');
    }), /boom/);
    const { rows } = await client.query(`SELECT amount, fence FROM ${table} WHERE id = 1`);
    assert.deepEqual([rows[0].amount, BigInt(rows[0].fence)], [5, lease.token]);
    const fence = await client.query(
      'SELECT fence FROM fencing.resource_fences WHERE resource = fencing.normalize_name($1)', [name]);
    assert.equal(BigInt(fence.rows[0].fence), lease.token);
  } finally {
    client.release();
    await lease.release();
  }
}));

test('use() outside a transaction block and on a pool is refused', () => withPool(async (p) => {
  const lease = await Lease.acquire(p, unique('autocommit'));
  const client = await p.connect();
  try {
    await assert.rejects(lease.use(client), (err) => err instanceof NotInTransactionError &&
      err.code === '25P01' && err.cause.code === '25P01');
    await assert.rejects(lease.bind(client), NotInTransactionError);
    await assert.rejects(lease.use(p), TypeError);
    await client.query('BEGIN');
    assert.equal(await lease.use(client), lease.token);
    await client.query('ROLLBACK');
  } finally {
    client.release();
    await lease.release();
  }
}));

test('a stale write in a batch is a StaleTokenError and loses the lease', () => withPool(async (p) => {
  const table = await ledger();
  const lease = await Lease.acquire(p, unique('stale'));
  const lost = [];
  lease.on('lost', (err) => lost.push(err));
  await admin((c) => c.query(`UPDATE ${table} SET fence = fencing.next_token() WHERE id = 2`));
  const client = await p.connect();
  try {
    await assert.rejects(lease.transaction(client, (c) =>
      c.query(`UPDATE ${table} SET amount = 9 WHERE id = 2`)), (err) =>
      err instanceof StaleTokenError && err.code === 'FN001' && err.cause.code === 'FN001');
    assert.equal(lease.lost, true);
    assert.equal(lease.signal.aborted, true);
    assert.ok(lease.signal.reason instanceof LeaseLostError);
    assert.equal(lost.length, 1);
    await assert.rejects(lease.use(client), LeaseLostError);
  } finally {
    client.release();
    await lease.release();
  }
}));

test('the renewal keeps the lease while the client doing the work is busy', () => withPool(async (p) => {
  const table = await ledger();
  const name = unique('busy');
  const lease = await Lease.acquire(p, name, { ttlMs: TTL });
  const client = await p.connect();
  try {
    await lease.transaction(client, async (c) => {
      await c.query('SELECT pg_sleep($1)', [BUSY]);
      await c.query(`UPDATE ${table} SET amount = amount + 1 WHERE id = 1`);
    });
    assert.equal(lease.lost, false);
    const { rows } = await p.query(
      'SELECT extract(epoch FROM renewed_at - acquired_at) AS s FROM fencing.leases WHERE name = $1', [name]);
    assert.ok(Number(rows[0].s) > BUSY - TTL / 1000);
    await lease.transaction(client, (c) => c.query(`UPDATE ${table} SET amount = amount + 1 WHERE id = 1`));
    assert.equal(await lease.owned(), true);
  } finally {
    client.release();
    await lease.release();
  }
}));

test('without renewal the busy holder loses its lease', () => withPool(async (p) => {
  const table = await ledger();
  const lease = await Lease.acquire(p, unique('unrenewed'), { ttlMs: TTL, renew: false });
  const client = await p.connect();
  try {
    await lease.transaction(client, async (c) => {
      await c.query('SELECT pg_sleep($1)', [BUSY]);
      await c.query(`UPDATE ${table} SET amount = amount + 1 WHERE id = 1`);
    });
    await assert.rejects(lease.transaction(client, (c) =>
      c.query(`UPDATE ${table} SET amount = amount + 1 WHERE id = 1`)), LeaseLostError);
    assert.equal(lease.lost, true);
  } finally {
    client.release();
    await lease.release().catch(() => {});
  }
}));

test('a broken lease aborts the signal and emits lost', { timeout: 60000 }, () => withPool(async (p) => {
  const name = unique('break');
  const lease = await Lease.acquire(p, name, { ttlMs: TTL });
  const lost = new Promise((resolve) => lease.on('lost', resolve));
  const aborted = new Promise((resolve) => lease.signal.addEventListener('abort', resolve));
  await admin((c) => c.query('SELECT fencing.break_lease($1)', [name]));
  const reason = await lost;
  await aborted;
  assert.ok(reason instanceof LeaseLostError);
  assert.equal(reason.cause.code, 'FN004');
  await assert.rejects(lease.renew(), LeaseLostError);
  await assert.rejects(lease.release(), LeaseLostError);
}));

test('renew() returns the new expiry', () => withPool(async (p) => {
  const name = unique('renew');
  const lease = await Lease.acquire(p, name, { ttlMs: 5000, renew: false });
  const expires = await lease.renew({ ttlMs: 120000 });
  assert.ok(expires instanceof Date);
  assert.ok(expires.getTime() - Date.now() > 100000);
  await lease.release();
}));

test('Lease.using runs the routine under the lease and releases', () => withPool(async (p) => {
  const name = unique('using');
  const result = await Lease.using(p, name, { ttlMs: 5000 }, async (lease, signal) => {
    assert.equal(signal.aborted, false);
    assert.equal(await Lease.acquire(p, name), null);
    return lease.token;
  });
  assert.equal(typeof result, 'bigint');
  await Lease.using(p, name, {}, async () => {
    await assert.rejects(Lease.using(p, name, {}, async () => {}), BusyError);
  });
  const after = await Lease.acquire(p, name);
  assert.ok(after !== null);
  await after.release();
}));

test('await using releases at the end of the block', () => withPool(async (p) => {
  const name = unique('dispose');
  let supported = true;
  try {
    // eslint-disable-next-line no-new-func
    new Function('return async () => { await using x = null; }');
  } catch {
    supported = false;
  }
  if (supported) {
    // eslint-disable-next-line no-new-func
    const body = new Function('Lease', 'p', 'name', `return (async () => {
      await using lease = await Lease.acquire(p, name);
      return lease.token;
    })();`);
    assert.equal(typeof await body(Lease, p, name), 'bigint');
  } else {
    const lease = await Lease.acquire(p, name);
    await lease[Symbol.asyncDispose || Symbol.for('nodejs.asyncDispose')]();
  }
  const after = await Lease.acquire(p, name);
  assert.ok(after !== null, 'the lease was not released at the end of the block');
  await after.release();
}));

test('tryLock and lock hold until the transaction ends', () => withPool(async (p) => {
  const name = unique('lock');
  const a = await p.connect();
  const b = await p.connect();
  try {
    await a.query('BEGIN');
    const token = await tryLock(a, name);
    assert.equal(typeof token, 'bigint');
    await b.query('BEGIN');
    assert.equal(await tryLock(b, name), null);
    await assert.rejects(lock(b, name, { timeoutMs: 300 }), BusyError);
    await b.query('ROLLBACK');
    await b.query('BEGIN');
    const waiting = lock(b, name, { timeoutMs: 30000 });
    await sleep(300);
    await a.query('COMMIT');
    assert.ok(await waiting > token);
    await b.query('ROLLBACK');
  } finally {
    a.release();
    b.release();
  }
}));

test('tryLock and lock refuse autocommit and pools', () => withPool(async (p) => {
  const name = unique('refuse');
  await assert.rejects(tryLock(p, name), TypeError);
  const client = new Client();
  await client.connect();
  try {
    await assert.rejects(tryLock(client, name), NotInTransactionError);
    // known to be outside a block now: refused before anything is sent
    await assert.rejects(lock(client, name), NotInTransactionError);
    await client.query('BEGIN');
    assert.ok(await tryLock(client, name) > 0n);
    await client.query('COMMIT');
  } finally {
    await client.end();
  }
}));

test('a terminated lock holder gets LeaseLostError', () => withPool(async () => {
  const name = unique('terminated');
  const client = new Client();
  client.on('error', () => {});
  await client.connect();
  await client.query('BEGIN');
  await tryLock(client, name);
  await admin((c) => c.query('SELECT pg_terminate_backend($1)', [client.processID]));
  await assert.rejects(tryLock(client, name), LeaseLostError);
  await client.end().catch(() => {});
}));

test('translate maps each SQLSTATE', async () => {
  const cases = {
    FN001: StaleTokenError, FN002: NameCollisionError, FN003: NotPreloadedError,
    FN004: LeaseLostError, '25P01': NotInTransactionError,
  };
  await admin(async (c) => {
    for (const [state, Cls] of Object.entries(cases)) {
      const err = await c.query(`DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '${state}'; END $$`)
        .then(() => null, (e) => e);
      const mapped = translate(err);
      assert.ok(mapped instanceof Cls, state);
      assert.equal(mapped.code, state);
      assert.equal(mapped.cause, err);
    }
    const err = await c.query("DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '57P01'; END $$")
      .then(() => null, (e) => e);
    assert.equal(translate(err), null);
    assert.ok(translate(err, { lockHeld: true }) instanceof LeaseLostError);
  });
});
