// Copyright (c) 2026, the fencing developers
//
// The guide's three tests through pg-fencing, with real processes: the
// concurrency test (12 racers, one winner), the expiry test (the holder
// stopped with SIGSTOP past its ttl: its next use() throws LeaseLostError,
// its write is rejected with StaleTokenError) and the release test.

'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const { Lease, LeaseLostError } = require('pg-fencing');
const { unique, pool, admin, ledger, sleep, Worker } = require('./helpers');

const RACERS = 12;

test('a race of twelve processes has one winner', async () => {
  const table = await ledger();
  const name = unique('race');
  const racers = Array.from({ length: RACERS }, () => new Worker());
  try {
    for (let round = 0; round < 2; round++) {
      for (const w of racers) w.send(`acquire ${name} 30000`);
      const answers = await Promise.all(racers.map((w) => w.read()));
      const winners = racers.filter((w, i) => answers[i].startsWith('granted'));
      assert.equal(winners.length, 1, answers.join(', '));
      assert.equal(answers.filter((a) => a === 'busy').length, RACERS - 1);
      assert.equal(await winners[0].ask(`write ${table} 1`), 'ok');
      assert.equal(await winners[0].ask('release'), 'released');
    }
    const amount = await admin((c) => c.query(`SELECT amount FROM ${table} WHERE id = 1`));
    assert.equal(amount.rows[0].amount, 2);
  } finally {
    for (const w of racers) w.kill();
  }
});

test('a holder stopped past its ttl is fenced out', async () => {
  const table = await ledger();
  const name = unique('expiry');
  const ttlMs = 2000;
  const holder = new Worker();
  const p = pool();
  try {
    const answer = await holder.ask(`acquire ${name} ${ttlMs}`);
    assert.match(answer, /^granted \d+$/);
    const old = BigInt(answer.split(' ')[1]);
    assert.equal(await holder.ask(`write ${table} 1`), 'ok');

    process.kill(holder.proc.pid, 'SIGSTOP');
    const stopped = Date.now();
    let newer;
    try {
      // waits in the server, without polling, until the stopped holder's lease expires
      newer = await Lease.acquire(p, name, { ttlMs: 30000, timeoutMs: ttlMs + 15000 });
      assert.ok(newer !== null);
      assert.ok(Date.now() - stopped >= ttlMs - 1000);
      assert.ok(newer.token > old);
      const client = await p.connect();
      try {
        await newer.transaction(client, (c) =>
          c.query(`UPDATE ${table} SET amount = amount + 100 WHERE id = 1`));
      } finally {
        client.release();
      }
    } finally {
      process.kill(holder.proc.pid, 'SIGCONT');
    }

    assert.equal(await holder.ask(`write ${table} 1`), 'LeaseLostError');
    assert.equal(await holder.ask(`write_old ${table} 1`), 'StaleTokenError');
    assert.equal(await holder.ask('lost'), 'yes');
    assert.equal(await holder.ask('release'), 'LeaseLostError');
    const { rows } = await admin((c) => c.query(`SELECT amount, fence FROM ${table} WHERE id = 1`));
    assert.equal(rows[0].amount, 101);
    assert.equal(BigInt(rows[0].fence), newer.token);
    assert.equal(await newer.owned(), true);
    await newer.release();
  } finally {
    holder.kill();
    await p.end();
  }
});

test('a stale release frees nobody else\'s lease', async () => {
  const name = unique('release');
  const p = pool();
  try {
    const first = await Lease.acquire(p, name, { ttlMs: 1000, renew: false });
    const second = await Lease.acquire(p, name, { ttlMs: 30000, timeoutMs: 10000 });
    assert.ok(second.token > first.token);
    await assert.rejects(first.release(), LeaseLostError);
    assert.equal(await second.owned(), true);
    assert.equal(await Lease.acquire(p, name), null);
    const { rows } = await admin((c) => c.query('SELECT token FROM fencing.leases WHERE name = $1', [name]));
    assert.deepEqual(rows.map((r) => BigInt(r.token)), [second.token]);
    await second.release();
    const third = await Lease.acquire(p, name);
    assert.ok(third !== null);
    await third.release();
  } finally {
    await p.end();
  }
});

test('a release hands the name on to a waiter at once', async () => {
  const name = unique('handover');
  const p = pool();
  try {
    const first = await Lease.acquire(p, name, { ttlMs: 60000 });
    let grantedAt = null;
    const waiting = Lease.acquire(p, name, { ttlMs: 60000, timeoutMs: 30000 }).then((l) => {
      grantedAt = Date.now();
      return l;
    });
    await sleep(500);
    assert.equal(grantedAt, null, 'the waiter was granted a held lease');
    const releasedAt = Date.now();
    await first.release();
    const waiter = await waiting;
    assert.ok(waiter !== null);
    // a ttl of 60 s: only the release can have let it in this soon
    assert.ok(grantedAt - releasedAt < 10000);
    await waiter.release();
  } finally {
    await p.end();
  }
});
