// Copyright (c) 2026, the fencing developers
//
// worker.js -- a lease holder in a process of its own (the race, the
// holder stopped with SIGSTOP).  One command per line on stdin, one answer
// per line on stdout:
//
//   acquire NAME TTL_MS   "granted TOKEN" or "busy" (tries once)
//   acquire_wait NAME TTL_MS TIMEOUT_MS
//                         the same, waiting up to TIMEOUT_MS in the server
//   write TABLE ID        a batch: lease.transaction(), one UPDATE of row ID;
//                         "ok" or the pg-fencing error's name
//   write_old TABLE ID    the same UPDATE with the token set by hand
//                         (fencing.set_token), as a holder that ignores
//                         LeaseLostError would write
//   frozen TABLE ID       a batch: lease.transaction(), one UPDATE of row ID,
//                         then "paused"; it reads one more line (the test
//                         stops this process meanwhile) and sends a second
//                         UPDATE in the same batch; then, for the error the
//                         batch threw: its name, whether lease.lost and
//                         lease.signal.aborted were set when it came, how
//                         many 'lost' listeners had run, what the listener
//                         saw (the flag and the signal), and whether its
//                         cause is node-postgres's
//   lost                  "yes" or "no"
//   release               "released" or the error's name

'use strict';

const readline = require('node:readline');
const { Pool } = require('pg');
const { Lease, FencingError, translate } = require('pg-fencing');

const pool = new Pool({ max: 3 });
let lease = null;
let seen = [];
// a command that reads a line of its own (frozen) waits here
let nextLine = null;

const yes = (flag) => (flag ? 'yes' : 'no');

async function frozen(table, row) {
  const client = await pool.connect();
  try {
    await lease.transaction(client, async (c) => {
      await c.query(`UPDATE ${table} SET amount = amount + 1 WHERE id = $1`, [row]);
      const go = new Promise((resolve) => { nextLine = resolve; });
      process.stdout.write('paused\n');
      await go;
      await c.query(`UPDATE ${table} SET amount = amount + 1 WHERE id = $1`, [row]);
    });
    return 'ok';
  } catch (err) {
    const cause = err.cause instanceof Error && !(err.cause instanceof FencingError) ? 'pg' : String(err.cause);
    return `${err.name} lost=${yes(lease.lost)} fired=${yes(lease.signal.aborted)} ` +
      `callbacks=${seen.length} callback_saw=${seen.join(',')} cause=${cause}`;
  } finally {
    client.release();
  }
}

async function run(words) {
  const [command, arg1, arg2, arg3] = words;
  switch (command) {
    case 'acquire':
    case 'acquire_wait':
      seen = [];
      lease = await Lease.acquire(pool, arg1, { ttlMs: Number(arg2), timeoutMs: command === 'acquire' ? 0 : Number(arg3) });
      if (lease !== null) {
        lease.on('lost', () => seen.push(`flag:${yes(lease.lost)}/event:${yes(lease.signal.aborted)}`));
      }
      return lease === null ? 'busy' : `granted ${lease.token}`;
    case 'frozen':
      return frozen(arg1, Number(arg2));
    case 'write': {
      const client = await pool.connect();
      try {
        await lease.transaction(client, (c) =>
          c.query(`UPDATE ${arg1} SET amount = amount + 1 WHERE id = $1`, [Number(arg2)]));
      } finally {
        client.release();
      }
      return 'ok';
    }
    case 'write_old': {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        await client.query('SELECT fencing.set_token($1)', [lease.token.toString()]);
        await client.query(`UPDATE ${arg1} SET amount = amount + 1 WHERE id = $1`, [Number(arg2)]);
        await client.query('COMMIT');
      } catch (err) {
        await client.query('ROLLBACK');
        throw translate(err) || err;
      } finally {
        client.release();
      }
      return 'ok';
    }
    case 'lost':
      return lease.lost ? 'yes' : 'no';
    case 'release':
      await lease.release();
      return 'released';
    default:
      return `unknown command ${command}`;
  }
}

// One command at a time, in order.
let queue = Promise.resolve();
readline.createInterface({ input: process.stdin }).on('line', (line) => {
  if (nextLine !== null) {
    const resolve = nextLine;
    nextLine = null;
    resolve(line);
    return;
  }
  queue = queue.then(async () => {
    let answer;
    try {
      answer = await run(line.trim().split(/\s+/));
    } catch (err) {
      answer = err instanceof FencingError ? err.name : `error ${err.message}`;
    }
    process.stdout.write(`${answer}\n`);
  });
}).on('close', () => queue.then(() => pool.end()));
