// Copyright (c) 2026, the fencing developers
//
// pg-fencing: leases and locks of the PostgreSQL extension fencing for
// node-postgres, with a fence token the database checks.
//
//   const lease = await Lease.acquire(pool, 'invoice-run:2026-10', { ttlMs: 30000 });
//   if (lease === null) return;                 // another worker has it
//   try {
//     for (const batch of batches) {
//       const client = await pool.connect();
//       try {
//         await lease.transaction(client, async () => { ... });
//       } finally { client.release(); }
//     }
//   } finally { await lease.release(); }
//
// Tokens exceed 2^53: they are BigInt here, go to the server as their
// digits, written into the statement (see "statements, sent unbound"), and
// come back as text (every statement selects its token ::text, so an
// application's int8 parser, pg.defaults.parseInt8 or
// types.setTypeParser(20, ...), never touches one).

'use strict';

const { EventEmitter } = require('node:events');
const os = require('node:os');

// --- errors --------------------------------------------------------------------

class FencingError extends Error {
  constructor(message, options = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = this.constructor.name;
    this.code = options.code !== undefined ? options.code : this.constructor.code;
  }
}

// The name stayed held for the timeout.
class BusyError extends FencingError {}
BusyError.code = 'FENCING_BUSY';

// The lease (or the transaction lock) is gone: stop the work, acquire again
// to start over.  FN004, a renewal that could not get through within the
// ttl, or, for a transaction lock, the end of the session that held it.
class LeaseLostError extends FencingError {}
LeaseLostError.code = 'FN004';

// FN001: a newer holder wrote first; this write was rejected.  Stop, do not
// retry.
class StaleTokenError extends FencingError {}
StaleTokenError.code = 'FN001';

// FN002: another name with the same 64-bit key is held.
class NameCollisionError extends FencingError {}
NameCollisionError.code = 'FN002';

// FN003: fencing is not in shared_preload_libraries on this server.
class NotPreloadedError extends FencingError {}
NotPreloadedError.code = 'FN003';

// 25P01, or refused before sending: outside a transaction block the lock,
// the fence and fencing.token end with the statement.
class NotInTransactionError extends FencingError {}
NotInTransactionError.code = '25P01';

const BY_SQLSTATE = {
  FN001: StaleTokenError,
  FN002: NameCollisionError,
  FN003: NotPreloadedError,
  FN004: LeaseLostError,
  '25P01': NotInTransactionError,
};

// The server ended the session (idle in transaction too long, the
// transaction's time limit, pg_terminate_backend), or the connection
// broke: a transaction lock ends with it.
const SESSION_ENDED = new Set(['25P03', '25P04', '57P01']);

function endedSession(err) {
  if (SESSION_ENDED.has(err.code)) return true;
  return !err.code && /Connection terminated|ECONNRESET|EPIPE|not queryable/i.test(String(err.message));
}

// The pg-fencing error for a node-postgres error (the original as
// `cause`), or null when it is not one of fencing's.  With lockHeld, an
// error that ended the session is a LeaseLostError.
function translate(err, { lockHeld = false } = {}) {
  if (err instanceof FencingError) return err;
  if (!(err instanceof Error)) return null;
  let Cls = BY_SQLSTATE[err.code];
  if (!Cls && lockHeld && endedSession(err)) Cls = LeaseLostError;
  if (!Cls) return null;
  return new Cls(err.message, { cause: err, code: err.code || Cls.code });
}

function rethrow(err, options) {
  const mapped = translate(err, options);
  throw mapped || err;
}

// --- arguments and connections --------------------------------------------------------

function isPool(x) {
  return x !== null && typeof x === 'object' && typeof x.query === 'function' &&
    'totalCount' in x && 'idleCount' in x;
}

function requireClient(client, what) {
  if (isPool(client)) {
    throw new TypeError(`${what} needs one client, not a pool: each pool.query may run on ` +
      'another connection; take one with `const client = await pool.connect()`');
  }
  if (client === null || typeof client !== 'object' || typeof client.query !== 'function') {
    throw new TypeError(`${what} needs a node-postgres client`);
  }
}

function milliseconds(value, what, { positive }) {
  if (value === null || value === undefined || value === Infinity) return null;
  if (typeof value !== 'number' || Number.isNaN(value)) {
    throw new TypeError(`${what} must be a number of milliseconds`);
  }
  if (positive ? value <= 0 : value < 0) {
    throw new RangeError(`${what} must be ${positive ? 'positive' : 'at least 0'}`);
  }
  return Math.ceil(value);
}

const bigint = (text) => (text === null || text === undefined ? null : BigInt(text));

// --- statements, sent unbound ------------------------------------------------------------
//
// Why every statement goes unbound.  A SELECT sent through the extended
// protocol (node-postgres uses it for every query with values) leaves its
// unnamed portal open when it completes, and that portal keeps the
// statement's snapshot registered until the next Bind or simple query: a
// READ COMMITTED transaction that then sits idle holding a lock or a lease
// keeps backend_xmin set and holds back VACUUM in its database.  A simple
// query (a query without values) drops its portal when it completes.  So
// pg-fencing writes each value into the statement and sends it without
// values.
//
// A value written into the statement cannot break out of it, whatever the
// session's client_encoding and standard_conforming_strings (which
// node-postgres's escapeLiteral does not know): text made of printable
// ASCII other than ' and \ (the only characters with a meaning inside
// '...') is written as it is; any other text goes as the hex digits of its
// UTF-8 bytes, decoded by the server, so the statement is pure ASCII with
// no escape that a multibyte client encoding could swallow.  A NUL, which
// PostgreSQL text cannot hold, is refused before anything is sent.

const PLAIN = /^[\x20-\x26\x28-\x5b\x5d-\x7e]*$/;

// value (a string, or null) as an SQL expression of type text.
function sqlText(value, what) {
  if (value === null || value === undefined) return 'NULL::pg_catalog.text';
  if (typeof value !== 'string') throw new TypeError(`${what} must be a string`);
  if (value.includes('\u0000')) {
    const err = new TypeError(`${what} contains a NUL character, which PostgreSQL text cannot hold`);
    err.code = 'ERR_INVALID_ARG_VALUE';
    throw err;
  }
  if (PLAIN.test(value)) return `'${value}'::pg_catalog.text`;
  const hex = Buffer.from(value, 'utf8').toString('hex');
  return `pg_catalog.convert_from(pg_catalog.decode('${hex}', 'hex'), 'UTF8')`;
}

// A token (BigInt) as an SQL expression of type bigint.
function sqlBigint(value) {
  if (typeof value !== 'bigint') throw new TypeError('a token must be a BigInt');
  return `${value}::bigint`;
}

// Milliseconds (an integer from milliseconds(), or null) as an SQL
// expression of type interval.
function sqlInterval(ms) {
  if (ms === null) return 'NULL::interval';
  if (!Number.isSafeInteger(ms)) throw new RangeError(`${ms} ms is not a whole number of milliseconds`);
  return `'${ms} milliseconds'::interval`;
}

// acquire_lease waits at most this long per call (its cap, INT_MAX ms).
const LONGEST_WAIT_MS = 2 ** 31 - 1;
// A renewal that failed for a reason other than FN004 is tried again this
// soon, until the lease may have expired.
const RETRY_MS = 500;

// The transaction status of each client, from the ReadyForQuery messages
// node-postgres reads ('I' idle, 'T' in a transaction block, 'E' failed):
// node-postgres does not keep it, and autocommit is its only mode.
const txStatus = new WeakMap();

function watchStatus(client) {
  const connection = client.connection;
  if (txStatus.has(client) || !connection || typeof connection.on !== 'function') return;
  txStatus.set(client, null);
  connection.on('readyForQuery', (msg) => txStatus.set(client, msg.status));
}

function notInTransaction(what) {
  return new NotInTransactionError(`${what} needs a transaction: this client is outside a ` +
    "transaction block, where the lock would end with the statement; run 'BEGIN' first");
}

// A statement that must run in a transaction block: refused before it is
// sent when the client is known to be outside one, and reported when it
// turns out to have run outside one (what it took has already ended).
// statement() writes it once the client has been checked.
async function inTransaction(client, what, statement, options) {
  requireClient(client, what);
  watchStatus(client);
  if (txStatus.get(client) === 'I') throw notInTransaction(what);
  const text = statement();
  let result;
  try {
    result = await client.query(text);
  } catch (err) {
    rethrow(err, options);
  }
  if (txStatus.get(client) === 'I') throw notInTransaction(what);
  return result;
}

// --- transaction locks ------------------------------------------------------------------

// fencing.try_lock in the client's transaction: the token (BigInt), or null
// when the name is held.  The lock ends with the transaction.
async function tryLock(client, name) {
  const { rows } = await inTransaction(client, 'tryLock()',
    () => `SELECT fencing.try_lock(${sqlText(name, 'the lock name')})::text AS token`, { lockHeld: true });
  return bigint(rows[0].token);
}

// fencing.lock in the client's transaction: waits at most timeoutMs (null:
// as long as it takes) and returns the token; BusyError when it passed.
async function lock(client, name, { timeoutMs = null } = {}) {
  const ms = milliseconds(timeoutMs, 'timeoutMs', { positive: false });
  const { rows } = await inTransaction(client, 'lock()',
    () => `SELECT fencing.lock(${sqlText(name, 'the lock name')}, ${sqlInterval(ms)})::text AS token`,
    { lockHeld: true });
  if (rows[0].token === null) {
    throw new BusyError(`fencing lock "${name}" stayed held for ${ms} ms`);
  }
  return bigint(rows[0].token);
}

// --- leases -----------------------------------------------------------------------------

const leaseName = (name) => sqlText(name, 'the lease name');

const SQL = {
  acquire: (name, ttl, wait, holder) => `SELECT fencing.acquire_lease(${leaseName(name)}, ` +
    `${sqlInterval(ttl)}, ${sqlInterval(wait)}, ${sqlText(holder, 'the holder')})::text AS token`,
  renew: (name, token, ttl) =>
    `SELECT fencing.renew_lease(${leaseName(name)}, ${sqlBigint(token)}, ${sqlInterval(ttl)}) AS expires_at`,
  release: (name, token) => `SELECT fencing.release_lease(${leaseName(name)}, ${sqlBigint(token)}) AS released`,
  use: (name, token) => `SELECT fencing.use_lease(${leaseName(name)}, ${sqlBigint(token)})`,
  setToken: (token) => `SELECT fencing.set_token(${sqlBigint(token)})`,
  owned: (name, token) => 'SELECT EXISTS (SELECT 1 FROM fencing.leases' +
    ' WHERE database = pg_catalog.current_database()' +
    ` AND name = fencing.normalize_name(${leaseName(name)}) AND token = ${sqlBigint(token)}` +
    ' AND expires_at > pg_catalog.clock_timestamp()) AS owned',
};

// What a batch whose callback caught an error of its transaction throws:
// that error, or one saying so when none was heard.
function swallowed(errors, name) {
  if (errors.length > 0) return errors[errors.length - 1];
  const err = new Error(`fencing lease "${name}": the callback caught an error of the batch's ` +
    'transaction and went on; the server rolled the transaction back, nothing of the batch was committed');
  err.code = '25P02';
  return err;
}

function poolQuery(pool, text) {
  return pool.query(text).catch((err) => rethrow(err));
}

// A lease on a name held by the server across COMMITs, ROLLBACKs and
// reconnects, until released or until ttlMs passes without a renewal.  A
// timer renews it every ttl/3 through the pool (never through the client
// doing the work); when that fails with FN004, or cannot get through before
// the lease may have expired, the lease is lost: `signal` aborts with a
// LeaseLostError, 'lost' is emitted, and the next use() throws.
class Lease extends EventEmitter {
  constructor(pool, name, token, ttlMs, sentAt) {
    super();
    this.pool = pool;
    this.name = name;
    this.ttlMs = ttlMs;
    this._token = token;
    this._controller = new AbortController();
    // {sent, ttl, answered} of each renewal that may have been the last one
    // the server applied (the acquisition first); see _settle().
    this._renewals = [{ sent: sentAt, ttl: ttlMs, answered: performance.now() }];
    this._released = false;
    this._renewTimer = null;
    this._watchdog = null;
    this.expiresAt = null;
    this._settle();
  }

  // Take the lease: a Lease, or null when the name stayed held for
  // timeoutMs (default 0: try once; null: as long as it takes).
  static async acquire(pool, name, { ttlMs = 30000, timeoutMs = 0, holder, renew = true } = {}) {
    if (!isPool(pool)) {
      throw new TypeError('Lease.acquire() needs a pg Pool: the lease renews on a connection ' +
        'of its own while your client does the work');
    }
    if (typeof name !== 'string') throw new TypeError('the lease name must be a string');
    const ttl = milliseconds(ttlMs, 'ttlMs', { positive: true });
    if (ttl === null) throw new RangeError('ttlMs must be finite');
    let remaining = milliseconds(timeoutMs, 'timeoutMs', { positive: false });
    const deadline = remaining === null ? null : Date.now() + remaining;
    const who = holder !== undefined ? holder : `${os.hostname()} pid ${process.pid}`;
    for (;;) {
      const wait = remaining === null ? LONGEST_WAIT_MS : Math.min(remaining, LONGEST_WAIT_MS);
      const sentAt = performance.now();
      const { rows } = await poolQuery(pool, SQL.acquire(name, ttl, wait, who));
      if (rows[0].token !== null) {
        const lease = new Lease(pool, name, bigint(rows[0].token), ttl, sentAt);
        if (renew) lease._scheduleRenewal(ttl / 3);
        return lease;
      }
      if (deadline !== null) {
        remaining = deadline - Date.now();
        if (remaining <= 0) return null;
      }
    }
  }

  // redlock's using(): acquire (BusyError when not granted), run
  // fn(lease, signal), release.
  static async using(pool, name, options, fn) {
    const lease = await Lease.acquire(pool, name, options);
    if (lease === null) throw new BusyError(`fencing lease "${name}" is held by another holder`);
    let failed = false;
    try {
      return await fn(lease, lease.signal);
    } catch (err) {
      failed = true;
      throw err;
    } finally {
      await lease.release().catch((err) => {
        if (!failed) throw err;
      });
    }
  }

  // The fence token of this holding, a BigInt.
  get token() {
    return this._token;
  }

  // Aborted, with a LeaseLostError as its reason, when the lease is lost.
  get signal() {
    return this._controller.signal;
  }

  get lost() {
    return this._controller.signal.aborted;
  }

  // The first statement of each batch transaction on client: checks that
  // the lease is held with this token, renews it, raises the fence of the
  // lease's name to the token and sets the transaction's fencing.token.
  async use(client) {
    this._checkUsable('use()');
    requireClient(client, 'use()');
    const renewal = this._renewing(this.ttlMs);
    try {
      await this._work(client, SQL.use(this.name, this._token));
    } finally {
      renewal.answered = performance.now();
    }
    this._renewed(renewal);
    return this._token;
  }

  // Only the transaction's fencing.token (fencing.set_token).
  async bind(client) {
    this._checkUsable('bind()');
    requireClient(client, 'bind()');
    await this._work(client, SQL.setToken(this._token));
    return this._token;
  }

  // One batch: BEGIN, use(), fn(client), COMMIT (ROLLBACK when fn throws);
  // returns what fn returned.  Fencing's errors come out as pg-fencing
  // errors; a StaleTokenError or LeaseLostError also loses the lease.  When
  // fn caught an error of the transaction and went on, the server rolls
  // it back at COMMIT: that error is thrown (the last one the server sent
  // that did not come from the aborted transaction itself).
  async transaction(client, fn) {
    this._checkUsable('transaction()');
    requireClient(client, 'transaction()');
    watchStatus(client);
    const errors = [];
    const hear = (msg) => {
      if (msg.code !== '25P02') errors.push(msg);
    };
    const connection = client.connection && typeof client.connection.on === 'function' ? client.connection : null;
    await client.query('BEGIN');
    if (connection) connection.on('errorMessage', hear);
    try {
      await this.use(client);
      const result = await fn(client);
      if (txStatus.get(client) === 'E') throw swallowed(errors, this.name);
      const commit = await client.query('COMMIT');
      if (commit.command === 'ROLLBACK') throw swallowed(errors, this.name);
      return result;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      const mapped = translate(err) || err;
      this._loseOn(mapped);
      throw mapped;
    } finally {
      if (connection) connection.off('errorMessage', hear);
    }
  }

  // Renew now, for ttlMs (default: the lease's ttl); the new expiry (Date).
  async renew({ ttlMs } = {}) {
    const ttl = milliseconds(ttlMs, 'ttlMs', { positive: true });
    this._checkUsable('renew()');
    const renewal = this._renewing(ttl === null ? this.ttlMs : ttl);
    let rows;
    try {
      ({ rows } = await poolQuery(this.pool, SQL.renew(this.name, this._token, ttl)));
    } catch (err) {
      this._loseOn(err);
      throw err;
    } finally {
      renewal.answered = performance.now();
    }
    this._renewed(renewal);
    this.expiresAt = rows[0].expires_at;
    return this.expiresAt;
  }

  // True when the server holds the lease with this token.
  async owned() {
    if (this._released || this.lost) return false;
    const { rows } = await poolQuery(this.pool, SQL.owned(this.name, this._token));
    return rows[0].owned;
  }

  // Free the lease.  LeaseLostError when the server no longer held it with
  // this token (it expired or was broken: work after that may have been
  // fenced out).  A release that did not get through (no client, a lost
  // connection) leaves the lease to be released again.
  async release() {
    if (this._released) throw new FencingError(`fencing lease "${this.name}" is already released`);
    this._released = true;
    this._stopTimers();
    let rows;
    try {
      ({ rows } = await poolQuery(this.pool, SQL.release(this.name, this._token)));
    } catch (err) {
      this._released = false;
      throw err;
    }
    if (!rows[0].released) {
      throw new LeaseLostError(`fencing lease "${this.name}" was not held with token ${this._token} any more`);
    }
  }

  async _work(client, text) {
    try {
      await client.query(text);
    } catch (err) {
      const mapped = translate(err);
      if (!mapped) throw err;
      this._loseOn(mapped);
      throw mapped;
    }
  }

  _checkUsable(what) {
    if (this._released) throw new FencingError(`${what}: fencing lease "${this.name}" is released`);
    if (!this.lost && performance.now() >= this._deadline) this._lose(this._notRenewed());
    if (this.lost) {
      const reason = this.signal.reason;
      throw new LeaseLostError(reason.message, { cause: reason });
    }
  }

  _notRenewed() {
    return new LeaseLostError(`fencing lease "${this.name}" was not renewed within its ttl of ` +
      `${this.ttlMs} ms: it may have expired`);
  }

  // A renewal for ttl ms is sent now.  A renewal sets the server's expiry
  // to when it runs plus its ttl (the one it asks for, or the lease's own
  // when it asks for none), replacing the expiry before it, also a later
  // one; it runs after it was sent, so the expiry it sets is at or after
  // sent + ttl here.  The deadline may come sooner from now on.
  _renewing(ttl) {
    const renewal = { sent: performance.now(), ttl, answered: Infinity };
    this._renewals.push(renewal);
    this._settle();
    return renewal;
  }

  // The renewal succeeded: it ran after every renewal answered before it
  // was sent, none of which is the last one applied any more.
  _renewed(renewal) {
    this._renewals = this._renewals.filter((r) => r === renewal || r.answered >= renewal.sent);
    this._settle();
  }

  // Renewals overlap (the timer's, renew(), use()) and the server may apply
  // them in another order than their answers come back: the deadline is
  // the earliest sent + ttl of those that may have been the last one
  // applied, each from when it is sent until a successful renewal sent
  // after its answer came back.
  _settle() {
    if (this.lost) return;
    this._deadline = Math.min(...this._renewals.map((r) => r.sent + r.ttl));
    this._armWatchdog();
  }

  _scheduleRenewal(delay) {
    this._renewTimer = setTimeout(() => this._renewOnce(), delay);
    this._renewTimer.unref();
  }

  async _renewOnce() {
    this._renewTimer = null;
    if (this._released || this.lost) return;
    const every = this.ttlMs / 3;
    const renewal = this._renewing(this.ttlMs);
    try {
      const { rows } = await poolQuery(this.pool, SQL.renew(this.name, this._token, null));
      renewal.answered = performance.now();
      this.expiresAt = rows[0].expires_at;
      this._renewed(renewal);
    } catch (err) {
      renewal.answered = performance.now();
      if (err instanceof LeaseLostError) {
        this._lose(err);
        return;
      }
      if (performance.now() >= this._deadline) {
        this._lose(this._notRenewed());
        return;
      }
      this.emit('renewalError', err);
      if (!this._released) this._scheduleRenewal(Math.min(every, RETRY_MS));
      return;
    }
    if (!this._released && !this.lost) this._scheduleRenewal(every);
  }

  // Lose the lease at its deadline even if a renewal is stuck.  A timer
  // may run a little before its time (libuv measures it from the loop's
  // cached clock): then it is set again for what is left.
  _armWatchdog() {
    if (this._watchdog !== null) clearTimeout(this._watchdog);
    const delay = Math.max(0, this._deadline - performance.now());
    this._watchdog = setTimeout(() => {
      this._watchdog = null;
      if (this._released || this.lost) return;
      if (performance.now() >= this._deadline) this._lose(this._notRenewed());
      else this._armWatchdog();
    }, delay);
    this._watchdog.unref();
  }

  _loseOn(err) {
    if (err instanceof LeaseLostError) {
      this._lose(err);
    } else if (err instanceof StaleTokenError) {
      this._lose(new LeaseLostError(`fencing lease "${this.name}": a newer holder fenced this one out ` +
        `(${err.message})`, { cause: err }));
    }
  }

  _lose(reason) {
    if (this.lost) return;
    this._stopTimers();
    this._controller.abort(reason);
    this.emit('lost', reason);
  }

  _stopTimers() {
    if (this._renewTimer !== null) clearTimeout(this._renewTimer);
    if (this._watchdog !== null) clearTimeout(this._watchdog);
    this._renewTimer = null;
    this._watchdog = null;
  }
}

// `await using lease = await Lease.acquire(...)` releases at the end of the
// block, where the Node version has explicit resource management.
const asyncDispose = Symbol.asyncDispose || Symbol.for('nodejs.asyncDispose');
Lease.prototype[asyncDispose] = async function dispose() {
  if (!this._released) await this.release();
};

module.exports = {
  Lease,
  tryLock,
  lock,
  translate,
  FencingError,
  BusyError,
  LeaseLostError,
  StaleTokenError,
  NameCollisionError,
  NotPreloadedError,
  NotInTransactionError,
};
