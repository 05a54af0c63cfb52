// Copyright (c) 2026, the fencing developers
//
// A READ COMMITTED transaction that holds a lock or a lease and sits idle
// holds back no VACUUM (DESIGN T5), whatever pg-fencing sent in it (D1):
// for each call that runs in the caller's transaction, the transaction
// waits idle after it while another session looks at its backend_xid and
// backend_xmin and vacuums a row deleted meanwhile.

'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const { Client, Pool } = require('pg');
const { Lease, tryLock, lock } = require('pg-fencing');
const { unique, createQuietDb, dropQuietDb, heldBack, HOLDS_BACK_NOTHING } = require('./helpers');

let quiet;
test.before(async () => {
  quiet = await createQuietDb();
});
test.after(async () => {
  await dropQuietDb(quiet);
});

// Run hold(client, pool) on a client of the quiet database, which calls
// back idle() while its transaction sits idle after the call under test;
// idle() returns what the transaction holds back.
async function holding(hold) {
  const pool = new Pool({ database: quiet, max: 2 });
  const client = new Client({ database: quiet });
  const db = new Client({ database: quiet });
  await client.connect();
  await db.connect();
  try {
    let seen = null;
    await hold(client, pool, async () => {
      seen = await heldBack(db, client.processID);
    });
    assert.ok(seen !== null, 'the case never sat idle');
    return seen;
  } finally {
    await client.query('ROLLBACK').catch(() => {});
    await client.end();
    await db.end();
    await pool.end();
  }
}

async function withLease(pool, fn) {
  const lease = await Lease.acquire(pool, unique('idle-lease'), { ttlMs: 60000, renew: false });
  try {
    return await fn(lease);
  } finally {
    await lease.release();
  }
}

const CASES = {
  'after tryLock': async (client, pool, idle) => {
    await client.query('BEGIN');
    assert.notEqual(await tryLock(client, unique('idle')), null);
    await idle();
  },
  'after lock': async (client, pool, idle) => {
    await client.query('BEGIN');
    assert.ok(await lock(client, unique('idle')) > 0n);
    await idle();
  },
  'after lock with a timeout': async (client, pool, idle) => {
    await client.query('BEGIN');
    assert.ok(await lock(client, unique('idle'), { timeoutMs: 5000 }) > 0n);
    await idle();
  },
  'after bind()': (client, pool, idle) => withLease(pool, async (lease) => {
    await client.query('BEGIN');
    assert.equal(await lease.bind(client), lease.token);
    await idle();
  }),
};

for (const [name, hold] of Object.entries(CASES)) {
  test(`an idle holder holds back no VACUUM: ${name}`, async () => {
    assert.deepEqual(await holding(hold), HOLDS_BACK_NOTHING);
  });
}

// use() raises the fence of the lease's name, a row of
// fencing.resource_fences: from then on the transaction has the xid of that
// write, as it has one for its own writes, and holds back VACUUM as every
// writing transaction does.  What pg-fencing sent leaves no snapshot behind.
const BATCHES = {
  'after use()': (client, pool, idle) => withLease(pool, async (lease) => {
    await client.query('BEGIN');
    assert.equal(await lease.use(client), lease.token);
    await idle();
  }),
  'inside transaction()': (client, pool, idle) => withLease(pool, async (lease) => {
    await lease.transaction(client, idle);
  }),
};

for (const [name, hold] of Object.entries(BATCHES)) {
  test(`an idle batch holds no snapshot: ${name}`, async () => {
    const held = await holding(hold);
    assert.equal(held.backend_xmin, null, JSON.stringify(held));
  });
}
