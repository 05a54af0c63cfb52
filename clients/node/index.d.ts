// Copyright (c) 2026, the fencing developers
//
// Type declarations of pg-fencing.  The pool and client types are
// node-postgres's (`@types/pg`), described here by what pg-fencing calls.

import { EventEmitter } from 'node:events';

/** A node-postgres Pool: renewals and lease calls go through pool.query. */
export interface PoolLike {
  query(text: string, values?: any[]): Promise<any>;
  connect(): Promise<any>;
  readonly totalCount: number;
  readonly idleCount: number;
}

/**
 * One node-postgres client (a Client, or a PoolClient from pool.connect()).
 * The methods that take a client are generic over its type, so a callback
 * gets the client it was given (its rowCount, its release()).
 */
export interface ClientLike {
  query(text: string, values?: any[]): Promise<any>;
}

export interface AcquireOptions {
  /** How long the lease lasts without a renewal (default 30000). */
  ttlMs?: number;
  /** How long to wait for a held name: 0 (default) tries once, null waits as long as it takes. */
  timeoutMs?: number | null;
  /** What fencing.leases shows as the holder (default: host and pid). */
  holder?: string | null;
  /** Renew every ttl/3 from a timer (default true). */
  renew?: boolean;
  /** Stops a waiting acquire: it rejects with signal.reason, holding nothing. */
  signal?: AbortSignal;
  /** The lease never lasts past this long after it was taken (ShedLock's lockAtMostFor). */
  atMostMs?: number | null;
  /** A release before this long after it was taken leaves the name taken until then (lockAtLeastFor). */
  atLeastMs?: number | null;
}

export interface OnceOptions {
  ttlMs?: number;
  timeoutMs?: number | null;
  holder?: string | null;
}

/** What Lease.runOnce() returns: the token the job ran under, and the results of its statements. */
export interface OnceResult {
  token: bigint;
  results: any[];
}

/** What JSON.stringify(lease) writes: the token as text. */
export interface LeaseJSON {
  name: string;
  token: string;
  ttlMs: number;
  expiresAt: Date | null;
  lost: boolean;
}

export class Lease extends EventEmitter {
  /** A Lease, or null when the name stayed held for timeoutMs. */
  static acquire(pool: PoolLike, name: string, options?: AcquireOptions): Promise<Lease | null>;
  /** Acquire (BusyError when not granted), run fn, release: redlock's using(). */
  static using<T>(pool: PoolLike, name: string, options: AcquireOptions,
    fn: (lease: Lease, signal: AbortSignal) => Promise<T>): Promise<T>;
  /** A job that fits one batch (SQL text without values), in one round trip; null when the name is held. */
  static runOnce(pool: PoolLike, name: string, options: OnceOptions, sql: string): Promise<OnceResult | null>;
  /** True when anybody holds a lease on name. */
  static locked(pool: PoolLike, name: string): Promise<boolean>;

  readonly pool: PoolLike;
  readonly name: string;
  readonly ttlMs: number;
  readonly atMostMs: number | null;
  readonly atLeastMs: number | null;
  /** True while renewals fail and the lease is not lost yet. */
  readonly suspended: boolean;
  /** The fence token: tokens exceed 2^53, so a BigInt. */
  readonly token: bigint;
  /** Aborted, with a LeaseLostError as its reason, when the lease is lost (after the 'lost' listeners ran). */
  readonly signal: AbortSignal;
  /** True from the moment the lease is lost. */
  readonly lost: boolean;
  /** The server's expiry after the last renewal this lease made. */
  expiresAt: Date | null;

  /** First statement of each batch transaction: check, renew, fence, set fencing.token. */
  use(client: ClientLike): Promise<bigint>;
  /** Only fencing.set_token(token) in the client's transaction. */
  bind(client: ClientLike): Promise<bigint>;
  /** BEGIN and use() in one round trip, fn(client), COMMIT (ROLLBACK when fn throws). */
  transaction<C extends ClientLike, T>(client: C, fn: (client: C) => Promise<T>): Promise<T>;
  renew(options?: { ttlMs?: number }): Promise<Date>;
  owned(): Promise<boolean>;
  locked(): Promise<boolean>;
  toJSON(): LeaseJSON;
  /** LeaseLostError when the server no longer held it with this token. */
  release(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;

  on(event: 'lost', listener: (reason: LeaseLostError) => void): this;
  on(event: 'renewalError', listener: (error: Error) => void): this;
  on(event: 'suspended', listener: (error: Error) => void): this;
  on(event: 'resumed', listener: () => void): this;
  on(event: string | symbol, listener: (...args: any[]) => void): this;
}

/** fencing.try_lock in the client's transaction: the token, or null when held. */
export function tryLock(client: ClientLike, name: string): Promise<bigint | null>;
/** fencing.lock in the client's transaction; BusyError when timeoutMs passed. */
export function lock(client: ClientLike, name: string, options?: { timeoutMs?: number | null }): Promise<bigint>;
/** The pg-fencing error for a node-postgres error, or null. */
export function translate(err: unknown, options?: { lockHeld?: boolean }): FencingError | null;

export class FencingError extends Error {
  /** The SQLSTATE, or FENCING_BUSY for a BusyError. */
  readonly code: string;
  readonly cause?: unknown;
}
export class BusyError extends FencingError {}
export class LeaseLostError extends FencingError {}
export class StaleTokenError extends FencingError {}
export class NameCollisionError extends FencingError {}
export class NotPreloadedError extends FencingError {}
export class NotInTransactionError extends FencingError {}
