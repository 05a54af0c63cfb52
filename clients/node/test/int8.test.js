// Copyright (c) 2026, the fencing developers
//
// Tokens exceed 2^53 (DESIGN D2): whatever the application tells
// node-postgres to do with int8 (pg.defaults.parseInt8 = true, or
// types.setTypeParser(20, parseInt), both app-wide), every token
// pg-fencing returns is the server's, digit for digit.  The settings are
// global, so this file has them to itself (node --test runs each file in a
// process of its own).

'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const pg = require('pg');
const { Lease, tryLock, lock } = require('pg-fencing');
const { unique, pool } = require('./helpers');

// A token pg-fencing returned beside the one the server holds (as text,
// which no type parser touches).
function sameAsTheServer(token, server) {
  assert.ok(BigInt(server) > 2n ** 53n, `token ${server} is above 2^53`);
  assert.equal(token.toString(), server);
}

// Leases, tryLock and lock, each token checked against the server's; a
// batch and the release go to the server with the client's token.
async function tokensAreTheServers() {
  const p = pool();
  try {
    assert.equal(typeof (await p.query('SELECT 1::int8 AS n')).rows[0].n, 'number');
    for (let i = 0; i < 4; i++) {
      const name = unique('int8');
      const lease = await Lease.acquire(p, name, { ttlMs: 30000, renew: false });
      const { rows } = await p.query(
        'SELECT token::text AS t FROM fencing.leases WHERE name = fencing.normalize_name($1)', [name]);
      sameAsTheServer(lease.token, rows[0].t);
      const client = await p.connect();
      try {
        await lease.transaction(client, async () => {});
        await lease.release();
        await client.query('BEGIN');
        const t1 = await tryLock(client, `${name}-a`);
        const t2 = await lock(client, `${name}-b`, { timeoutMs: 1000 });
        const held = await client.query(
          'SELECT fencing.held_token($1)::text AS a, fencing.held_token($2)::text AS b',
          [`${name}-a`, `${name}-b`]);
        sameAsTheServer(t1, held.rows[0].a);
        sameAsTheServer(t2, held.rows[0].b);
        await client.query('COMMIT');
      } finally {
        client.release();
      }
    }
  } finally {
    await p.end();
  }
}

test('tokens keep every digit with pg.defaults.parseInt8 = true', async () => {
  pg.defaults.parseInt8 = true;
  try {
    await tokensAreTheServers();
  } finally {
    pg.defaults.parseInt8 = false;
  }
});

test('tokens keep every digit with types.setTypeParser(20, parseInt)', async () => {
  const before = pg.types.getTypeParser(20, 'text');
  pg.types.setTypeParser(20, parseInt);
  try {
    await tokensAreTheServers();
  } finally {
    pg.types.setTypeParser(20, before);
  }
});
