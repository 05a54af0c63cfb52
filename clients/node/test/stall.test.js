// Copyright (c) 2026, the fencing developers
//
// A renewal that cannot get through (a network that swallows packets)
// loses the lease no later than the server's expiry: after a renew() by
// hand for a long ttl, the timer's renewals (ttl NULL) put the server's
// expiry back to the lease's own ttl from each renewal, and the client's
// deadline follows them; and while a renew() for a long ttl is stalled, a
// renewal sent after it that got through with the lease's own ttl bounds
// the deadline.

'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const { Client } = require('pg');
const { Lease, LeaseLostError } = require('pg-fencing');
const { unique, pool, admin, sleep, stallingProxy } = require('./helpers');

const TTL = 3000;

test('a stalled renewal loses the lease by the server\'s expiry, whatever renew() asked for',
  { timeout: 60000 }, async () => {
    const proxy = await stallingProxy();
    const p = pool({ host: proxy.host });
    const name = unique('stalled');
    let lease = null;
    try {
      lease = await Lease.acquire(p, name, { ttlMs: TTL });
      lease.on('renewalError', () => {});
      const lost = new Promise((resolve) => lease.on('lost', () => resolve(performance.now())));
      await lease.renew({ ttlMs: 60000 });
      const back = "SELECT expires_at - now() < interval '10 s' AS back FROM fencing.leases WHERE name = $1";
      for (const until = Date.now() + 3 * TTL; ;) {
        if ((await admin((c) => c.query(back, [name]))).rows[0].back) break;
        assert.ok(Date.now() < until, 'no timer renewal with the lease\'s own ttl');
        await sleep(50);
      }
      proxy.stall();
      const stalledAt = performance.now();
      const { rows } = await admin((c) => c.query(
        'SELECT extract(epoch FROM expires_at - clock_timestamp()) AS s FROM fencing.leases WHERE name = $1', [name]));
      assert.ok(Number(rows[0].s) <= TTL / 1000);
      const lostAt = await Promise.race([lost, sleep(TTL + 2000).then(() => null)]);
      assert.ok(lostAt !== null, `not lost ${TTL + 2000} ms after the stall (the server's lease expired ` +
        `${Number(rows[0].s).toFixed(1)} s after it)`);
      assert.ok(lostAt - stalledAt <= TTL + 2000);
      assert.equal(lease.signal.aborted, true);
      assert.ok(lease.signal.reason instanceof LeaseLostError);
    } finally {
      proxy.resume();
      if (lease !== null) await lease.release().catch(() => {});
      await p.end();
      await proxy.close();
    }
  });

test('overlapping renewals never hold the lease past the server\'s expiry', { timeout: 60000 }, async () => {
  // renew() for a minute is sent and stalls on its way; before its answer,
  // use() renews for the lease's own ttl on a client of its own and gets
  // through.  Either may be the renewal the server applied last: the lease
  // must count as lost once the server let it go and another holder took
  // it, not a minute after the stalled renewal was sent.
  const proxy = await stallingProxy();
  const p = pool({ host: proxy.host });
  const client = new Client();
  const name = unique('overlap');
  let lease = null;
  let stalled = null;
  let other = null;
  try {
    await client.connect();
    lease = await Lease.acquire(p, name, { ttlMs: 2000, renew: false });
    proxy.stall();
    stalled = lease.renew({ ttlMs: 60000 }).catch(() => {});
    for (const until = Date.now() + 10000; !proxy.holding;) {
      assert.ok(Date.now() < until, 'renew() did not reach the proxy');
      await sleep(20);
    }
    await lease.transaction(client, async () => {});
    ({ rows: [{ token: other }] } = await admin((c) => c.query(
      "SELECT fencing.acquire_lease($1, '30 s', '10 s', 'the next holder')::text AS token", [name])));
    assert.ok(other !== null, 'the server kept the lease for longer than use()\'s ttl');
    await client.query('BEGIN');
    await assert.rejects(lease.bind(client), LeaseLostError);
    await client.query('ROLLBACK');
    assert.equal(lease.lost, true);
  } finally {
    proxy.resume();
    await stalled;
    if (lease !== null) await lease.release().catch(() => {});
    if (other !== null) await admin((c) => c.query('SELECT fencing.release_lease($1, $2)', [name, other]));
    await client.end();
    await p.end();
    await proxy.close();
  }
});

test('a watchdog timer that fires a little early still loses the lease', { timeout: 60000 }, async () => {
  // libuv measures a timer from the loop's cached time, so a timer can
  // run a little before performance.now() reaches the moment it was set
  // for.  Here every timer of the process fires 5 ms early: the lease's
  // watchdog, set for the deadline while its renewal is stalled, must not
  // give up because the deadline has not quite come.
  const setTimeoutBefore = global.setTimeout;
  global.setTimeout = (fn, ms, ...args) => setTimeoutBefore(fn, Math.max(0, (ms || 0) - 5), ...args);
  const proxy = await stallingProxy();
  const p = pool({ host: proxy.host });
  const name = unique('early');
  let lease = null;
  try {
    lease = await Lease.acquire(p, name, { ttlMs: 2000, renew: false });
    const lost = new Promise((resolve) => lease.on('lost', () => resolve(true)));
    proxy.stall();
    const stalled = lease.renew().catch(() => {});
    const wasLost = await Promise.race([lost, sleep(6000).then(() => false)]);
    assert.equal(wasLost, true, 'not lost 6 s after the stall of a lease of 2 s');
    assert.equal(lease.lost, true);
    proxy.resume();
    await stalled;
  } finally {
    global.setTimeout = setTimeoutBefore;
    proxy.resume();
    if (lease !== null) await lease.release().catch(() => {});
    await p.end();
    await proxy.close();
  }
});
