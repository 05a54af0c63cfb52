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

const crypto = require('node:crypto');
const { EventEmitter } = require('node:events');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

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
  // use_lease renews for the ttl the lease was taken with; under
  // atMostMs, a renewal for what is left follows it in the same statement.
  useCapped: (name, token, ttl) => `SELECT fencing.use_lease(${leaseName(name)}, ${sqlBigint(token)}), ` +
    `fencing.renew_lease(${leaseName(name)}, ${sqlBigint(token)}, ${sqlInterval(ttl)})`,
  setToken: (token) => `SELECT fencing.set_token(${sqlBigint(token)})`,
  locked: (name) => 'SELECT EXISTS (SELECT 1 FROM fencing.leases' +
    ' WHERE database = pg_catalog.current_database()' +
    ` AND name = fencing.normalize_name(${leaseName(name)})` +
    ' AND expires_at > pg_catalog.clock_timestamp()) AS locked',
  // Lease.runOnce(): the acquisition keeps its token in a setting of the
  // session ('0' when the name stayed held, which use_lease refuses with
  // FN004, so the query stops there); the setting outlives the COMMIT, so
  // the release can name the token, and empties it; a batch that fails
  // rolls it back with it.  After a failed job, the lease it may hold is
  // found by its holder, unique to the call, and released.
  onceAcquire: (name, ttl, wait, holder) => "SELECT pg_catalog.set_config('pgfencing.lease', " +
    `coalesce(fencing.acquire_lease(${leaseName(name)}, ${sqlInterval(ttl)}, ${sqlInterval(wait)}, ` +
    `${sqlText(holder, 'the holder')})::pg_catalog.text, '0'), false) AS token`,
  onceUse: (name) => `SELECT fencing.use_lease(${leaseName(name)}, ` +
    "pg_catalog.current_setting('pgfencing.lease')::bigint)",
  onceRelease: (name) => `SELECT fencing.release_lease(${leaseName(name)}, ` +
    "pg_catalog.current_setting('pgfencing.lease')::bigint) AS released, " +
    "pg_catalog.set_config('pgfencing.lease', '', false)",
  onceCleanup: (name, holder) => 'SELECT fencing.release_lease(name, token) AS released FROM fencing.leases' +
    ' WHERE database = pg_catalog.current_database()' +
    ` AND name = fencing.normalize_name(${leaseName(name)}) AND holder = ${sqlText(holder, 'the holder')}`,
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

// Did the server end the session for idling in its transaction past its
// limit (25P03)?  node-postgres reports the server's FATAL as an error
// event of the client, and the next query as a broken connection.
function idledOut(err, heard) {
  return err.code === '25P03' || heard.some((e) => e.code === '25P03');
}

function idleLost(name, ttlMs, cause, what = 'batch') {
  return new LeaseLostError(`fencing lease "${name}": the ${what} idled in its transaction past the ` +
    `lease's ttl of ${ttlMs} ms, and the server ended its session`, { cause, code: '25P03' });
}

// Tell the server to cancel what client runs (the protocol's
// CancelRequest, on a connection of its own, as libpq's PQcancel sends
// it); settles once the server has closed that connection, after it
// signalled the backend.
function cancelRequest(client) {
  const params = client.connectionParameters || {};
  const host = params.host || 'localhost';
  const port = params.port || 5432;
  return new Promise((resolve) => {
    const socket = host.startsWith('/') ? net.connect(path.join(host, `.s.PGSQL.${port}`)) : net.connect(port, host);
    socket.on('connect', () => {
      const message = Buffer.alloc(16);
      message.writeInt32BE(16, 0);
      message.writeInt32BE(80877102, 4);
      message.writeInt32BE(client.processID, 8);
      message.writeInt32BE(client.secretKey, 12);
      socket.end(message);
    });
    socket.on('error', () => {});
    socket.on('close', resolve);
  });
}

function abortError(signal) {
  return signal.reason !== undefined ? signal.reason : new DOMException('This operation was aborted', 'AbortError');
}

// acquire_lease on a client of its own, stopped by signal, also while the
// pool has no client for it yet: a CancelRequest ends the server's wait; a
// grant that came before it is released.
async function acquireCancellable(pool, text, name, signal) {
  if (signal.aborted) throw abortError(signal);
  const client = await pool.connect();
  let cancelling = null;
  const onAbort = () => {
    cancelling = cancelRequest(client);
  };
  signal.addEventListener('abort', onAbort, { once: true });
  try {
    // an abort while the pool had no client for it: nothing was sent
    if (signal.aborted) throw abortError(signal);
    let rows;
    try {
      ({ rows } = await client.query(text));
    } catch (err) {
      if (cancelling !== null) {
        await cancelling;
        throw abortError(signal);
      }
      rethrow(err);
    }
    signal.removeEventListener('abort', onAbort);
    if (cancelling !== null) {
      await cancelling; // the backend was signalled: nothing sent after this is cancelled
      if (rows[0].token !== null) await client.query(SQL.release(name, BigInt(rows[0].token)));
      throw abortError(signal);
    }
    return rows;
  } finally {
    signal.removeEventListener('abort', onAbort);
    client.release();
  }
}

// The shortest renewal the server takes: 1 ms.
const SHORTEST_MS = 1;

// A lease on a name held by the server across COMMITs, ROLLBACKs and
// reconnects, until released or until ttlMs passes without a renewal.  A
// timer renews it every ttl/3 through the pool (never through the client
// doing the work); when that fails with FN004, or cannot get through before
// the lease may have expired, the lease is lost: `lost` becomes true, the
// 'lost' listeners run, then `signal` aborts with a LeaseLostError, and
// the next use() throws.
class Lease extends EventEmitter {
  constructor(pool, name, token, ttlMs, sentAt, grantedTtl, { atMostMs = null, atLeastMs = null } = {}) {
    super();
    this.pool = pool;
    this.name = name;
    this.ttlMs = ttlMs;
    this.atMostMs = atMostMs;
    this.atLeastMs = atLeastMs;
    this._token = token;
    this._acquiredAt = sentAt;
    this._controller = new AbortController();
    this._lost = false;
    this._lostReason = null;
    this.suspended = false;
    // {sent, ttl, answered} of each renewal that may have been the last one
    // the server applied (the acquisition first); see _settle().
    this._renewals = [{ sent: sentAt, ttl: grantedTtl, answered: performance.now() }];
    this._released = false;
    this._renewTimer = null;
    this._watchdog = null;
    this.expiresAt = null;
    this._settle();
  }

  // Take the lease: a Lease, or null when the name stayed held for
  // timeoutMs (default 0: try once; null: as long as it takes).  The wait
  // is the server's.  signal (an AbortSignal) stops a waiting acquire: it
  // throws signal.reason, holding nothing.  atMostMs: the lease never
  // lasts past that long after it was taken, however often renewed;
  // atLeastMs: a release before that long after it was taken leaves the
  // name taken until then.
  static async acquire(pool, name, {
    ttlMs = 30000, timeoutMs = 0, holder, renew = true, signal, atMostMs = null, atLeastMs = null,
  } = {}) {
    if (!isPool(pool)) {
      throw new TypeError('Lease.acquire() needs a pg Pool: the lease renews on a connection ' +
        'of its own while your client does the work');
    }
    if (typeof name !== 'string') throw new TypeError('the lease name must be a string');
    const ttl = milliseconds(ttlMs, 'ttlMs', { positive: true });
    if (ttl === null) throw new RangeError('ttlMs must be finite');
    const atMost = milliseconds(atMostMs, 'atMostMs', { positive: true });
    const atLeast = milliseconds(atLeastMs, 'atLeastMs', { positive: false });
    if (atMost !== null && atLeast !== null && atLeast > atMost) {
      throw new RangeError('atLeastMs must not be longer than atMostMs');
    }
    const granted = atMost === null ? ttl : Math.min(ttl, atMost);
    let remaining = milliseconds(timeoutMs, 'timeoutMs', { positive: false });
    const deadline = remaining === null ? null : Date.now() + remaining;
    const who = holder !== undefined ? holder : `${os.hostname()} pid ${process.pid}`;
    for (;;) {
      const wait = remaining === null ? LONGEST_WAIT_MS : Math.min(remaining, LONGEST_WAIT_MS);
      const sentAt = performance.now();
      const text = SQL.acquire(name, granted, wait, who);
      const rows = signal ? await acquireCancellable(pool, text, name, signal) : (await poolQuery(pool, text)).rows;
      if (rows[0].token !== null) {
        const lease = new Lease(pool, name, bigint(rows[0].token), ttl, sentAt, granted,
          { atMostMs: atMost, atLeastMs: atLeast });
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

  // A job that fits one batch, in one round trip: one query string of
  // BEGIN, the acquisition, use_lease, the job's statements (sql: SQL
  // text without values, one statement or several), COMMIT and the
  // release.  { token, results } (the job's results), or null when the
  // name stayed held for timeoutMs; a job that fails releases the lease in
  // a second round trip and throws its error, or a LeaseLostError (the
  // error as its cause) when it came past the ttl.  No renewal runs: the
  // job must end within the ttl.
  static async runOnce(pool, name, { ttlMs = 30000, timeoutMs = 0, holder } = {}, sql) {
    if (!isPool(pool)) throw new TypeError('Lease.runOnce() needs a pg Pool');
    if (typeof name !== 'string') throw new TypeError('the lease name must be a string');
    if (typeof sql !== 'string' || sql.trim() === '') throw new TypeError('Lease.runOnce() needs the SQL text of the job');
    const ttl = milliseconds(ttlMs, 'ttlMs', { positive: true });
    if (ttl === null) throw new RangeError('ttlMs must be finite');
    const ms = milliseconds(timeoutMs, 'timeoutMs', { positive: false });
    const wait = ms === null ? LONGEST_WAIT_MS : Math.min(ms, LONGEST_WAIT_MS);
    const who = `${holder !== undefined ? holder : `${os.hostname()} pid ${process.pid}`} (once ${crypto.randomBytes(6).toString('hex')})`;
    const job = sql.trim().replace(/;+\s*$/, '');
    const text = ['BEGIN', SQL.onceAcquire(name, ttl, wait, who), SQL.onceUse(name), job, 'COMMIT',
      SQL.onceRelease(name)].join(';\n');
    const client = await pool.connect();
    const heard = [];
    const absorb = (err) => heard.push(err);
    client.on('error', absorb);
    try {
      let results;
      const sent = performance.now();
      try {
        results = await client.query(text);
      } catch (err) {
        const late = performance.now() >= sent + ttl;
        await client.query('ROLLBACK').catch(() => {});
        const { rows } = await client.query(SQL.onceCleanup(name, who)).catch(() => ({ rows: [null] }));
        if (rows.length === 0 && err.code === 'FN004') return null;
        if (idledOut(err, heard)) throw idleLost(name, ttl, err, 'job');
        const mapped = translate(err) || err;
        if (late && !(mapped instanceof LeaseLostError)) {
          throw new LeaseLostError(`fencing lease "${name}": the job ran past the lease's ttl of ${ttl} ms`,
            { cause: err });
        }
        throw mapped;
      }
      return { token: BigInt(results[1].rows[0].token), results: results.slice(3, results.length - 2) };
    } finally {
      client.off('error', absorb);
      client.release();
    }
  }

  // True when anybody holds a lease on name.
  static async locked(pool, name) {
    const { rows } = await poolQuery(pool, SQL.locked(name));
    return rows[0].locked;
  }

  // The fence token of this holding, a BigInt.
  get token() {
    return this._token;
  }

  // Aborted, with a LeaseLostError as its reason, when the lease is lost
  // (after the 'lost' listeners ran).
  get signal() {
    return this._controller.signal;
  }

  // True from the moment the lease is lost.
  get lost() {
    return this._lost;
  }

  // What JSON.stringify(lease) writes: the token as text (JSON has no
  // BigInt; JSON.stringify throws on one).
  toJSON() {
    return {
      name: this.name,
      token: this._token.toString(),
      ttlMs: this.ttlMs,
      expiresAt: this.expiresAt,
      lost: this._lost,
    };
  }

  // The first statement of each batch transaction on client: checks that
  // the lease is held with this token, renews it, raises the fence of the
  // lease's name to the token and sets the transaction's fencing.token.
  async use(client) {
    this._checkUsable('use()');
    requireClient(client, 'use()');
    const { text, span } = this._useQuery();
    const renewal = this._renewing(span);
    try {
      await client.query(text);
    } catch (err) {
      throw this._failure(err);
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
    try {
      await client.query(SQL.setToken(this._token));
    } catch (err) {
      throw this._failure(err);
    }
    return this._token;
  }

  // One batch: BEGIN and use() in one round trip, fn(client), COMMIT
  // (ROLLBACK when fn throws); returns what fn returned.  Fencing's errors
  // come out as pg-fencing errors; a StaleTokenError or LeaseLostError
  // also loses the lease, and once the lease is lost or past its deadline
  // any error of the batch is a LeaseLostError (the original as its
  // cause).  When fn caught an error of the transaction and went on, the
  // server rolls it back at COMMIT: that error is thrown (the last one the
  // server sent that did not come from the aborted transaction itself).
  async transaction(client, fn) {
    this._checkUsable('transaction()');
    requireClient(client, 'transaction()');
    watchStatus(client);
    const heard = [];
    const hear = (msg) => {
      if (msg.code !== '25P02') heard.push(msg);
    };
    // the server's FATAL while no query runs comes as the client's error
    // event, which would otherwise end the process
    const absorb = (err) => heard.push(err);
    const connection = client.connection && typeof client.connection.on === 'function' ? client.connection : null;
    const emitter = typeof client.on === 'function' && typeof client.off === 'function' ? client : null;
    if (connection) connection.on('errorMessage', hear);
    if (emitter) emitter.on('error', absorb);
    try {
      const { text, span } = this._useQuery();
      const renewal = this._renewing(span);
      try {
        await client.query(`BEGIN; ${text}`);
      } finally {
        renewal.answered = performance.now();
      }
      this._renewed(renewal);
      const result = await fn(client);
      if (txStatus.get(client) === 'E') throw swallowed(heard, this.name);
      const commit = await client.query('COMMIT');
      if (commit.command === 'ROLLBACK') throw swallowed(heard, this.name);
      return result;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      throw this._failure(err, heard);
    } finally {
      if (connection) connection.off('errorMessage', hear);
      if (emitter) emitter.off('error', absorb);
    }
  }

  // Renew now, for ttlMs (default: the lease's ttl; never past atMostMs);
  // the new expiry (Date).
  async renew({ ttlMs } = {}) {
    const ttl = milliseconds(ttlMs, 'ttlMs', { positive: true });
    this._checkUsable('renew()');
    const { ask, span } = this._capped(ttl);
    if (span < SHORTEST_MS) throw this._reachedAtMost();
    const renewal = this._renewing(span);
    let rows;
    try {
      ({ rows } = await this.pool.query(SQL.renew(this.name, this._token, ask)));
    } catch (err) {
      throw this._failure(err);
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

  // True when anybody holds a lease on the name.
  async locked() {
    return Lease.locked(this.pool, this.name);
  }

  // Free the lease.  LeaseLostError when the server no longer held it with
  // this token (it expired or was broken: work after that may have been
  // fenced out).  A release that did not get through (no client, a lost
  // connection) leaves the lease to be released again; meanwhile nothing
  // renews it, and its deadline loses it as ever.  Under atLeastMs, a
  // release before that long after the acquisition renews the lease for
  // what is left of it instead, and the name stays taken until it lapses.
  async release() {
    if (this._released) throw new FencingError(`fencing lease "${this.name}" is already released`);
    this._released = true;
    this._stopTimers();
    const keep = this.atLeastMs === null ? 0 : Math.floor(this._acquiredAt + this.atLeastMs - performance.now());
    let released;
    try {
      if (keep >= SHORTEST_MS) {
        released = await poolQuery(this.pool, SQL.renew(this.name, this._token, keep)).then(() => true, (err) => {
          if (err instanceof LeaseLostError) return false;
          throw err;
        });
      } else {
        ({ rows: [{ released }] } = await poolQuery(this.pool, SQL.release(this.name, this._token)));
      }
    } catch (err) {
      // it did not get through: the lease is still this handle's, renewed
      // no more, and its deadline still loses it
      this._released = false;
      if (!this.lost) this._armWatchdog();
      throw err;
    }
    if (!released) {
      throw new LeaseLostError(`fencing lease "${this.name}" was not held with token ${this._token} any more`);
    }
  }

  _checkUsable(what) {
    if (this._released) throw new FencingError(`${what}: fencing lease "${this.name}" is released`);
    if (!this.lost && performance.now() >= this._deadline) this._lose(this._notRenewed());
    if (this.lost) {
      const reason = this._lostReason;
      throw new LeaseLostError(reason.message, { cause: reason });
    }
  }

  // What an error that an operation of the lease met (use(), a statement
  // of a batch, renew()) reaches the application as: FN004 a
  // LeaseLostError and FN001 a StaleTokenError, both losing the lease; the
  // server ending the batch's session for idling past the ttl (25P03) a
  // LeaseLostError; anything else once the lease is lost or past its
  // deadline a LeaseLostError; else the error as node-postgres threw it,
  // or mapped by its SQLSTATE.  Each after the loss has run, with the
  // original as its cause.  heard: what the server sent the batch's client.
  _failure(err, heard = []) {
    const mapped = translate(err) || err;
    if (mapped instanceof LeaseLostError) {
      this._lose(mapped);
      return mapped;
    }
    if (mapped instanceof StaleTokenError) {
      this._lose(new LeaseLostError(`fencing lease "${this.name}": a newer holder fenced this one out ` +
        `(${mapped.message})`, { cause: mapped }));
      return mapped;
    }
    if (idledOut(err, heard)) {
      const lost = idleLost(this.name, this.ttlMs, err);
      this._lose(lost);
      return lost;
    }
    if (!this.lost && !this._released && performance.now() >= this._deadline) this._lose(this._notRenewed());
    if (this.lost) return new LeaseLostError(this._lostReason.message, { cause: err });
    return mapped;
  }

  _notRenewed() {
    return new LeaseLostError(`fencing lease "${this.name}" was not renewed within its ttl of ` +
      `${this.ttlMs} ms: it may have expired`);
  }

  _reachedAtMost() {
    const lost = new LeaseLostError(`fencing lease "${this.name}" reached its atMostMs of ${this.atMostMs} ms`);
    this._lose(lost);
    return lost;
  }

  // {ask, span} of a renewal of ttl ms (null: the lease's own) sent now:
  // what it asks the server for (null: the lease's ttl) and the ttl it
  // gets; under atMostMs never past acquired + atMostMs.
  _capped(ttl) {
    const span = ttl === null ? this.ttlMs : ttl;
    if (this.atMostMs === null) return { ask: ttl, span };
    const left = Math.floor(this._acquiredAt + this.atMostMs - performance.now());
    return left < span ? { ask: left, span: left } : { ask: ttl, span };
  }

  // use_lease for a batch sent now, and the ttl it renews for; under
  // atMostMs, a renewal for what is left follows it in the same statement.
  _useQuery() {
    const { ask, span } = this._capped(null);
    if (ask === null) return { text: SQL.use(this.name, this._token), span };
    if (span < SHORTEST_MS) throw this._reachedAtMost();
    return { text: SQL.useCapped(this.name, this._token, span), span };
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
    const { ask, span } = this._capped(null);
    if (span < SHORTEST_MS) return; // atMostMs: the lease ends at its deadline
    const renewal = this._renewing(span);
    try {
      const { rows } = await poolQuery(this.pool, SQL.renew(this.name, this._token, ask));
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
      if (!this.suspended) {
        this.suspended = true;
        this._tell('suspended', err);
      }
      if (!this._released) this._scheduleRenewal(Math.min(every, RETRY_MS));
      return;
    }
    if (this.suspended) {
      this.suspended = false;
      this._tell('resumed');
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

  // Run the listeners of event one by one: one that throws is logged, and
  // the others run.
  _tell(event, ...args) {
    for (const listener of this.rawListeners(event)) {
      try {
        listener.apply(this, args);
      } catch (err) {
        console.error(`pg-fencing: a '${event}' listener of fencing lease "${this.name}" threw:`, err);
      }
    }
  }

  // Lose the lease, in this order: the flag (`lost`), the timers stopped,
  // the 'lost' listeners, and last the signal, so whoever wakes on it sees
  // what the listeners did.
  _lose(reason) {
    if (this._lost) return;
    this._lost = true;
    this._lostReason = reason;
    this._stopTimers();
    this._tell('lost', reason);
    this._controller.abort(reason);
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
