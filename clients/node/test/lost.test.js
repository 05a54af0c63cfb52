// Copyright (c) 2026, the fencing developers
//
// The client error rule (doc/guarantees.md, C1): once a lease is lost or
// past its deadline, every error an operation of it meets reaches the
// application as a LeaseLostError, with node-postgres's error as its
// cause, and only after the loss has run: the flag (lease.lost), the
// timers stopped, the 'lost' listeners, and last lease.signal.  A holder
// frozen inside a batch (SIGSTOP) past its ttl, whose session the server
// ended and whose name another worker took, gets a LeaseLostError when it
// wakes; so does a batch that idled past the ttl while the lease was still
// live.

'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const { Client } = require('pg');
const { Lease, LeaseLostError, StaleTokenError } = require('pg-fencing');
const { unique, pool, admin, ledger, sleep, Worker } = require('./helpers');

async function amounts(table) {
  const { rows } = await admin((c) => c.query(`SELECT amount FROM ${table} ORDER BY id`));
  return rows.map((r) => r.amount);
}

test('a holder frozen inside a batch gets LeaseLostError when it wakes', { timeout: 90000 }, async () => {
  const table = await ledger();
  const name = unique('frozen');
  const a = new Worker();
  const b = new Worker();
  try {
    assert.match(await a.ask(`acquire ${name} 2000`), /^granted /);
    a.send(`frozen ${table} 1`);
    assert.equal(await a.read(), 'paused');
    process.kill(a.proc.pid, 'SIGSTOP');
    try {
      // B waits in the server until A's lease lapses, and its batch gets
      // past A's fence once the server ended A's idle batch
      assert.match(await b.ask(`acquire_wait ${name} 30000 30000`), /^granted /);
      assert.equal(await b.ask(`write ${table} 2`), 'ok');
    } finally {
      a.send('go'); // waits in the pipe for A to read it
      process.kill(a.proc.pid, 'SIGCONT');
    }
    assert.equal(await a.read(),
      'LeaseLostError lost=yes fired=yes callbacks=1 callback_saw=flag:yes/event:no cause=pg');
    assert.deepEqual(await amounts(table), [0, 1]);
    assert.equal(await b.ask('release'), 'released');
  } finally {
    a.kill();
    b.kill();
  }
});

test('a batch that idles past the ttl is a LeaseLostError while the lease lives', { timeout: 60000 }, async () => {
  // the timer's renewals keep the lease, but the server ends the batch's
  // session one ttl after its last statement: the batch idled past the ttl
  const table = await ledger();
  const p = pool();
  const lease = await Lease.acquire(p, unique('idled'), { ttlMs: 1500 });
  const client = await p.connect();
  try {
    await assert.rejects(lease.transaction(client, async (c) => {
      await c.query(`UPDATE ${table} SET amount = 5 WHERE id = 1`);
      await sleep(4000);
      await c.query(`UPDATE ${table} SET amount = 6 WHERE id = 1`);
    }), (err) => err instanceof LeaseLostError && /idled in its transaction past/.test(err.message) &&
      err.cause instanceof Error);
    assert.equal(lease.lost, true);
    assert.equal(lease.signal.aborted, true);
    assert.deepEqual(await amounts(table), [0, 0]);
  } finally {
    client.release(true);
    await lease.release().catch(() => {});
    await p.end();
  }
});

test('any error of a batch past the deadline is a LeaseLostError', async () => {
  // no renewal: the batch works past the ttl inside one statement (not
  // idle, so the server does not end it), and its next statement fails
  const p = pool();
  const lease = await Lease.acquire(p, unique('past-deadline'), { ttlMs: 1000, renew: false });
  const client = await p.connect();
  try {
    await assert.rejects(lease.transaction(client, async (c) => {
      await c.query('SELECT pg_sleep(1.5)');
      await c.query('SELECT 1/0');
    }), (err) => err instanceof LeaseLostError && err.cause.code === '22012');
    assert.equal(lease.lost, true);
    await assert.rejects(lease.renew(), LeaseLostError);
  } finally {
    client.release();
    await lease.release().catch(() => {});
    await p.end();
  }
});

test('the loss runs the flag, the listeners, then the signal', async () => {
  // whoever wakes on the signal sees what every listener did, also when
  // one of them threw; the listeners see the flag set and the signal not
  // yet aborted
  const p = pool();
  const name = unique('order');
  const lease = await Lease.acquire(p, name, { ttlMs: 1500 });
  const done = [];
  const seen = [];
  lease.on('lost', () => {
    seen.push([lease.lost, lease.signal.aborted]);
    done.push('first');
  });
  lease.on('lost', () => {
    throw new Error('a listener that throws');
  });
  lease.once('lost', () => done.push('last'));
  const errorBefore = console.error;
  console.error = () => {};
  try {
    const woke = new Promise((resolve) => lease.signal.addEventListener('abort', () => resolve([...done])));
    await admin((c) => c.query('SELECT fencing.break_lease($1)', [name]));
    assert.deepEqual(await woke, ['first', 'last']);
    assert.deepEqual(seen, [[true, false]]);
  } finally {
    console.error = errorBefore;
    await lease.release().catch(() => {});
    await p.end();
  }
});

test('a stale write loses the lease and tells the listeners', async () => {
  const table = await ledger();
  const p = pool();
  const lease = await Lease.acquire(p, unique('stale-lost'));
  const called = [];
  lease.on('lost', (reason) => called.push(reason));
  const client = await p.connect();
  try {
    await admin((c) => c.query(`UPDATE ${table} SET fence = fencing.next_token() WHERE id = 2`));
    await assert.rejects(lease.transaction(client, (c) =>
      c.query(`UPDATE ${table} SET amount = 9 WHERE id = 2`)), StaleTokenError);
    assert.equal(called.length, 1);
    assert.ok(called[0] instanceof LeaseLostError);
    assert.equal(lease.signal.aborted, true);
    // the next batch is refused before anything is sent: the client has
    // ended, and the answer is still LeaseLostError
    const ended = new Client();
    await ended.connect();
    await ended.end();
    await assert.rejects(lease.transaction(ended, async () => {}),
      (err) => err instanceof LeaseLostError && /newer holder/.test(err.message));
  } finally {
    client.release();
    await lease.release().catch(() => {});
    await p.end();
  }
});

test('the renewal runs every third of the ttl', async () => {
  // a ttl of 6 s: a renewal comes about 2 s after the grant, and another
  // about 4 s after it; one every ttl would come first at 6 s, when the
  // lease has expired
  const p = pool();
  const name = unique('cadence');
  const lease = await Lease.acquire(p, name, { ttlMs: 6000 });
  try {
    await sleep(4000);
    const { rows } = await p.query(
      'SELECT extract(epoch FROM renewed_at - acquired_at)::float8 AS s FROM fencing.leases WHERE name = $1', [name]);
    assert.ok(rows[0].s >= 1.5, `no renewal in the first 4 s of a lease of 6 s (last at ${rows[0].s} s)`);
  } finally {
    await lease.release();
    await p.end();
  }
});

test('a lease goes into JSON with its token as text', async () => {
  const p = pool();
  const lease = await Lease.acquire(p, unique('json'));
  try {
    const json = JSON.parse(JSON.stringify({ lease }));
    assert.equal(json.lease.token, lease.token.toString());
    assert.equal(BigInt(json.lease.token), lease.token);
    assert.ok(lease.token > 2n ** 53n);
    assert.throws(() => JSON.stringify({ token: lease.token }), TypeError);
  } finally {
    await lease.release();
    await p.end();
  }
});
