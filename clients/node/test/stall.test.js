// Copyright (c) 2026, the fencing developers
//
// A renewal that cannot get through (a network that swallows packets)
// loses the lease no later than the server's expiry: after a renew() by
// hand for a long ttl, the timer's renewals (ttl NULL) put the server's
// expiry back to the lease's own ttl from each renewal, and the client's
// deadline follows them.

'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
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
